//! `[agents.NAME]`: the agents tasks are spawned for, one typed variant per
//! `kind` (docs/tasks.md, Agents).
//!
//! The file form is one flat table (`RawAgent`, unknown keys refused) that is
//! checked per kind on the way in, so an error still points at its line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize, Serializer};

use super::WorktreeConfig;
pub use super::origin::AgentOrigin;

/// One agent: the keys shared by every kind, and the kind's own settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawAgent", into = "RawAgent")]
pub struct Agent {
    /// Hint layers applied to every task of this agent, in the order named.
    pub layers: Vec<String>,
    /// Attempts of this agent running at once; unset: only `limits.max_running`.
    pub concurrency: Option<u32>,
    /// Whether this agent's workers may spawn sub-tasks (docs/tasks.md, Sub-tasks).
    pub allow_subtasks: bool,
    /// What the agent does, for people and MainAIs.
    pub description: Option<String>,
    /// A JSON Schema every task's `input` must match (docs/tasks.md, Agents).
    pub input_schema: Option<serde_json::Value>,
    /// Whether MCP clients see this agent as a tool of its own (docs/mcp.md,
    /// Agents as tools).
    pub expose_as_tool: bool,
    /// How long a call of the agent's tool waits for the task, in seconds;
    /// unset: `MAX_TOOL_TIMEOUT_SECS`.
    pub tool_timeout_secs: Option<u64>,
    /// Whether the daemon runs this agent. A disabled agent is parsed, so a
    /// mistyped key is still an error, and then dropped before the agent's
    /// program, script or repository is checked (docs/configuration.md).
    pub enabled: bool,
    /// How the work is run.
    pub kind: AgentKind,
    /// Where the agent was defined: the configuration file, environment
    /// variables, or a file of `agents_dir`.
    pub origin: AgentOrigin,
}

/// How an agent's work is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentKind {
    /// A child process per attempt (docs/tasks.md, Process agents).
    Process(ProcessAgent),
    /// An in-process sandboxed Lua script (docs/tasks.md, Lua agents).
    Lua(LuaAgent),
    /// Delegated to a connected MainAI session (docs/tasks.md, Operator agents).
    Operator(OperatorAgent),
    /// Pulled by worker pools on other machines (docs/tasks.md, Remote agents).
    Remote(RemoteAgent),
    /// Merges branches into a new one, in-process (docs/branches.md,
    /// Merging branches).
    Merge(MergeAgent),
}

/// `kind = "merge"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeAgent {
    /// The repository whose branches are merged; absolute.
    pub repo: PathBuf,
    /// What a merge starts from unless its task names a base; unset: `HEAD`.
    pub base: Option<String>,
    /// The one branch this agent may move, only by fast-forward and only
    /// when a task asks.
    pub fast_forward: Option<String>,
    /// The most branches one task may merge.
    pub max_branches: u32,
}

/// Default for `max_branches`.
pub(crate) const DEFAULT_MAX_BRANCHES: u32 = 16;

/// `kind = "remote"`: how a pool runs each attempt; the program is the pool's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteAgent {
    /// What the pool's child reads on stdin.
    pub stdin: StdinMode,
    /// How the pool reads its child's stdout.
    pub stream: StreamMode,
    /// The pool kills the attempt after this many seconds; unset: only the lease applies.
    pub timeout_secs: Option<u64>,
    /// The pool cuts stdout beyond this many bytes and fails the attempt.
    pub max_output_bytes: u64,
}

/// `kind = "process"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessAgent {
    /// The program to run: a path, or a name looked up in swarmd's `PATH`.
    pub program: PathBuf,
    /// Arguments passed to the program; `{resume_session}` in one is the
    /// session a continuation resumes, and an argument holding it is left
    /// out when there is none (docs/tasks.md, Continuations).
    pub args: Vec<String>,
    /// Appended to `args` only when the attempt has a session to resume,
    /// `{resume_session}` replaced by it.
    pub resume_args: Vec<String>,
    /// The child's environment as configured: names passed through from
    /// swarmd's environment, or explicit values.
    pub env: EnvSpec,
    /// `env` resolved at startup: exactly the variables the child gets besides
    /// the `SWARM_*` ones the spawner adds.
    pub resolved_env: EnvVars,
    /// Working directory of the child; unset: swarmd's.
    pub cwd: Option<PathBuf>,
    /// What the child reads on stdin.
    pub stdin: StdinMode,
    /// How the child's stdout is read.
    pub stream: StreamMode,
    /// Kill the attempt after this many seconds; unset: only the lease applies.
    pub timeout_secs: Option<u64>,
    /// Stdout beyond this many bytes is cut and the attempt fails.
    pub max_output_bytes: u64,
    /// Each attempt runs in a git worktree of its own when set.
    pub worktree: Option<WorktreeConfig>,
}

/// How long a call of an agent's tool waits when `tool_timeout_secs` is
/// unset, and the most it may be set to: the longest `wait`.
pub const MAX_TOOL_TIMEOUT_SECS: u64 = 600;

/// Default for `max_output_bytes`: 16 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

/// `kind = "lua"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaAgent {
    /// The script run for each attempt; its return value is the Final.
    pub script: PathBuf,
}

/// `kind = "operator"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorAgent {
    /// The routing name a session claims at login to receive these spawns
    /// (for example `main-ai`); unset: the least loaded MainAI session.
    pub operator_role: Option<String>,
    /// The SubAgent type and tools the MainAI should launch.
    pub worker_binding: Option<WorkerBinding>,
    /// System prompt for the SubAgent. Filled from `system_prompt_file` at load.
    pub system_prompt: Option<String>,
    /// File holding the system prompt, read once at load.
    pub system_prompt_file: Option<PathBuf>,
    /// Model the SubAgent should use, passed through to the MainAI.
    pub model: Option<String>,
    /// Each attempt's SubAgent works in a git worktree of its own when set.
    pub worktree: Option<WorktreeConfig>,
}

/// `worker_binding = { subagent_type, tools }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerBinding {
    /// The SubAgent type the MainAI launches.
    pub subagent_type: String,
    /// Tools the SubAgent may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// What a process child reads on stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// The task's prompt, then end of file.
    #[default]
    Prompt,
    /// Nothing (`/dev/null`).
    None,
}

impl From<StdinMode> for swarmd_spawner::process::StdinMode {
    fn from(mode: StdinMode) -> Self {
        match mode {
            StdinMode::Prompt => Self::Prompt,
            StdinMode::None => Self::None,
        }
    }
}

/// How a process child's stdout is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Read whole at exit: JSON is the value, anything else is `{raw, stderr}`.
    #[default]
    None,
    /// One OutputEvent per line, appended as it arrives.
    Ndjson,
    /// Claude Code's `stream-json` lines, mapped to output events
    /// (docs/agents-cli.md).
    Claude,
    /// Codex CLI's `exec --json` lines, mapped to output events.
    Codex,
    /// Gemini CLI's `stream-json` lines, mapped to output events.
    Gemini,
}

impl From<StreamMode> for swarmd_spawner::process::StreamMode {
    fn from(mode: StreamMode) -> Self {
        use swarmd_spawner::process::CliFormat;
        match mode {
            StreamMode::None => Self::None,
            StreamMode::Ndjson => Self::Ndjson,
            StreamMode::Claude => Self::Cli(CliFormat::Claude),
            StreamMode::Codex => Self::Cli(CliFormat::Codex),
            StreamMode::Gemini => Self::Cli(CliFormat::Gemini),
        }
    }
}

/// `env` of a process agent, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvSpec {
    /// `env = ["PATH", "HOME"]`: passed through from swarmd's environment when set there.
    Inherit(Vec<String>),
    /// `env = { LANG = "C.UTF-8" }`: explicit values.
    Set(EnvVars),
}

impl Default for EnvSpec {
    fn default() -> Self {
        EnvSpec::Set(EnvVars::default())
    }
}

/// Environment variables for a child. Values may be secrets (API keys):
/// `Debug` and `Serialize` show names only, values as `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct EnvVars(BTreeMap<String, String>);

/// What secrets are replaced with in printed output.
pub const REDACTED: &str = "<redacted>";

impl EnvVars {
    /// Variables by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// Whether there is no variable.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, String)> for EnvVars {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        EnvVars(iter.into_iter().collect())
    }
}

impl fmt::Debug for EnvVars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, REDACTED)))
            .finish()
    }
}

impl Serialize for EnvVars {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.keys().map(|name| (name, REDACTED)))
    }
}

impl AgentKind {
    /// The `kind` value naming this variant.
    pub fn name(&self) -> &'static str {
        match self {
            AgentKind::Process(_) => "process",
            AgentKind::Lua(_) => "lua",
            AgentKind::Operator(_) => "operator",
            AgentKind::Remote(_) => "remote",
            AgentKind::Merge(_) => "merge",
        }
    }

    /// The `worktree` table of an agent whose attempts the daemon runs in
    /// worktrees (process and operator agents).
    pub fn worktree(&self) -> Option<&WorktreeConfig> {
        match self {
            AgentKind::Process(p) => p.worktree.as_ref(),
            AgentKind::Operator(o) => o.worktree.as_ref(),
            AgentKind::Lua(_) | AgentKind::Remote(_) | AgentKind::Merge(_) => None,
        }
    }
}

/// A `[agents.NAME]` table whose keys do not fit its `kind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentShapeError {
    #[error("key `{key}` is not valid for an agent of kind {kind}")]
    KeyNotForKind {
        kind: &'static str,
        key: &'static str,
    },
    #[error("an agent of kind {kind} needs `{key}`")]
    MissingKey {
        kind: &'static str,
        key: &'static str,
    },
    #[error("an agent needs `kind` = \"process\", \"lua\", \"operator\", \"remote\" or \"merge\"")]
    MissingKind,
    #[error("set `system_prompt` or `system_prompt_file`, not both")]
    TwoSystemPrompts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KindName {
    Process,
    Lua,
    Operator,
    Remote,
    Merge,
}

/// The file form of an agent: every key of every kind, checked per kind.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    kind: Option<KindName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    layers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    allow_subtasks: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    expose_as_tool: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    program: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resume_args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    env: Option<EnvSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stdin: Option<StdinMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<StreamMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_output_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worktree: Option<WorktreeConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    script: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operator_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worker_binding: Option<WorkerBinding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    system_prompt_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repo: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fast_forward: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_branches: Option<u32>,
}

impl RawAgent {
    /// Refuses every key set here that `kind` does not own.
    fn refuse_foreign(&self, kind: &'static str) -> Result<(), AgentShapeError> {
        if self.worktree.is_some() && matches!(kind, "lua" | "remote" | "merge") {
            return Err(AgentShapeError::KeyNotForKind {
                kind,
                key: "worktree",
            });
        }
        const PROCESS: &[&str] = &["process"];
        const RUN: &[&str] = &["process", "remote"];
        const LUA: &[&str] = &["lua"];
        const OPERATOR: &[&str] = &["operator"];
        const MERGE: &[&str] = &["merge"];
        let owners: [(&'static str, bool, &[&str]); 19] = [
            ("program", self.program.is_some(), PROCESS),
            ("args", self.args.is_some(), PROCESS),
            ("resume_args", self.resume_args.is_some(), PROCESS),
            ("env", self.env.is_some(), PROCESS),
            ("cwd", self.cwd.is_some(), PROCESS),
            ("stdin", self.stdin.is_some(), RUN),
            ("stream", self.stream.is_some(), RUN),
            ("timeout_secs", self.timeout_secs.is_some(), RUN),
            ("max_output_bytes", self.max_output_bytes.is_some(), RUN),
            ("script", self.script.is_some(), LUA),
            ("operator_role", self.operator_role.is_some(), OPERATOR),
            ("worker_binding", self.worker_binding.is_some(), OPERATOR),
            ("system_prompt", self.system_prompt.is_some(), OPERATOR),
            (
                "system_prompt_file",
                self.system_prompt_file.is_some(),
                OPERATOR,
            ),
            ("model", self.model.is_some(), OPERATOR),
            ("repo", self.repo.is_some(), MERGE),
            ("base", self.base.is_some(), MERGE),
            ("fast_forward", self.fast_forward.is_some(), MERGE),
            ("max_branches", self.max_branches.is_some(), MERGE),
        ];
        let foreign = owners
            .into_iter()
            .find(|(_, set, owners)| *set && !owners.contains(&kind));
        match foreign {
            Some((key, _, _)) => Err(AgentShapeError::KeyNotForKind { kind, key }),
            None => Ok(()),
        }
    }
}

impl TryFrom<RawAgent> for Agent {
    type Error = AgentShapeError;

    fn try_from(mut raw: RawAgent) -> Result<Self, AgentShapeError> {
        let kind_name = raw.kind.ok_or(AgentShapeError::MissingKind)?;
        let kind = match kind_name {
            KindName::Process => {
                raw.refuse_foreign("process")?;
                AgentKind::Process(ProcessAgent {
                    program: raw.program.take().ok_or(AgentShapeError::MissingKey {
                        kind: "process",
                        key: "program",
                    })?,
                    args: raw.args.take().unwrap_or_default(),
                    resume_args: raw.resume_args.take().unwrap_or_default(),
                    env: raw.env.take().unwrap_or_default(),
                    resolved_env: EnvVars::default(),
                    cwd: raw.cwd.take(),
                    stdin: raw.stdin.unwrap_or_default(),
                    stream: raw.stream.unwrap_or_default(),
                    timeout_secs: raw.timeout_secs,
                    max_output_bytes: raw.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
                    worktree: raw.worktree.take(),
                })
            }
            KindName::Lua => {
                raw.refuse_foreign("lua")?;
                AgentKind::Lua(LuaAgent {
                    script: raw.script.take().ok_or(AgentShapeError::MissingKey {
                        kind: "lua",
                        key: "script",
                    })?,
                })
            }
            KindName::Remote => {
                raw.refuse_foreign("remote")?;
                AgentKind::Remote(RemoteAgent {
                    stdin: raw.stdin.unwrap_or_default(),
                    stream: raw.stream.unwrap_or_default(),
                    timeout_secs: raw.timeout_secs,
                    max_output_bytes: raw.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
                })
            }
            KindName::Merge => {
                raw.refuse_foreign("merge")?;
                AgentKind::Merge(MergeAgent {
                    repo: raw.repo.take().ok_or(AgentShapeError::MissingKey {
                        kind: "merge",
                        key: "repo",
                    })?,
                    base: raw.base.take(),
                    fast_forward: raw.fast_forward.take(),
                    max_branches: raw.max_branches.unwrap_or(DEFAULT_MAX_BRANCHES),
                })
            }
            KindName::Operator => {
                raw.refuse_foreign("operator")?;
                if raw.system_prompt.is_some() && raw.system_prompt_file.is_some() {
                    return Err(AgentShapeError::TwoSystemPrompts);
                }
                AgentKind::Operator(OperatorAgent {
                    operator_role: raw.operator_role.take(),
                    worker_binding: raw.worker_binding.take(),
                    system_prompt: raw.system_prompt.take(),
                    system_prompt_file: raw.system_prompt_file.take(),
                    model: raw.model.take(),
                    worktree: raw.worktree.take(),
                })
            }
        };
        Ok(Agent {
            layers: raw.layers,
            concurrency: raw.concurrency,
            allow_subtasks: raw.allow_subtasks,
            description: raw.description,
            input_schema: raw.input_schema,
            expose_as_tool: raw.expose_as_tool,
            tool_timeout_secs: raw.tool_timeout_secs,
            enabled: raw.enabled.unwrap_or(true),
            kind,
            origin: AgentOrigin::ConfigFile,
        })
    }
}

impl From<Agent> for RawAgent {
    fn from(agent: Agent) -> Self {
        let mut raw = RawAgent {
            layers: agent.layers,
            concurrency: agent.concurrency,
            allow_subtasks: agent.allow_subtasks,
            description: agent.description,
            input_schema: agent.input_schema,
            expose_as_tool: agent.expose_as_tool,
            tool_timeout_secs: agent.tool_timeout_secs,
            enabled: Some(false).filter(|_| !agent.enabled),
            ..RawAgent::default()
        };
        match agent.kind {
            AgentKind::Process(process) => {
                raw.kind = Some(KindName::Process);
                raw.program = Some(process.program);
                raw.args = Some(process.args).filter(|args| !args.is_empty());
                raw.resume_args = Some(process.resume_args).filter(|args| !args.is_empty());
                raw.env = Some(process.env).filter(|env| *env != EnvSpec::default());
                raw.cwd = process.cwd;
                raw.stdin = Some(process.stdin);
                raw.stream = Some(process.stream);
                raw.timeout_secs = process.timeout_secs;
                raw.max_output_bytes = Some(process.max_output_bytes);
                raw.worktree = process.worktree;
            }
            AgentKind::Remote(remote) => {
                raw.kind = Some(KindName::Remote);
                raw.stdin = Some(remote.stdin);
                raw.stream = Some(remote.stream);
                raw.timeout_secs = remote.timeout_secs;
                raw.max_output_bytes = Some(remote.max_output_bytes);
            }
            AgentKind::Merge(merge) => {
                raw.kind = Some(KindName::Merge);
                raw.repo = Some(merge.repo);
                raw.base = merge.base;
                raw.fast_forward = merge.fast_forward;
                raw.max_branches = Some(merge.max_branches);
            }
            AgentKind::Lua(lua) => {
                raw.kind = Some(KindName::Lua);
                raw.script = Some(lua.script);
            }
            AgentKind::Operator(operator) => {
                raw.kind = Some(KindName::Operator);
                raw.operator_role = operator.operator_role;
                raw.worker_binding = operator.worker_binding;
                // A prompt read from a file is shown as the file it came from.
                if operator.system_prompt_file.is_some() {
                    raw.system_prompt_file = operator.system_prompt_file;
                } else {
                    raw.system_prompt = operator.system_prompt;
                }
                raw.model = operator.model;
                raw.worktree = operator.worktree;
            }
        }
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Agent, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn process_agent_gets_per_kind_defaults() {
        let agent = parse("kind = \"process\"\nprogram = \"/bin/cat\"").unwrap();
        let AgentKind::Process(process) = agent.kind else {
            panic!("expected a process agent");
        };
        assert_eq!(process.program, PathBuf::from("/bin/cat"));
        assert_eq!(process.stdin, StdinMode::Prompt);
        assert_eq!(process.stream, StreamMode::None);
        assert_eq!(process.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
        assert!(!agent.allow_subtasks);
    }

    #[test]
    fn stream_names_the_cli_whose_lines_are_read() {
        for (name, mode) in [
            ("ndjson", StreamMode::Ndjson),
            ("claude", StreamMode::Claude),
            ("codex", StreamMode::Codex),
            ("gemini", StreamMode::Gemini),
        ] {
            let text = format!("kind = \"process\"\nprogram = \"x\"\nstream = \"{name}\"");
            let AgentKind::Process(process) = parse(&text).unwrap().kind else {
                panic!("expected a process agent");
            };
            assert_eq!(process.stream, mode);
        }
        let error = parse("kind = \"process\"\nprogram = \"x\"\nstream = \"aider\"").unwrap_err();
        assert!(
            error.message().contains("unknown variant `aider`"),
            "{error}"
        );
    }

    #[test]
    fn key_of_another_kind_is_refused_by_name() {
        let error = parse("kind = \"process\"\nprogram = \"x\"\nscript = \"a.lua\"").unwrap_err();
        assert!(
            error
                .message()
                .contains("key `script` is not valid for an agent of kind process"),
            "{error}"
        );
    }

    #[test]
    fn a_remote_agent_takes_the_run_keys_and_no_program() {
        let agent = parse("kind = \"remote\"\nstream = \"claude\"\ntimeout_secs = 30").unwrap();
        let AgentKind::Remote(remote) = &agent.kind else {
            panic!("{agent:?}");
        };
        assert_eq!(remote.stream, StreamMode::Claude);
        assert_eq!(remote.timeout_secs, Some(30));
        assert_eq!(remote.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
        for key in ["program = \"x\"", "worktree = { repo = \"/r\" }"] {
            let error = parse(&format!("kind = \"remote\"\n{key}")).unwrap_err();
            assert!(
                error
                    .message()
                    .contains("is not valid for an agent of kind remote"),
                "{error}"
            );
        }
        let printed = toml::to_string(&agent).unwrap();
        assert_eq!(parse(&printed).unwrap(), agent);
    }

    #[test]
    fn a_merge_agent_needs_a_repo_and_owns_its_keys() {
        let agent = parse("kind = \"merge\"\nrepo = \"/r\"\nfast_forward = \"main\"").unwrap();
        let AgentKind::Merge(merge) = &agent.kind else {
            panic!("{agent:?}");
        };
        assert_eq!(merge.repo, PathBuf::from("/r"));
        assert_eq!(merge.base, None);
        assert_eq!(merge.fast_forward.as_deref(), Some("main"));
        assert_eq!(merge.max_branches, DEFAULT_MAX_BRANCHES);
        let printed = toml::to_string(&agent).unwrap();
        assert_eq!(parse(&printed).unwrap(), agent);
        let error = parse("kind = \"merge\"").unwrap_err();
        assert!(error.message().contains("needs `repo`"), "{error}");
        for key in ["program = \"x\"", "worktree = { repo = \"/r\" }"] {
            let error = parse(&format!("kind = \"merge\"\nrepo = \"/r\"\n{key}")).unwrap_err();
            assert!(
                error
                    .message()
                    .contains("is not valid for an agent of kind merge"),
                "{error}"
            );
        }
        let error = parse("kind = \"process\"\nprogram = \"x\"\nrepo = \"/r\"").unwrap_err();
        assert!(
            error
                .message()
                .contains("key `repo` is not valid for an agent of kind process"),
            "{error}"
        );
    }

    #[test]
    fn an_operator_agent_without_a_role_goes_to_any_main_ai() {
        let agent = parse("kind = \"operator\"").unwrap();
        let AgentKind::Operator(operator) = agent.kind else {
            panic!("{agent:?}");
        };
        assert_eq!(operator.operator_role, None);
    }

    #[test]
    fn env_accepts_names_or_values_and_hides_values() {
        let names = parse("kind = \"process\"\nprogram = \"x\"\nenv = [\"PATH\"]").unwrap();
        let AgentKind::Process(process) = &names.kind else {
            panic!("expected a process agent");
        };
        assert_eq!(process.env, EnvSpec::Inherit(vec!["PATH".into()]));

        let values =
            parse("kind = \"process\"\nprogram = \"x\"\nenv = { API_KEY = \"sk-123\" }").unwrap();
        let printed = toml::to_string(&values).unwrap();
        assert!(!printed.contains("sk-123"), "{printed}");
        assert!(!format!("{values:?}").contains("sk-123"));
        assert!(printed.contains("API_KEY"), "{printed}");
    }
}
