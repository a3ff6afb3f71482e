//! Logging: a `tracing` subscriber writing to stderr (journald captures it),
//! as text or JSON lines, filtered by `RUST_LOG` (default `DEFAULT_FILTER`). Colours
//! only when stderr is a terminal.
//!
//! Whatever `RUST_LOG` says, the protocol libraries are capped at `info`
//! (`CREDENTIAL_CAPS`): at `debug` and `trace` they dump frames, headers and
//! bodies, which carry tokens, handles and session secrets.
//!
//! Only `main` calls `init`; libraries and tests emit events without owning
//! the subscriber.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The filter used when `RUST_LOG` is unset: `info`, but `warn` for the
/// embedded asset server (a line per asset route at start) and the MCP
/// library (the whole peer description at each handshake). The PostgreSQL driver logs each server NOTICE (`relation … already
/// exists, skipping` at every migration check) at `info`: `warn` too.
pub const DEFAULT_FILTER: &str = "info,memory_serve=warn,rmcp=warn,tokio_postgres=warn";

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

/// Libraries whose `debug`/`trace` output includes raw frames, headers or
/// bodies (WebSocket frames with `spawn` credentials, `Authorization`
/// headers, MCP tool calls and results with worker handles, PostgreSQL
/// statements' parameters with the signing keys and the admin token): they
/// never log below `info`.
pub const CREDENTIAL_CAPS: &[&str] = &[
    "tungstenite",
    "tokio_tungstenite",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "rustls",
    "tower_http",
    "rmcp",
    "tokio_postgres",
    "postgres_protocol",
    "deadpool_postgres",
];

/// Targets that name every MCP session id at `info` (rmcp's session table
/// logs each new one, and each session runs in a span carrying its id):
/// they log at `warn` at most, so ids stay out of the log.
pub const SESSION_ID_CAPS: &[&str] = &["rmcp::transport::streamable_http_server"];

/// Targets that name the MCP session id in every line they log, errors
/// included (the relay's rmcp client: a session deleted, or failing to
/// be): off, since the relay reports its own failures without the id.
pub const SESSION_ID_SILENCED: &[&str] = &["rmcp::transport::streamable_http_client"];

/// Whether the log is JSON: the daemon's lines for a person (where it
/// listens, how to sign in, what a stop waits for) are then log events, so
/// every line on stderr is one JSON object.
static JSON_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Tells a person `text` on stderr: as it is in a text log, as one `info`
/// event per line in a JSON log.
pub fn notice(text: &str) {
    if JSON_LOG.load(std::sync::atomic::Ordering::Relaxed) {
        for line in text.lines() {
            tracing::info!(target: "swarmd::notice", "{line}");
        }
    } else {
        eprintln!("{text}");
    }
}

/// Installs the global subscriber. `filter` is the value of `RUST_LOG`; the
/// `CREDENTIAL_CAPS` apply on top of it.
///
/// # Errors
/// `Filter` when `filter` does not parse; `AlreadyInstalled` on a second call.
pub fn init(format: LogFormat, filter: Option<&str>) -> Result<(), TelemetryError> {
    JSON_LOG.store(
        format == LogFormat::Json,
        std::sync::atomic::Ordering::Relaxed,
    );
    let filter = build_filter(filter)?.and(credential_caps());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.with_filter(filter).boxed(),
        LogFormat::Json => layer
            .json()
            .with_current_span(true)
            .with_filter(filter)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)
}

/// Every target at any level, but the `CREDENTIAL_CAPS` at `info` at most,
/// the `SESSION_ID_CAPS` at `warn` and the `SESSION_ID_SILENCED` off.
fn credential_caps() -> Targets {
    let caps = CREDENTIAL_CAPS.iter().fold(
        Targets::new().with_default(LevelFilter::TRACE),
        |caps, target| caps.with_target(*target, LevelFilter::INFO),
    );
    let caps = SESSION_ID_CAPS.iter().fold(caps, |caps, target| {
        caps.with_target(*target, LevelFilter::WARN)
    });
    SESSION_ID_SILENCED.iter().fold(caps, |caps, target| {
        caps.with_target(*target, LevelFilter::OFF)
    })
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
        let default = build_filter(None).unwrap().to_string();
        for directive in [
            "info",
            "memory_serve=warn",
            "rmcp=warn",
            "tokio_postgres=warn",
        ] {
            assert!(default.split(',').any(|d| d == directive), "{default}");
        }
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

    #[test]
    fn protocol_libraries_never_log_below_info() {
        use tracing::Level;

        let caps = credential_caps();
        for target in [
            "tungstenite::protocol",
            "hyper::proto::h1",
            "reqwest::connect",
            "tokio_postgres::query",
        ] {
            assert!(caps.would_enable(target, &Level::INFO), "{target}");
            assert!(!caps.would_enable(target, &Level::DEBUG), "{target}");
            assert!(!caps.would_enable(target, &Level::TRACE), "{target}");
        }
        assert!(caps.would_enable("swarmd_server::ws", &Level::TRACE));
        let sessions = "rmcp::transport::streamable_http_server::session::local";
        assert!(caps.would_enable(sessions, &Level::WARN));
        assert!(!caps.would_enable(sessions, &Level::INFO));
        assert!(caps.would_enable("rmcp::service", &Level::INFO));
        // The relay's client names its session id even in its errors.
        let client = "rmcp::transport::streamable_http_client";
        assert!(!caps.would_enable(client, &Level::ERROR));
    }
}
