//! `ConfigError`: every way a configuration can be refused, each with one
//! line of text that names the key and where it came from.

use std::io;
use std::path::PathBuf;

/// Why the configuration was refused. `Display` is one line, fit for the
/// "exit 78 with one clear line" rule (docs/configuration.md, Sources).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unknown key `{key}` in {}{}", path.display(), at_line(*line))]
    UnknownKey {
        key: String,
        path: PathBuf,
        line: Option<usize>,
    },
    #[error("{}{}: {message}", path.display(), at_line(*line))]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error(
        "unknown environment variable {var}: configuration variables are spelled \
         SWARMD_SECTION__KEY (for example SWARMD_SERVER__BIND)"
    )]
    UnknownEnvVar { var: String },
    #[error("invalid environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("`{key}` = {value} is out of range (allowed {min}..={max})")]
    OutOfRange {
        key: String,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("invalid `{key}`: {reason}")]
    Invalid { key: String, reason: String },
    #[error("`{key}` names {}, which cannot be used: {source}", path.display())]
    Unreadable {
        key: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("agent `{agent}` of kind {kind}: key `{key}` belongs to another kind")]
    KeyNotForKind {
        agent: String,
        kind: &'static str,
        key: &'static str,
    },
    #[error("agent `{agent}` of kind {kind} needs `{key}`")]
    MissingKey {
        agent: String,
        kind: &'static str,
        key: &'static str,
    },
    #[error("`{key}` names unknown agent `{agent}`")]
    UnknownAgent { key: String, agent: String },
    #[error(
        "agent `{agent}`: unknown layer `{layer}` (hint layers are main_ai, senior_escalation, \
         operator_delegate and lua:<name> for a configured [lua.middleware.<name>])"
    )]
    UnknownLayer { agent: String, layer: String },
    #[error("invalid agent file {}: {reason}", path.display())]
    AgentFile { path: PathBuf, reason: String },
    #[error("agent `{name}` is defined twice: by {first} and by {second}")]
    DuplicateAgent {
        name: String,
        first: String,
        second: String,
    },
    /// A problem with a value whose source is known: the configuration
    /// file, an environment variable, or an agent file.
    #[error("{error} (from {origin})")]
    Sourced {
        origin: String,
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The problem itself, without the source `Sourced` adds.
    pub fn root(&self) -> &ConfigError {
        match self {
            ConfigError::Sourced { error, .. } => error.root(),
            error => error,
        }
    }
}

fn at_line(line: Option<usize>) -> String {
    line.map(|line| format!(" at line {line}"))
        .unwrap_or_default()
}
