//! `ConfigError`: an agent, middleware or senior setting that cannot be
//! linked, named with the reason; reported all together at startup.

use std::fmt;

use swarmd_engine::SpawnError;

use crate::lua::LuaError;
use crate::process::ProcessError;

/// Why part of the spawner configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("agent `{agent}`: {source}")]
    Process {
        agent: String,
        #[source]
        source: ProcessError,
    },
    #[error("agent `{agent}`: {source}")]
    Lua {
        agent: String,
        #[source]
        source: LuaError,
    },
    #[error("agent `{agent}`: {reason}")]
    Invalid { agent: String, reason: &'static str },
    #[error("agent `{agent}` is configured twice")]
    Duplicate { agent: String },
    #[error(transparent)]
    Link(#[from] SpawnError),
    #[error("lua middleware `{name}`: {source}")]
    Middleware {
        name: String,
        #[source]
        source: LuaError,
    },
    #[error("agent `{agent}`: {reason}")]
    InputSchema { agent: String, reason: String },
    #[error("agent `{agent}`: {reason}")]
    Worktree { agent: String, reason: String },
    #[error("senior.agent names `{0}`, which is not a configured agent")]
    UnknownSeniorAgent(String),
}

/// Every problem found; `Display` is one line listing them all.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, error) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
