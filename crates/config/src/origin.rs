//! `AgentOrigin`: where an agent was defined, which `check-config`, errors
//! and `GET /v1/agents` name.

use std::path::{Path, PathBuf};

use crate::environment::ENV_PREFIX;

/// Where an agent was defined (docs/configuration.md, Agent files).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentOrigin {
    /// `[agents.NAME]` in the configuration file (environment variables may
    /// override some of its keys).
    #[default]
    ConfigFile,
    /// Only `SWARMD_AGENTS__NAME__*` environment variables.
    Env,
    /// A file of `agents_dir`.
    AgentFile(PathBuf),
}

impl AgentOrigin {
    /// The kind of source, as `GET /v1/agents` names it: `config_file`,
    /// `environment` or `agent_file`.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentOrigin::ConfigFile => "config_file",
            AgentOrigin::Env => "environment",
            AgentOrigin::AgentFile(_) => "agent_file",
        }
    }

    /// The source of agent `name` for people: the file it is in, or the
    /// variables that define it. `config_file` is the configuration file read.
    pub fn describe(&self, name: &str, config_file: Option<&Path>) -> String {
        match (self, config_file) {
            (AgentOrigin::ConfigFile, Some(path)) => {
                format!("[agents.{name}] in {}", path.display())
            }
            (AgentOrigin::ConfigFile, None) => format!("[agents.{name}]"),
            (AgentOrigin::Env, _) => format!(
                "environment variables {}{}__*",
                ENV_PREFIX,
                format!("agents__{name}").to_uppercase()
            ),
            (AgentOrigin::AgentFile(path), _) => format!("agent file {}", path.display()),
        }
    }

    /// Whether the agent came from a file of `agents_dir`.
    pub fn is_agent_file(&self) -> bool {
        matches!(self, AgentOrigin::AgentFile(_))
    }
}
