//! The child-process runner behind the process spawner (docs/tasks.md, Process agents), free of
//! any engine type: configuration, start, supervision, and the process-group
//! kill.
//!
//! A [`ProcessRunner`] is built once per agent at link time (program resolved,
//! environment checked); [`ProcessRunner::start`] starts one child in its own
//! process group with a cleared environment, and [`RunningChild::wait`] reads
//! its output until it exits, is cancelled, times out or writes too much. Every
//! way out kills what is left of the group and reaps the child, so neither a
//! zombie nor an orphan outlives a run.
//!
//! With a [`Supervisor`], the group's leader is the supervisor, which starts
//! the child and kills the group if the daemon dies; children are forked from
//! one long-lived thread (`launch`) so that the supervisor's parent-death
//! signal means the daemon's death. The group's [`GroupIdentity`] lets
//! recovery kill a group that outlived the daemon anyway.

mod adapters;
mod child;
mod env;
mod launch;
mod leftover;
mod names;
mod output;
mod resume;
mod supervise;

#[cfg(test)]
mod tests;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use adapters::CliFormat;
pub use child::{ProcessRunner, RunningChild};
pub use env::{EnvVar, HostEnv};
pub use launch::Supervisor;
pub use leftover::GroupIdentity;
pub use names::{parse_stdin, parse_stream, stdin_name, stream_name};
pub use resume::{RESUME_ARGS, RESUME_SESSION};
pub use supervise::Exited;

/// Default cap on a child's stdout (docs/tasks.md, Process agents).
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// How much of a child's stderr is kept (its tail) for plain-mode results.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// How one process agent runs its child. Built by the server from `[agents.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSpec {
    /// A path (containing `/`) or a bare name looked up in the host `PATH`.
    pub program: PathBuf,
    /// `{resume_session}` in an argument is replaced by the session the
    /// attempt resumes; an argument holding it is left out without one.
    pub args: Vec<String>,
    /// Appended to `args` only when the attempt resumes a session, with
    /// `{resume_session}` replaced.
    pub resume_args: Vec<String>,
    /// The only variables the child gets besides the `SWARM_*` ones.
    pub env: Vec<EnvVar>,
    /// Working directory of the child; the daemon's own when unset.
    pub cwd: Option<PathBuf>,
    pub stdin: StdinMode,
    pub stream: StreamMode,
    /// Wall-clock limit of one run; the attempt lease still applies when unset.
    pub timeout: Option<Duration>,
    pub max_output_bytes: u64,
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    pub kill_grace: Duration,
}

impl ProcessSpec {
    /// A spec for `program` with every other field at its default.
    pub fn new(program: impl Into<PathBuf>) -> ProcessSpec {
        ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            resume_args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: StdinMode::Prompt,
            stream: StreamMode::None,
            timeout: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

/// What the child reads on stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdinMode {
    /// The task's prompt, then end of file.
    #[default]
    Prompt,
    /// Nothing: stdin is `/dev/null`.
    None,
}

/// How the child's stdout is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamMode {
    /// Read whole at exit; it becomes the one Final.
    #[default]
    None,
    /// One OutputEvent per line, forwarded as it arrives.
    Ndjson,
    /// One LLM CLI's JSON lines, mapped to OutputEvents as they arrive.
    Cli(CliFormat),
}

/// What a child learns about its attempt, as `SWARM_*` variables (and stdin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunVars {
    pub base_url: String,
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub worker_handle: String,
    /// Written to stdin in [`StdinMode::Prompt`].
    pub prompt: String,
    /// The task a continuation continues (`SWARM_CONTINUED_FROM`).
    pub continued_from: Option<String>,
    /// The CLI session it resumes (`SWARM_RESUME_SESSION`, `{resume_session}`).
    pub resume_session: Option<String>,
}

/// Why a process could not be configured, started or finished with a result.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("program `{program}` {reason}")]
    ProgramNotFound { program: String, reason: String },
    #[error("environment variable `{0}` may not be passed to a worker")]
    ForbiddenEnv(String),
    #[error("invalid environment entry `{0}`")]
    InvalidEnv(String),
    #[error("working directory `{path}`: {source}")]
    BadCwd {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot start `{program}`: {source}")]
    Start {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("timed out after {}s; the process group was killed", .0.as_secs_f64())]
    TimedOut(Duration),
    #[error("cancelled; the process group was killed")]
    Cancelled,
    #[error("output exceeded max_output_bytes ({limit} bytes); the process group was killed")]
    OutputTooLarge { limit: u64 },
    #[error("the output sink closed; the process group was killed")]
    SinkClosed,
    #[error("i/o with the child failed: {0}")]
    Io(#[source] io::Error),
}
