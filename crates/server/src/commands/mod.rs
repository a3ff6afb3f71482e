//! The subcommands: each loads what it needs, does one thing and prints its
//! result on stdout. `serve` holds the daemon's wiring.

mod admin;
pub mod branch;
mod flow;
mod listing;
mod pool;
mod remote;
mod serve;
mod supervise;

use std::io::{self, Write};

use swarmd_engine::auth::TokenError;

use crate::ServeError;
use crate::cli::{Command, KeysCommand, TokenCommand, WorkerArgs, WorkerCommand, exit};
use crate::daemon::BuildError;
use crate::state::StateError;
use swarmd_client::ClientError;
use swarmd_config::environment::Environment;
use swarmd_config::{Config, ConfigError};

/// Why a subcommand failed; `exit_code` maps it to the process status.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(
        "no credential for the daemon: {reason} (configuration: {config}); pass --token or \
         set SWARMD_TOKEN (or the file of one: --token-file, SWARMD_TOKEN_FILE), or name the \
         daemon's configuration with --config (SWARMD_CONFIG) or its state directory with \
         --state-dir"
    )]
    NoCredential { reason: String, config: String },
    #[error("cannot read the credential file {path} named by {source_name}: {reason}")]
    TokenFile {
        source_name: &'static str,
        path: String,
        reason: String,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("--ttl {ttl_secs} is out of range (1..={max_secs}, auth.max_token_ttl_secs)")]
    Ttl { ttl_secs: u64, max_secs: u64 },
    #[error("cannot mint token: {0}")]
    Token(#[from] TokenError),
    #[error("cannot print the configuration: {0}")]
    Print(#[from] toml::ser::Error),
    #[error(transparent)]
    Mcp(#[from] swarmd_client::mcp::ProxyError),
    /// Arguments that parse but do not go together, or name what the
    /// configuration does not have: exit 64, as a parse error.
    #[error("{0}")]
    Usage(String),
    #[error("cannot {action}: {source}")]
    Io {
        action: &'static str,
        #[source]
        source: io::Error,
    },
}

impl CommandError {
    /// Whether the command stopped because its stdout's reader went away
    /// (`| head`): nothing went wrong that a person needs to read about.
    pub fn is_broken_pipe(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = cause {
            if error
                .downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            {
                return true;
            }
            cause = error.source();
        }
        false
    }

    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Config(_)
            | CommandError::Serve(ServeError::Build(
                BuildError::Agents(_) | BuildError::Flows(_),
            )) => exit::CONFIG,
            CommandError::Ttl { .. } | CommandError::Usage(_) => exit::USAGE,
            _ => exit::FAILURE,
        }
    }
}

pub use supervise::run as supervise;

/// Runs `command` and returns the process exit status.
///
/// # Errors
/// A `CommandError` for `main` to print as one line.
pub async fn execute(command: Command, env: &Environment) -> Result<u8, CommandError> {
    match command {
        Command::Serve(args) => serve::serve(&args, env).await.map(|()| exit::OK),
        Command::CheckConfig(args) => {
            let config = Config::load(&args.config.config_path(env), env, &args.overrides())?;
            config.check_start_files()?;
            crate::daemon::link_agents(&config, env).map_err(ServeError::Build)?;
            crate::daemon::check_flows(&config).map_err(ServeError::Build)?;
            // Risky settings that start: one line each on stderr, so that
            // stdout stays a configuration that loads back.
            let mut stderr = io::stderr().lock();
            for warning in config.warnings() {
                let _ = writeln!(stderr, "swarmd: warning: {warning}");
            }
            drop(stderr);
            print(config.to_toml_redacted()?.trim_end())?;
            Ok(exit::OK)
        }
        Command::Keys(KeysCommand::Rotate(args)) => admin::rotate_keys(&args, env).await,
        Command::AdminToken(args) => admin::admin_token(&args, env).await,
        Command::Token(TokenCommand::Mint(args)) => admin::mint_token(&args, env).await,
        Command::Task(args) => remote::task(*args, env).await,
        Command::Flow(args) => flow::run(*args, env).await,
        Command::Branch(args) => branch::run(*args, env).await,
        Command::Agents(args) => listing::agents(&args, env).await,
        Command::Sessions(args) => listing::sessions(&args, env).await,
        Command::Status(args) => listing::status(&args, env).await,
        Command::Worker(WorkerArgs {
            pool: Some(WorkerCommand::Pool(args)),
            ..
        }) => pool::pool(*args, env).await,
        Command::Worker(args) => remote::worker(args).await,
        Command::Mcp(args) => remote::mcp(args, env).await,
        // It needs a process with one thread: `main` runs it before the runtime.
        Command::Supervise(_) => Err(CommandError::Io {
            action: "supervise",
            source: io::Error::other("`swarmd supervise` runs only as the process's first command"),
        }),
    }
}

/// Writes one line to stdout; a closed stdout is an error, not a panic.
fn print(text: &str) -> Result<(), CommandError> {
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|source| CommandError::Io {
            action: "write to stdout",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_stdout_is_told_from_other_failures_at_any_depth() {
        let pipe = || io::Error::from(io::ErrorKind::BrokenPipe);
        let direct = CommandError::Io {
            action: "write to stdout",
            source: pipe(),
        };
        assert!(direct.is_broken_pipe());
        let through_client = CommandError::Client(ClientError::Io {
            action: "write to stdout",
            source: pipe(),
        });
        assert!(through_client.is_broken_pipe());
        let other = CommandError::Io {
            action: "write to stdout",
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert!(!other.is_broken_pipe());
    }
}
