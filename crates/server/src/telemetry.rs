//! Logging: a `tracing` subscriber writing to stderr (journald captures it),
//! as text or JSON lines, filtered by `RUST_LOG` (default `info`). Colours
//! only when stderr is a terminal.
//!
//! Only `main` calls `init`; libraries and tests emit events without owning
//! the subscriber.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// The filter used when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info";

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with span fields.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid RUST_LOG `{filter}`: {source}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Installs the global subscriber. `filter` is the value of `RUST_LOG`.
///
/// # Errors
/// `Filter` when `filter` does not parse; `AlreadyInstalled` on a second call.
pub fn init(format: LogFormat, filter: Option<&str>) -> Result<(), TelemetryError> {
    let filter = build_filter(filter)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    installed.map_err(|_| TelemetryError::AlreadyInstalled)
}

fn build_filter(filter: Option<&str>) -> Result<EnvFilter, TelemetryError> {
    let filter = filter.unwrap_or(DEFAULT_FILTER);
    EnvFilter::from_str(filter).map_err(|source| TelemetryError::Filter {
        filter: filter.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_defaults_to_info_and_rejects_garbage() {
        assert_eq!(build_filter(None).unwrap().to_string(), "info");
        assert_eq!(
            build_filter(Some("swarmd_server=debug"))
                .unwrap()
                .to_string(),
            "swarmd_server=debug"
        );
        assert!(matches!(
            build_filter(Some("[[[")),
            Err(TelemetryError::Filter { .. })
        ));
    }
}
