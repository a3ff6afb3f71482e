//! The daemon's configuration: one typed `Config`, read once at startup
//! (docs/configuration.md).
//!
//! Sources, later wins: built-in defaults (the state directory defaults to
//! `$STATE_DIRECTORY`, else the per-user XDG state directory), the TOML file, `SWARMD_SECTION__KEY` environment
//! variables, then CLI flags (`Overrides`). `Config::load` merges them,
//! resolves what needs the file system once (agents_dir, system prompt files,
//! inherited child environment) and validates; after that the struct is plain
//! data that nothing re-reads. Relative paths resolve against the working
//! directory. Secrets never live here: process `env` values are redacted in
//! `Debug` and printed output, key material and the admin token stay in
//! the daemon's state directory. An agent's MCP tool name is checked
//! against the MCP tools when the daemon links its agents.

mod agent;
mod agent_specs;
mod agents_dir;
pub mod environment;
mod error;
mod flows_dir;
mod hosts;
mod load;
mod locations;
mod origin;
mod print;
mod sections;
mod sources;
mod validate;
mod warnings;
mod worktree;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize, Serializer};

pub use agent::{
    Agent, AgentKind, AgentOrigin, AgentShapeError, DEFAULT_MAX_OUTPUT_BYTES, EnvSpec, EnvVars,
    LuaAgent, MAX_TOOL_TIMEOUT_SECS, MergeAgent, OperatorAgent, ProcessAgent, REDACTED,
    RemoteAgent, StdinMode, StreamMode, WorkerBinding,
};
pub use agents_dir::{AgentsDirConfig, load_agents_dir, parse_agent_file, parse_toml_agent_file};
pub use environment::{CLI_ENV_VARS, ENV_PREFIX};
pub use error::ConfigError;
pub use flows_dir::FlowsDirConfig;
pub use hosts::{HostRules, Origin, parse_origin};
pub use load::Overrides;
pub use locations::{
    ConfigPath, DEFAULT_CONFIG_PATH, config_candidates, default_state_dir, user_state_dir,
};
pub use sections::{
    AuthConfig, ClusterConfig, DEFAULT_NODE_LEASE_SECS, DEFAULT_STATE_DIR, DefaultsConfig,
    LimitsConfig, LuaConfig, LuaMiddleware, McpConfig, RetentionConfig, RetryOn, SeniorConfig,
    ServerConfig, SpawnerConfig, StoreBackend, StoreConfig, Synchronous, WsConfig,
};
pub use validate::HINT_LAYERS;
pub use worktree::{KeepWorktree, WorktreeConfig};

/// The whole configuration (docs/configuration.md). Built by `Config::load`; every
/// section has defaults, so an empty file is a valid configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the listener.
    pub server: ServerConfig,
    /// `[store]`: backend and state directory.
    pub store: StoreConfig,
    /// `[auth]`: credentials and their lifetimes.
    pub auth: AuthConfig,
    /// `[limits]`: global bounds.
    pub limits: LimitsConfig,
    /// `[defaults]`: task policy defaults.
    pub defaults: DefaultsConfig,
    /// `[ws]`: MainAI WebSocket sessions.
    pub ws: WsConfig,
    /// `[senior]`: who answers escalations.
    pub senior: SeniorConfig,
    /// `[mcp]`: the MCP server.
    pub mcp: McpConfig,
    /// `[lua]`: Lua limits and middleware.
    pub lua: LuaConfig,
    /// `[agents.NAME]` (from the file or environment variables), plus the
    /// agents read from `agents_dir`; each agent's `origin` says which.
    #[serde(serialize_with = "serialize_configured_agents")]
    pub agents: BTreeMap<String, Agent>,
    /// `[agents_dir]`: agent files (TOML or Markdown); unset: none are read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents_dir: Option<AgentsDirConfig>,
    /// `[flows_dir]`: flow files (JSON or TOML IR); unset: none are read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows_dir: Option<FlowsDirConfig>,
    /// `[retention]`: pruning of finished tasks.
    pub retention: RetentionConfig,
    /// `[spawner]`: process worker settings.
    pub spawner: SpawnerConfig,
    /// `[cluster]`: this node among several on PostgreSQL; only with that
    /// backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// The file this configuration was read from, if any.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl Config {
    /// The base URL workers and MainAIs are given: `server.base_url`, else
    /// `http://` + the bound address, with a wildcard IP replaced by loopback.
    pub fn base_url(&self, bound: SocketAddr) -> String {
        match &self.server.base_url {
            Some(url) => url.clone(),
            None => local_url(bound),
        }
    }
}

/// `http://` + `bound`, with a wildcard IP replaced by loopback: the URL a
/// client on this machine uses to reach a listener bound to `bound`.
pub fn local_url(bound: SocketAddr) -> String {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, bound.port()))
}

/// Serializes `[agents.NAME]` entries only: agents read from `agents_dir` are
/// represented by `[agents_dir]`, so printed output loads back unchanged.
fn serialize_configured_agents<S: Serializer>(
    agents: &BTreeMap<String, Agent>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(
        agents
            .iter()
            .filter(|(_, agent)| !agent.origin.is_agent_file()),
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sources;
