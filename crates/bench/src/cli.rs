//! The command line of `swarmd-bench` (clap derive). Doc comments here are
//! the `--help` text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// swarmd-bench: drives a running `swarmd` over loopback (HTTP and
/// WebSocket) and reports throughput, latency, errors by code, server CPU
/// per 1 000 tasks and peak RSS. Every run ends by itself (a duration or a
/// count) and exits non-zero if any error was seen.
///
/// Either point it at a daemon (--url and --admin-token-file, plus --pid for
/// CPU and RSS) or let it start one (--spawn-daemon PATH/TO/swarmd) with a
/// temporary state directory and a generated configuration.
#[derive(Debug, Parser)]
#[command(name = "swarmd-bench", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// Generator threads (1: a single-threaded runtime, which leaves more
    /// of a small machine to the daemon).
    #[arg(long, global = true, default_value_t = 1)]
    pub threads: usize,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Which daemon to talk to.
#[derive(Debug, Clone, Args)]
pub(crate) struct TargetArgs {
    /// Start this `swarmd` binary with a temp state dir and a generated
    /// config, and stop it at the end.
    #[arg(long, value_name = "PATH", global = true, conflicts_with = "url")]
    pub spawn_daemon: Option<PathBuf>,
    /// Store of the spawned daemon [default: sqlite]; `matrix` sweeps every
    /// store named [default: sqlite,sqlite-normal,memory].
    #[arg(long, value_enum, value_delimiter = ',', global = true)]
    pub store: Vec<StoreKind>,
    /// `limits.max_running` and `ws.park_max` of the spawned daemon.
    #[arg(long, value_name = "N", global = true, default_value_t = 200_000)]
    pub capacity: u32,
    /// `limits.max_running` of the spawned daemon when it must differ from
    /// --capacity (`idle-capacity --queued` sets it to 1).
    #[arg(skip)]
    pub max_running: Option<u32>,
    /// Give the spawned daemon a process agent `worktree` that runs each
    /// attempt in a git worktree of a generated repository of N files (and
    /// writes one file there, which swarmd commits at the attempt's end):
    /// `http --agent worktree` then measures worktree attempts end to end.
    #[arg(long, value_name = "N", global = true, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub worktree_files: Option<u32>,
    /// With `--store postgres`: the cluster, as a URL to any database the
    /// user may connect to (`postgres://swarmd@127.0.0.1:5432/postgres`,
    /// what scripts/pg-env.sh prints); each spawned daemon gets a new
    /// database there.
    #[arg(long, value_name = "URL", global = true, env = "SWARMD_BENCH_PG_URL")]
    pub pg_url: Option<String>,
    /// With `--store postgres`: the file holding the password.
    #[arg(
        long,
        value_name = "PATH",
        global = true,
        env = "SWARMD_BENCH_PG_PASSWORD_FILE"
    )]
    pub pg_password_file: Option<PathBuf>,
    /// RUST_LOG of the spawned daemon.
    #[arg(long, value_name = "FILTER", global = true, default_value = "warn")]
    pub daemon_log: String,
    /// Base URL of a running daemon.
    #[arg(long, value_name = "URL", global = true)]
    pub url: Option<String>,
    /// The admin token file of a running daemon (`<state_dir>/admin.token`).
    #[arg(long, value_name = "PATH", global = true)]
    pub admin_token_file: Option<PathBuf>,
    /// Pid of a running daemon, for CPU and RSS from /proc.
    #[arg(long, global = true)]
    pub pid: Option<u32>,
}

/// A store configuration for a spawned daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StoreKind {
    /// SQLite, `synchronous = full` (the default durability).
    Sqlite,
    /// SQLite, `synchronous = normal`.
    SqliteNormal,
    /// In memory.
    Memory,
    /// PostgreSQL (`synchronous_commit` as the server has it, `on` by
    /// default): a fresh database per daemon on the cluster of --pg-url,
    /// dropped when the run ends or is interrupted.
    Postgres,
}

impl StoreKind {
    /// The label used in reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite (full)",
            StoreKind::SqliteNormal => "sqlite (normal)",
            StoreKind::Memory => "memory",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// The workloads and the composite runs.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// MainAI sessions spawn delegated tasks over WebSocket; the generator
    /// plays each SubAgent (GET prompt, POST submit, spawn_ack).
    WsDelegated(WsArgs),
    /// POST /v1/tasks with wait_secs for a process or Lua agent.
    Http(HttpArgs),
    /// MCP on the daemon's `/mcp` (rmcp client): the round trip of one Lua
    /// task through `spawn` + `wait` against WebSocket and HTTP, then N
    /// tasks fanned out with `spawn_many` and collected with `wait` on one
    /// MCP session.
    Mcp(McpArgs),
    /// Holds N delegated tasks whose SubAgents never answer, reports the
    /// daemon's RSS at each checkpoint, then cancels them.
    IdleCapacity(IdleArgs),
    /// ws-delegated for C in --in-flight (closed loop) plus the open loop at
    /// --rate, and http for the `true` and `lua` agents, for every --store;
    /// prints one Markdown table.
    Matrix(MatrixArgs),
    /// The dispatch overhead of a worker pool: a remote agent run by a real
    /// `swarmd worker pool` against a local process agent running the same
    /// command (`/bin/date +%s%N`), N sequential tasks each, interleaved.
    /// Needs --spawn-daemon (its binary also runs the pool).
    RemotePool(RemoteArgs),
    /// Flow runs end to end over the `lua` agent (`seq3`: 3 steps in
    /// sequence; `fan5`: 5 at once, joined, then 1), against the same steps
    /// as plain tasks in the same daemon (the flow's overhead in time and
    /// server CPU); then runs held on a wait across a kill -9 and a restart
    /// of a spawned daemon (the time to read them back and finish them).
    Flows(FlowArgs),
    /// A few seconds of every workload with small counts, asserting zero
    /// errors (not speed): for CI.
    Smoke,
}

/// How long a run lasts.
#[derive(Debug, Clone, Args)]
pub(crate) struct Bound {
    /// Measured time, after the warm-up (ignored with --count).
    #[arg(long, value_parser = parse_secs, default_value = "10")]
    pub duration: Duration,
    /// Time before measuring starts.
    #[arg(long, value_parser = parse_secs, default_value = "1")]
    pub warmup: Duration,
    /// Run exactly this many tasks instead of a duration (no warm-up).
    #[arg(long)]
    pub count: Option<u64>,
    /// Longest wait for the tasks still in flight at the end.
    #[arg(long, value_parser = parse_secs, default_value = "30")]
    pub drain: Duration,
}

/// `ws-delegated`.
#[derive(Debug, Clone, Args)]
pub(crate) struct WsArgs {
    /// MainAI sessions (at most one per task in flight).
    #[arg(long, short = 'm', default_value_t = 4)]
    pub sessions: usize,
    /// Tasks in flight in all (closed loop), spread over the sessions.
    #[arg(long, short = 'c', default_value_t = 32)]
    pub in_flight: usize,
    /// Open loop: offer this many tasks per second in all instead.
    #[arg(long)]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub bound: Bound,
    /// Write every finished task as `done_ms,latency_us` to this file.
    #[arg(long, value_name = "PATH")]
    pub latency_csv: Option<PathBuf>,
    /// Bytes of each task's prompt (a coding agent's prompt runs to
    /// kilobytes; the default keeps the figures comparable with earlier runs).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROMPT_BYTES)]
    pub prompt_bytes: usize,
}

/// `ws-delegated`'s prompt size by default: the five bytes of `bench`.
pub(crate) const DEFAULT_PROMPT_BYTES: usize = 5;

/// `http`.
#[derive(Debug, Clone, Args)]
pub(crate) struct HttpArgs {
    /// Agent of the generated config: `true` (/bin/true), `cat` (/bin/cat),
    /// `lua` (returns its prompt); any name with --url.
    #[arg(long, default_value = "true")]
    pub agent: String,
    /// Requests in flight.
    #[arg(long, short = 'c', default_value_t = 8)]
    pub in_flight: usize,
    #[command(flatten)]
    pub bound: Bound,
    /// Write every finished task as `done_ms,latency_us` to this file.
    #[arg(long, value_name = "PATH")]
    pub latency_csv: Option<PathBuf>,
}

/// `mcp`.
#[derive(Debug, Clone, Args)]
pub(crate) struct McpArgs {
    /// Agent of every task (the generated config's `lua` returns its prompt).
    #[arg(long, default_value = "lua")]
    pub agent: String,
    /// Sequential round trips per path (MCP, WebSocket, HTTP), interleaved.
    #[arg(long, short = 'n', default_value_t = 200)]
    pub round_trips: usize,
    /// Round trips per path before measuring (connections, first Lua run).
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Tasks of the fan-out through one MCP session (0: none).
    #[arg(long, default_value_t = 1000)]
    pub fanout: usize,
    /// Tasks per `spawn_many` and per `wait` call (1 to 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub batch: u16,
    /// Also run C concurrent spawn + wait loops on the one MCP session, the
    /// fan-out's tasks split among them (0: none).
    #[arg(long, short = 'c', default_value_t = 0)]
    pub concurrent: usize,
    /// MCP protocol revision the client asks for.
    #[arg(long, value_enum, default_value = "latest")]
    pub revision: Revision,
    /// Call MCP with an operator session's `sws-` token instead of the
    /// admin token.
    #[arg(long)]
    pub session_token: bool,
}

/// `flows`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FlowArgs {
    /// Measured runs per shape and mode (flow, plain tasks).
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub runs: u64,
    /// Runs in flight (closed loop).
    #[arg(long, short = 'c', default_value_t = 32)]
    pub in_flight: usize,
    /// Unmeasured runs of each shape and mode first.
    #[arg(long, default_value_t = 200)]
    pub warmup: u64,
    /// Measurements of each shape, flow and plain alternating.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Runs held across the kill -9 and restart (0: none; needs
    /// --spawn-daemon).
    #[arg(long, default_value_t = 1000)]
    pub recovery: usize,
    /// CI sizes: 40 runs, 8 in flight, 10 warm-up runs, 50 held.
    #[arg(long)]
    pub quick: bool,
}

impl FlowArgs {
    /// The arguments `--quick` stands for.
    pub(crate) fn effective(&self) -> FlowArgs {
        if self.quick {
            FlowArgs::quick()
        } else {
            self.clone()
        }
    }

    /// The CI sizes.
    pub(crate) fn quick() -> FlowArgs {
        FlowArgs {
            runs: 40,
            in_flight: 8,
            warmup: 10,
            rounds: 1,
            recovery: 50,
            quick: true,
        }
    }
}

/// `remote-pool`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RemoteArgs {
    /// Measured round trips per agent.
    #[arg(long, short = 'n', default_value_t = 500)]
    pub round_trips: usize,
    /// Unmeasured round trips per agent first.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// `--concurrency` of the pool: above 1, a claim is always waiting
    /// when a task arrives, as a busy pool's would be.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u32,
}

/// The MCP revisions the daemon speaks, as the client asks for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Revision {
    /// `2026-07-28`: stateless requests, no `Mcp-Session-Id`.
    Latest,
    /// `2025-11-25`: `initialize` and an `Mcp-Session-Id` session.
    Initialize,
}

/// `idle-capacity`.
#[derive(Debug, Clone, Args)]
pub(crate) struct IdleArgs {
    /// Waiting-task counts at which RSS is reported, ascending.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub at: Vec<u64>,
    /// MainAI sessions holding the tasks.
    #[arg(long, short = 'm', default_value_t = 8)]
    pub sessions: usize,
    /// Longest time to reach each checkpoint, and to cancel at the end.
    #[arg(long, value_parser = parse_secs, default_value = "300")]
    pub patience: Duration,
    /// Hold the tasks queued behind `limits.max_running` instead of waiting
    /// on SubAgents: a daemon started with --spawn-daemon then runs one task
    /// at a time; a running daemon needs a small `limits.max_running` of its
    /// own.
    #[arg(long)]
    pub queued: bool,
}

/// `matrix`.
#[derive(Debug, Clone, Args)]
pub(crate) struct MatrixArgs {
    /// The C values of the closed loop.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    pub in_flight: Vec<usize>,
    /// MainAI sessions (capped at C).
    #[arg(long, short = 'm', default_value_t = 4)]
    pub sessions: usize,
    /// Offered rate of the open-loop run (0: none).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Requests in flight of the http runs (0: none).
    #[arg(long, default_value_t = 8)]
    pub http_in_flight: usize,
    #[command(flatten)]
    pub bound: Bound,
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|e| format!("not a number of seconds: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration: {e}"))
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
    fn global_flags_and_durations_parse() {
        let cli = Cli::try_parse_from([
            "swarmd-bench",
            "--spawn-daemon",
            "/bin/swarmd",
            "--store",
            "sqlite,memory",
            "ws-delegated",
            "-c",
            "8",
            "--duration",
            "2.5",
        ])
        .expect("valid flags");
        assert_eq!(cli.target.store, [StoreKind::Sqlite, StoreKind::Memory]);
        let Command::WsDelegated(ws) = cli.command else {
            panic!("not ws-delegated");
        };
        assert_eq!(ws.in_flight, 8);
        assert_eq!(ws.bound.duration, Duration::from_millis(2500));
        assert!(parse_secs("-1").is_err() && parse_secs("x").is_err());
    }

    #[test]
    fn quick_flows_are_small() {
        let cli = Cli::try_parse_from(["swarmd-bench", "flows", "--quick", "-n", "5000"])
            .expect("valid flags");
        let Command::Flows(flows) = cli.command else {
            panic!("not flows");
        };
        assert_eq!(flows.runs, 5000);
        let quick = flows.effective();
        assert_eq!((quick.runs, quick.in_flight, quick.recovery), (40, 8, 50));
        let full = Cli::try_parse_from(["swarmd-bench", "flows"]).expect("valid flags");
        let Command::Flows(flows) = full.command else {
            panic!("not flows");
        };
        let flows = flows.effective();
        assert_eq!(
            (flows.runs, flows.in_flight, flows.recovery),
            (2000, 32, 1000)
        );
    }
}
