//! The command line (clap derive). Doc comments here are the `--help` text.
//!
//! Exit codes: 0 success; 1 failure; 64 usage error; 78 invalid
//! configuration (one line on stderr); `swarmd worker` exits with its
//! command's code.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;
use swarmd_engine::ids::TaskId;

use crate::telemetry::LogFormat;
use swarmd_config::environment::Environment;
use swarmd_config::{ConfigPath, Overrides};

mod branch;
mod flow;
mod worker;

pub use branch::{BranchArgs, BranchCommand};
pub use flow::{FlowArgs, FlowCommand, FlowRunArgs, FlowRunsArgs, RunStatusFilter};
pub use worker::{PoolArgs, WorkerArgs, WorkerCommand};

/// Process exit codes (sysexits.h where one fits).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure.
    pub const FAILURE: u8 = 1;
    /// `task wait`, `task spawn --wait`: the task finished without passing
    /// (`blocked`, `failed` or `cancelled`).
    pub const TASK_NOT_PASSED: u8 = 2;
    /// `task wait`, `task spawn --wait`: the task had not finished when the
    /// wait ran out.
    pub const TASK_NOT_FINISHED: u8 = 3;
    /// Command-line usage error (`EX_USAGE`).
    pub const USAGE: u8 = 64;
    /// Invalid configuration (`EX_CONFIG`).
    pub const CONFIG: u8 = 78;
    /// Stdout was closed by its reader (`swarmd task … | head`): the
    /// command stops quietly with the status of a process SIGPIPE ended.
    pub const BROKEN_PIPE: u8 = 141;
}

/// swarmd: a swarm engine daemon. A MainAI hands tasks to SubAgents (processes,
/// Lua scripts or its own delegates) under engine control, with per-attempt
/// capability tokens and a durable output store.
///
/// Configuration: a TOML file (--config, default the first that exists of
/// $XDG_CONFIG_HOME/swarmd/swarmd.toml, ~/.config/swarmd/swarmd.toml and
/// /etc/swarmd/swarmd.toml), then SWARMD_SECTION__KEY environment variables
/// (for example SWARMD_SERVER__BIND=0.0.0.0:7700), then flags; later wins.
/// State lives in $XDG_STATE_HOME/swarmd (~/.local/state/swarmd) by default.
#[derive(Debug, Parser)]
#[command(name = "swarmd", version, max_term_width = 100)]
pub struct Cli {
    /// Log line format on stderr; RUST_LOG sets the filter (default: info;
    /// warn for the asset server, the MCP library and the PostgreSQL
    /// driver).
    #[arg(
        long,
        value_enum,
        global = true,
        env = "SWARMD_LOG_FORMAT",
        default_value = "text",
        help_heading = GLOBAL_OPTIONS
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// The help heading of the flags every command takes.
const GLOBAL_OPTIONS: &str = "Global options";
/// The help heading of the flags that say how to reach the daemon.
const CONNECTION_OPTIONS: &str = "Connection options";
/// The help heading of the flags that say where the configuration is.
const CONFIGURATION_OPTIONS: &str = "Configuration options";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground (logs on stderr; Type=notify under systemd).
    Serve(ServeArgs),
    /// Validate the configuration and print it as TOML with secrets redacted.
    /// Exits 78 with one line on stderr when it is invalid.
    CheckConfig(ServeArgs),
    /// Manage the token signing keyring.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the admin token, creating it (mode 0600) when missing.
    AdminToken(ConfigArgs),
    /// Mint capability tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// List, create, inspect, wait for, cancel and follow tasks on a running daemon.
    Task(Box<TaskArgs>),
    /// List and lint flows; start, list, show, answer and cancel their runs.
    Flow(Box<FlowArgs>),
    /// List, show, apply and prune the git branches coding tasks leave.
    Branch(Box<BranchArgs>),
    /// List the running daemon's configured agents (name, kind, description, load).
    Agents(ListingArgs),
    /// List the running daemon's operator sessions (admin only).
    Sessions(ListingArgs),
    /// Show the running daemon's version, store, load and, on a cluster,
    /// its live nodes.
    Status(ListingArgs),
    /// Run a command as a SubAgent: fetch the prompt, give it to CMD on stdin,
    /// submit CMD's stdout (ok = exit status 0), and exit with CMD's code.
    /// `swarmd worker pool` runs a worker pool for a remote agent instead.
    Worker(WorkerArgs),
    /// Serve the daemon's MCP tools on stdio (for coding agents): a relay to
    /// the running daemon's /mcp that holds its own operator session, with
    /// the connection flags of `task`.
    Mcp(McpArgs),
    /// The leader of a process agent's group, started by the daemon: runs
    /// CMD and kills the group when the daemon dies.
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

/// Where the configuration comes from.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Configuration file [default: the first that exists of
    /// $XDG_CONFIG_HOME/swarmd/swarmd.toml (~/.config/…) and /etc/swarmd/swarmd.toml].
    #[arg(
        long,
        value_name = "PATH",
        env = "SWARMD_CONFIG",
        global = true,
        help_heading = CONFIGURATION_OPTIONS
    )]
    pub config: Option<PathBuf>,
    /// State directory (overrides store.state_dir) [default:
    /// $STATE_DIRECTORY, else $XDG_STATE_HOME/swarmd, else ~/.local/state/swarmd].
    #[arg(
        long,
        value_name = "DIR",
        global = true,
        help_heading = CONFIGURATION_OPTIONS
    )]
    pub state_dir: Option<PathBuf>,
}

/// Flags of `serve` and `check-config`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Listen address, IP:PORT (overrides server.bind); port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// Keep all state in memory (store.backend = "memory"): nothing survives exit.
    #[arg(long)]
    pub ephemeral: bool,
}

/// `swarmd keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Add a fresh current signing key, keep the old ones for verification,
    /// and print the new key id. The keys file (0600) is saved, and a
    /// running daemon signs with the new key after a restart; with the
    /// keyring in PostgreSQL it is written there instead, and every running
    /// node takes it up within about 2 s.
    Rotate(ConfigArgs),
}

/// `swarmd token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint an observer, senior or worker-pool capability token (swc1) and print it.
    Mint(MintArgs),
}

/// Flags of `token mint`.
#[derive(Debug, Clone, Args)]
pub struct MintArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Role the token carries.
    #[arg(long, value_enum)]
    pub role: MintRole,
    /// Lifetime in seconds (at most auth.max_token_ttl_secs).
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub ttl: u64,
    /// A remote agent a worker-pool token may claim attempts of (repeatable;
    /// required with --role worker-pool, refused otherwise).
    #[arg(
        long = "agent",
        value_name = "NAME",
        required_if_eq("role", "worker-pool")
    )]
    pub agents: Vec<String>,
}

/// Roles `token mint` can mint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MintRole {
    /// Reads tasks, output and events.
    Observer,
    /// Reads, and answers escalations.
    Senior,
    /// Claims and runs the attempts of the remote agents named by --agent.
    WorkerPool,
}

/// `swarmd task …`: flags shared by every verb, then the verb.
#[derive(Debug, Clone, Args)]
pub struct TaskArgs {
    /// How answers are printed (`task tail` prints JSON lines either way).
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "table",
        global = true,
        display_order = 900
    )]
    pub output: OutputFormat,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(subcommand)]
    pub command: TaskCommand,
}

/// `-o`: how a client command prints the daemon's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Tables and key/value blocks for people: relative times, short ids.
    Table,
    /// The daemon's answer as one JSON document on one line, for scripts.
    Json,
}

/// Flags of `swarmd agents` and `swarmd sessions`.
#[derive(Debug, Clone, Args)]
pub struct ListingArgs {
    /// How the list is printed.
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "table"
    )]
    pub output: OutputFormat,
    #[command(flatten)]
    pub connection: ConnectionArgs,
}

/// `swarmd task list`'s flags (`GET /v1/tasks`), newest first.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only tasks in this state.
    #[arg(long, value_enum)]
    pub status: Option<StatusFilter>,
    /// Only tasks of this agent.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Only the sub-tasks of this task (its id, or the tail a table
    /// prints).
    #[arg(long, value_name = "TASK_ID", value_parser = parse_task_ref)]
    pub parent: Option<String>,
    /// Only the tasks this operator session owns (its sid, S-…).
    #[arg(long, value_name = "SID", value_parser = parse_session_id)]
    pub session: Option<String>,
    /// Only tasks created within this long: a number and a unit, s, m, h,
    /// d or w (`90s`, `15m`, `2h`, `7d`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub since: Option<std::time::Duration>,
    /// Only tasks whose prompt contains this text (ASCII letters in either case).
    #[arg(long, value_name = "TEXT")]
    pub contains: Option<String>,
    /// Tasks per page (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// The page after this task: the `next` of the previous page (its id,
    /// or the tail a table prints).
    #[arg(long, value_name = "TASK_ID", value_parser = parse_task_ref)]
    pub after: Option<String>,
    /// Full task ids in the table (they are shortened to their last 8 hex
    /// digits by default).
    #[arg(long)]
    pub wide: bool,
}

/// `--status` of `task list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFilter {
    Queued,
    Running,
    Pass,
    Blocked,
    Failed,
    Cancelled,
}

impl StatusFilter {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            StatusFilter::Queued => "queued",
            StatusFilter::Running => "running",
            StatusFilter::Pass => "pass",
            StatusFilter::Blocked => "blocked",
            StatusFilter::Failed => "failed",
            StatusFilter::Cancelled => "cancelled",
        }
    }
}

/// `swarmd mcp`: by default it logs in (or resumes) one operator session and
/// relays with that session's token; the credential only authorizes the login.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Role names the session claims (repeatable, or a comma list).
    #[arg(long = "roles", value_name = "ROLE", value_delimiter = ',')]
    pub roles: Vec<String>,
    /// What kind of client the session is.
    #[arg(long, value_enum, default_value = "main_ai")]
    pub kind: McpSessionKind,
    /// The session's description, shown by `GET /v1/operators`.
    #[arg(long = "desc", value_name = "TEXT")]
    pub description: Option<String>,
    /// Do not leave the session on exit: the next run resumes it.
    #[arg(long, conflicts_with = "no_login")]
    pub keep_session: bool,
    /// Where the session's sid and token are kept (mode 0600) [default:
    /// $XDG_STATE_HOME/swarmd/, else ~/.local/state/swarmd/, one file per URL].
    #[arg(long, value_name = "PATH", conflicts_with = "no_login")]
    pub session_file: Option<PathBuf>,
    /// How long a tool call waits for an absent daemon (restarting, say)
    /// before it answers `unavailable`, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=300)
    )]
    pub daemon_wait_secs: u64,
    /// How often the relay pings the daemon's /mcp, in seconds (tests shorten it).
    #[arg(
        long,
        hide = true,
        value_name = "SECS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(1..=20)
    )]
    pub heartbeat_secs: u64,
    /// Log no session in: relay with the credential as given (the admin
    /// token acts as the admin, a session token as that session).
    #[arg(long, conflicts_with_all = ["roles", "description"])]
    pub no_login: bool,
}

impl McpArgs {
    /// The relay's options: these flags, and the per-user state directory
    /// for its default session file.
    pub fn relay_options(&self, state_dir: Option<PathBuf>) -> swarmd_client::mcp::RelayOptions {
        swarmd_client::mcp::RelayOptions {
            roles: self.roles.clone(),
            kind: self.kind.into(),
            description: self.description.clone(),
            keep_session: self.keep_session,
            session_file: self.session_file.clone(),
            state_dir,
            daemon_wait_secs: self.daemon_wait_secs,
            heartbeat_secs: self.heartbeat_secs,
            no_login: self.no_login,
        }
    }
}

/// `--kind` of `swarmd mcp` (the wire's `kind` of a login).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum McpSessionKind {
    MainAi,
    Automate,
    Composite,
}

impl From<McpSessionKind> for swarmd_engine::store::SessionKind {
    fn from(kind: McpSessionKind) -> Self {
        match kind {
            McpSessionKind::MainAi => Self::MainAi,
            McpSessionKind::Automate => Self::Automate,
            McpSessionKind::Composite => Self::Composite,
        }
    }
}

/// How to reach and authenticate to the daemon. Each comes from the flag,
/// else the environment, else the configuration (`--config`, else the
/// per-user file): see `commands::remote::endpoint`.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Daemon URL [default: $SWARMD_URL, else server.base_url, else
    /// http://<server.bind>, of the configuration].
    #[arg(
        long,
        value_name = "URL",
        env = "SWARMD_URL",
        global = true,
        value_parser = BaseUrl,
        help_heading = CONNECTION_OPTIONS
    )]
    pub url: Option<String>,
    /// Bearer credential; a flag shows in the process list, so prefer
    /// --token-file or the environment [default: $SWARMD_TOKEN, else the
    /// file $SWARMD_TOKEN_FILE names, else the configuration's admin token:
    /// from its state directory, or its PostgreSQL database].
    #[arg(
        long,
        value_name = "TOKEN",
        global = true,
        help_heading = CONNECTION_OPTIONS
    )]
    pub token: Option<String>,
    /// File holding the bearer credential (surrounding whitespace ignored).
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        conflicts_with = "token",
        help_heading = CONNECTION_OPTIONS
    )]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// `swarmd task spawn`'s flags, boxed in [`TaskCommand`] so the enum stays
/// small.
#[derive(Debug, Clone, Args)]
pub struct SpawnArgs {
    /// The agent to run; with `--continue-from`, the previous task's
    /// when left out.
    #[arg(long, required_unless_present = "continue_from")]
    pub agent: Option<String>,
    /// A finished task (T-…, or the tail a table prints) of the same
    /// agent to continue: the new task resumes its CLI session and starts
    /// from its worktree branch.
    #[arg(long, value_name = "TASK_ID", value_parser = parse_task_ref)]
    pub continue_from: Option<String>,
    /// The prompt; `-` reads it from stdin.
    #[arg(long)]
    pub prompt: String,
    /// A system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Structured input, as JSON.
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub input: Option<Value>,
    /// A hint layer for this task (repeatable).
    #[arg(long = "layer", value_name = "LAYER")]
    pub layers: Vec<String>,
    /// Free-form metadata kept with the task, as JSON.
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub metadata: Option<Value>,
    /// Policy fields that override the configured defaults, as JSON
    /// (e.g. `{"max_attempts": 3, "attempt_timeout_secs": 600}`).
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub policy: Option<Value>,
    /// Sent as `Idempotency-Key`: running the command again with the same
    /// key and request answers with the same task.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Wait up to SECS for the task to finish and print the finished task;
    /// the exit status is then that of `task wait` (0 pass, 2 finished
    /// otherwise, 3 not finished in time).
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
}

/// The task verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum TaskCommand {
    /// List tasks, newest first, with filters (`-o json`: the daemon's page,
    /// `{tasks, next?}`).
    List(Box<ListArgs>),
    /// Create a task and print the answer.
    Spawn(Box<SpawnArgs>),
    /// Print a task with its attempts.
    Get {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_task_ref)]
        id: String,
    },
    /// Wait until the task is finished or the timeout passes; print it either
    /// way. Exits 0 when it passed, 2 when it finished otherwise (blocked,
    /// failed, cancelled), 3 when it had not finished in time.
    Wait {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_task_ref)]
        id: String,
        /// Seconds to wait.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        timeout: u64,
    },
    /// Cancel a task.
    Cancel {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_task_ref)]
        id: String,
        /// Why, recorded as the task's reason (at most 1 KiB).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Follow a task's output: one JSON event per line until the stream ends.
    Tail {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_task_ref)]
        id: String,
        /// Only this attempt's output.
        #[arg(long)]
        attempt: Option<u32>,
        /// Only events after this sequence number of `--attempt` (a seq is
        /// one attempt's).
        #[arg(long, value_name = "SEQ", requires = "attempt")]
        after_seq: Option<u64>,
    },
}

/// Flags of `swarmd supervise` (internal).
#[derive(Debug, Clone, Args)]
pub struct SuperviseArgs {
    /// The daemon's pid: CMD is not started unless it is the parent.
    #[arg(long, value_name = "PID")]
    pub parent: i32,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

impl ConfigArgs {
    /// The configuration file to read: `--config`, else the first of the
    /// default places that exists (`ConfigPath::search`).
    pub fn config_path(&self, env: &Environment) -> ConfigPath {
        ConfigPath::search(self.config.as_deref(), env)
    }

    /// The flags that override configuration keys.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            state_dir: self.state_dir.clone(),
            ..Overrides::default()
        }
    }
}

impl ServeArgs {
    /// The flags that override configuration keys.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            bind: self.bind,
            state_dir: self.config.state_dir.clone(),
            ephemeral: self.ephemeral,
        }
    }
}

fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// An age such as `90s`, `15m`, `2h`, `7d` or `1w`.
pub(crate) fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_secs: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err("expected a number and a unit, s, m, h, d or w (e.g. 15m)".to_owned()),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_secs))
        .filter(|secs| *secs <= 100 * 365 * 86_400)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| "expected a number of at most 100 years before the unit".to_owned())
}

/// A task id as typed: a whole `T-…` id, or the tail a table prints
/// (`…7c8d9e0f`, looked up when the verb runs).
pub(crate) fn parse_task_ref(text: &str) -> Result<String, String> {
    if text.parse::<TaskId>().is_ok() || swarmd_client::tail_of(text).is_some() {
        Ok(text.to_owned())
    } else {
        Err("expected a task id: T- and 32 lowercase hex digits, or the tail a table prints (…7c8d9e0f)".to_owned())
    }
}

/// An operator session's id as `swarmd sessions` prints it (`S-…`).
pub(crate) fn parse_session_id(text: &str) -> Result<String, String> {
    text.parse::<swarmd_engine::ids::SessionId>()
        .map(|_| text.to_owned())
        .map_err(|_| "expected a session id: S- and 32 lowercase hex digits".to_owned())
}

/// The parser of a daemon's URL (`swarmd_client::check_base_url`): a
/// malformed one is a usage error naming the flag, or the variable when
/// the value came from the environment.
#[derive(Debug, Clone, Copy)]
struct BaseUrl;

impl clap::builder::TypedValueParser for BaseUrl {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        self.parse_ref_(cmd, arg, value, clap::parser::ValueSource::CommandLine)
    }

    fn parse_ref_(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
        source: clap::parser::ValueSource,
    ) -> Result<String, clap::Error> {
        let variable = arg
            .and_then(clap::Arg::get_env)
            .filter(|_| source == clap::parser::ValueSource::EnvVariable);
        let from = match (variable, arg.and_then(clap::Arg::get_long)) {
            (Some(variable), _) => variable.to_string_lossy().into_owned(),
            (None, Some(long)) => format!("--{long}"),
            (None, None) => "the command line".to_owned(),
        };
        let text = value.to_string_lossy();
        let refused = |reason: String| {
            let message = format!("invalid daemon URL `{text}` from {from}: {reason}\n");
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let url = value
            .to_str()
            .ok_or_else(|| refused("it is not UTF-8".to_owned()))?;
        swarmd_client::check_base_url(url.trim_end_matches('/')).map_err(refused)?;
        Ok(url.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn worker_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from([
            "swarmd",
            "worker",
            "--handle",
            "wh-x",
            "--base-url",
            "http://127.0.0.1:7700",
            "--",
            "sh",
            "-c",
            "cat",
        ])
        .unwrap();
        let Command::Worker(args) = cli.command else {
            panic!("expected worker");
        };
        assert_eq!(args.command, ["sh", "-c", "cat"]);
        assert_eq!(args.heartbeat_secs, 60);
    }

    #[test]
    fn task_flags_work_after_the_verb_and_ids_are_checked() {
        let id = TaskId::new();
        let cli = Cli::try_parse_from([
            "swarmd",
            "task",
            "wait",
            &id.to_string(),
            "--url",
            "http://x:1",
            "--timeout",
            "5",
        ])
        .unwrap();
        let Command::Task(task) = cli.command else {
            panic!("expected task");
        };
        assert_eq!(task.connection.url.as_deref(), Some("http://x:1"));
        assert!(
            matches!(task.command, TaskCommand::Wait { id: got, timeout: 5 } if got == id.to_string())
        );
        for bad in ["../etc", "7c8", "T-7c8d9e0f"] {
            assert!(
                Cli::try_parse_from(["swarmd", "task", "get", bad]).is_err(),
                "{bad}"
            );
        }
        for tail in ["…7c8d9e0f", "7C8D"] {
            assert!(
                Cli::try_parse_from(["swarmd", "task", "get", tail]).is_ok(),
                "{tail}"
            );
        }
        // A session filter is a sid, checked before the daemon is asked.
        let list = |sid: &str| Cli::try_parse_from(["swarmd", "task", "list", "--session", sid]);
        assert!(list("abc").is_err());
        assert!(list(&swarmd_engine::ids::SessionId::new().to_string()).is_ok());
    }

    #[test]
    fn list_ages_have_a_unit_and_a_bound() {
        assert_eq!(parse_age("90s"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(parse_age("2h"), Ok(std::time::Duration::from_secs(7200)));
        assert_eq!(parse_age("1w"), Ok(std::time::Duration::from_secs(604_800)));
        for bad in ["", "h", "15", "1.5h", "-1d", "99999999999999999999w", "1y"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from([
            "swarmd", "task", "list", "--status", "running", "-o", "json",
        ])
        .unwrap();
        let Command::Task(task) = cli.command else {
            panic!("expected task");
        };
        assert_eq!(task.output, OutputFormat::Json);
        assert!(matches!(task.command, TaskCommand::List(list)
            if list.status == Some(StatusFilter::Running) && list.limit == 50));
        assert!(Cli::try_parse_from(["swarmd", "task", "list", "--limit", "0"]).is_err());
        let both = ["swarmd", "agents", "--token", "t", "--token-file", "f"];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn spawn_input_must_be_json() {
        let parse = |input: &str| {
            Cli::try_parse_from([
                "swarmd", "task", "spawn", "--agent", "a", "--prompt", "p", "--input", input,
            ])
        };
        assert!(parse("{\"n\": 1}").is_ok());
        assert!(parse("{nope").is_err());
    }
}
