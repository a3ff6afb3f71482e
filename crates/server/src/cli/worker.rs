//! `swarmd worker …`'s command line: the worker wrapper around one
//! attempt's command, and `swarmd worker pool`, which runs a remote
//! agent's attempts (docs/operations.md, Worker pools).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use swarmd_engine::ids::TaskId;

/// Flags of `swarmd worker`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct WorkerArgs {
    #[command(subcommand)]
    pub pool: Option<WorkerCommand>,
    /// The worker handle (wh-…) or token. Prefer the environment variable: a
    /// flag shows in the process list. It is never passed on to CMD.
    #[arg(
        long,
        value_name = "HANDLE",
        env = "SWARM_WORKER_HANDLE",
        hide_env_values = true,
        required = true
    )]
    pub handle: Option<String>,
    /// The daemon's base URL.
    #[arg(long, value_name = "URL", env = "SWARM_BASE_URL", required = true)]
    pub base_url: Option<String>,
    /// The task the handle belongs to [default: taken from the handle].
    #[arg(long, value_name = "ID", env = "SWARM_TASK_ID")]
    pub task_id: Option<TaskId>,
    /// Seconds between heartbeats while CMD runs, keeping the lease alive (0: none).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub heartbeat_secs: u64,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `swarmd worker …` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum WorkerCommand {
    /// Run a worker pool for a remote agent: claim its attempts from the
    /// daemon and run each as CMD ARGS… like a local process agent (prompt
    /// on stdin, SWARM_* variables, its own process group). The first
    /// SIGTERM or SIGINT stops claiming and drains; a second stops at once.
    Pool(Box<PoolArgs>),
}

/// Flags of `swarmd worker pool`.
#[derive(Debug, Clone, Args)]
pub struct PoolArgs {
    /// A daemon's URL (http://host:port, or https://host:port behind a
    /// TLS-terminating proxy). One node of a cluster, or a load balancer
    /// in front of it, is enough: the pool claims from every live node it
    /// names, at its advertised URL, or through this URL when it is none
    /// of theirs (or with `--through-server`). Repeatable, up to 16.
    #[arg(long, value_name = "URL", required = true)]
    pub server: Vec<String>,
    /// Reach every node of the cluster through the --server URL, which
    /// forwards each claim to the node it names, even when that URL is a
    /// node's advertised one: for a pool that can reach the cluster only
    /// through the nodes given, not at the others' advertised URLs.
    #[arg(long)]
    pub through_server: bool,
    /// The remote agent whose attempts this pool runs.
    #[arg(long, value_name = "NAME")]
    pub agent: String,
    /// Attempts run at once (1 to 64).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,
    /// File holding the worker_pool token [default: $SWARMD_TOKEN, else
    /// the file $SWARMD_TOKEN_FILE names].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// This pool's id, in the daemon's view [default: HOSTNAME-PID].
    #[arg(long, value_name = "ID")]
    pub pool_id: Option<String>,
    /// A variable of the pool's environment passed on to CMD (repeatable);
    /// CMD gets nothing else but the SWARM_* variables.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// CMD's working directory [default: the pool's].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Seconds running attempts get to finish after SIGTERM before they are
    /// killed and handed back.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub drain_secs: u64,
    /// Seconds between SIGTERM and SIGKILL when an attempt is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub kill_grace_secs: u64,
    /// Seconds between asking the daemons given for their cluster's nodes
    /// again (a node that joined later is claimed from too).
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub rediscover_secs: u64,
    /// Runs each attempt in a git worktree of this repository (on the
    /// pool's machine), on a branch of its own (`swarmd/t-<short id>-<slug>/<attempt>`).
    #[arg(long, value_name = "DIR")]
    pub worktree_repo: Option<PathBuf>,
    /// What each attempt's branch starts from: a commit, branch or tag.
    #[arg(
        long,
        value_name = "REF",
        default_value = "HEAD",
        requires = "worktree_repo"
    )]
    pub worktree_base: String,
    /// When an attempt's worktree is left in place: never, on_failure or always.
    #[arg(
        long,
        value_name = "RULE",
        default_value = "never",
        requires = "worktree_repo"
    )]
    pub worktree_keep: String,
    /// Where the worktrees are made [default: ./swarmd-worktrees].
    #[arg(long, value_name = "DIR", requires = "worktree_repo")]
    pub worktree_dir: Option<PathBuf>,
    /// An ignored file or folder (path or glob relative to the repository)
    /// copied into each new worktree; repeatable.
    #[arg(long, value_name = "PATH", requires = "worktree_repo")]
    pub worktree_copy: Vec<String>,
    /// A directory (relative to the repository) each new worktree shares by
    /// symlink; repeatable.
    #[arg(long, value_name = "PATH", requires = "worktree_repo")]
    pub worktree_link: Vec<String>,
    /// A shell command (`sh -c`) run in each new worktree before the child.
    #[arg(long, value_name = "SHELL", requires = "worktree_repo")]
    pub worktree_setup: Option<String>,
    /// Seconds the setup command may run.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 300,
        requires = "worktree_setup"
    )]
    pub worktree_setup_timeout_secs: u64,
    /// Ports each live attempt gets (`SWARM_PORT`, `SWARM_PORT_0`…), as
    /// `first-last`.
    #[arg(long, value_name = "RANGE", requires = "worktree_repo")]
    pub worktree_ports: Option<String>,
    /// How many ports each attempt gets from `--worktree-ports`.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "worktree_ports"
    )]
    pub worktree_port_count: u16,
    /// The command to run per attempt, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}
