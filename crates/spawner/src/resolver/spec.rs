//! Agent and spawner configuration as plain structs: the server maps its TOML
//! (`[agents.NAME]`, `[lua.middleware.NAME]`, `[senior]`, …) onto these.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::layers::SeniorSettings;
use crate::process::{HostEnv, ProcessSpec, Supervisor};
use crate::remote::{RemotePools, RemoteRun};
use swarmd_git::merge::MergeSpec;
use swarmd_git::worktree::{WorktreeSpec, Worktrees};

/// One configured agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub name: String,
    pub kind: AgentKind,
    /// Hint layer keys applied to every task of the agent, in order.
    pub layers: Vec<String>,
    pub concurrency: Option<usize>,
    pub allow_subtasks: bool,
    /// A JSON Schema every task's `input` must match.
    pub input_schema: Option<Value>,
    /// Each attempt runs in a worktree of its own (process and operator
    /// agents).
    pub worktree: Option<WorktreeSpec>,
}

/// Which base spawner an agent resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    Process(ProcessSpec),
    Lua(LuaAgentSpec),
    Operator(OperatorSpec),
    /// `kind = "remote"`: queued for worker pools, run with these settings.
    Remote(RemoteRun),
    /// `kind = "merge"`: branches merged into a new one in this repository.
    Merge(MergeSpec),
}

/// `kind = "lua"`: the agent is this script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaAgentSpec {
    pub script: PathBuf,
}

/// `kind = "operator"`: the session that claimed `operator_role` launches
/// it; without one, the least loaded MainAI session.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorSpec {
    pub operator_role: Option<String>,
    /// `{subagent_type, tools, …}`; a table when present.
    pub worker_binding: Option<Value>,
    /// From `system_prompt` or `system_prompt_file`, already read.
    pub system_prompt: Option<String>,
}

/// `[lua.middleware.NAME]`: available as the hint layer `lua:NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaMiddlewareSpec {
    pub name: String,
    pub script: PathBuf,
}

/// Daemon-wide settings the spawners and layers need.
#[derive(Debug, Clone)]
pub struct SpawnerSettings {
    /// `server.base_url`, or the one derived from the bound address.
    pub base_url: String,
    /// The daemon's environment snapshot: `PATH` lookups and env allow-lists.
    pub host_env: HostEnv,
    /// How long `main_ai` waits for `hook_ack`.
    pub hook_timeout: Duration,
    pub senior: SeniorSettings,
    pub middleware: Vec<LuaMiddlewareSpec>,
    /// Process agents' children start under it when set.
    pub supervisor: Option<Supervisor>,
    /// Where agents with `worktree` get theirs; such agents are refused
    /// without it.
    pub worktrees: Option<Arc<Worktrees>>,
    /// Where remote agents' attempts wait for their worker pools.
    pub remote: Arc<RemotePools>,
}

impl SpawnerSettings {
    /// Settings with defaults around `base_url` and `host_env`.
    pub fn new(base_url: &str, host_env: HostEnv) -> SpawnerSettings {
        SpawnerSettings {
            base_url: base_url.to_owned(),
            host_env,
            hook_timeout: Duration::from_secs(30),
            senior: SeniorSettings::default(),
            middleware: Vec::new(),
            supervisor: None,
            worktrees: None,
            remote: Arc::new(RemotePools::new()),
        }
    }
}
