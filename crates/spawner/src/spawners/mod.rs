//! The base spawners an agent resolves to (docs/tasks.md, Agents): process, Lua and
//! operator, plus the stand-in for agents that exist only by delegation.

mod forward;
mod lua_agent;
mod operator;
mod process;
mod remote;
mod unconfigured;

pub use lua_agent::LuaAgentSpawner;
pub use operator::{OperatorSpawner, OperatorTarget, delegate, render_directive};
pub use process::ProcessSpawner;
pub use remote::RemoteSpawner;
pub use unconfigured::UnconfiguredAgent;

use swarmd_engine::task::Task;
use swarmd_engine::{AttemptHost, SpawnError};

/// The task an attempt belongs to, read at spawn time.
async fn task_of(host: &dyn AttemptHost) -> Result<Task, SpawnError> {
    host.task()
        .await
        .map_err(|e| SpawnError::Failed(format!("cannot read task {}: {e}", host.id().task)))
}
