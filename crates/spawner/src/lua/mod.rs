//! Sandboxed Lua (docs/tasks.md, Lua agents): the pool of dedicated OS threads that runs it,
//! the sandbox every run gets, and the three script kinds — agents,
//! middleware, and flow scripts run once at load.
//!
//! Every run builds a fresh state with only `string`, `table`, `math`, `utf8`
//! and a `json` helper; `io`, `os`, `require`, `debug`, `load`, `dofile`,
//! `loadfile`, `print`, `warn` and `string.dump` are absent. A memory limit,
//! an instruction budget and a wall-clock deadline (the last two checked by a
//! count hook) end a run with a clear reason; `pcall` cannot swallow them.
//! Scripts come only from operator-configured files and are compiled (syntax
//! checked, text chunks only) when the agent or layer is linked.

mod agent;
mod convert;
mod flow_script;
mod middleware;
mod pattern;
mod pool;
mod sandbox;
mod script;

#[cfg(test)]
mod sandbox_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use agent::{AgentRun, LuaFinal};
pub use flow_script::{FLOW_SCRIPT_LIMITS, flow_ir};
pub use middleware::{BeforeDecision, MiddlewareHooks};
pub use pool::LuaPool;
pub use script::LuaScript;

/// Limits of one Lua run (`[lua]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LuaLimits {
    pub memory_limit_bytes: usize,
    /// Lua VM instructions one run may execute.
    pub instruction_limit: u64,
    pub timeout: Duration,
}

impl Default for LuaLimits {
    fn default() -> Self {
        LuaLimits {
            memory_limit_bytes: 32 * 1024 * 1024,
            instruction_limit: 100_000_000,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Why a script could not be loaded or a run ended without a result.
#[derive(Debug, thiserror::Error)]
pub enum LuaError {
    #[error("cannot read script {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("script `{name}`: {message}")]
    Syntax { name: String, message: String },
    #[error("script `{name}` defines neither `before` nor `after`")]
    NoHooks { name: String },
    #[error("memory limit of {limit_bytes} bytes exceeded")]
    MemoryLimit { limit_bytes: usize },
    #[error("instruction budget of {0} exceeded")]
    InstructionLimit(u64),
    #[error("timed out after {}s", .0.as_secs_f64())]
    TimedOut(Duration),
    /// Never started: every Lua thread stayed busy while the run waited.
    #[error(
        "no Lua thread came free in {}s ({stuck} of {threads} threads held by scripts \
         still running past their deadline)",
        .waited.as_secs_f64()
    )]
    NoThread {
        waited: Duration,
        stuck: usize,
        threads: usize,
    },
    #[error("cancelled")]
    Cancelled,
    #[error("lua error: {0}")]
    Runtime(String),
    #[error("bad value from script: {0}")]
    Value(String),
    #[error("the Lua pool is not running")]
    PoolClosed,
    #[error("the Lua run panicked")]
    Panicked,
    #[error("cannot start Lua threads: {0}")]
    Threads(#[source] std::io::Error),
}
