//! The base spawners an agent resolves to (docs/tasks.md, Agents): process, Lua and
//! operator, plus the stand-in for agents that exist only by delegation.

mod forward;
mod lua_agent;
mod operator;
mod process;
mod unconfigured;

pub use lua_agent::LuaAgentSpawner;
pub use operator::{OperatorSpawner, OperatorTarget, delegate, render_directive};
pub use process::ProcessSpawner;
pub use unconfigured::UnconfiguredAgent;

use swarmd_engine::Engine;
use swarmd_engine::SpawnError;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::Task;

/// The task an attempt belongs to, read at spawn time.
async fn task_of(engine: &Engine, task_id: TaskId) -> Result<Task, SpawnError> {
    match engine.get_task(task_id).await {
        Ok(Some(task)) => Ok(task),
        Ok(None) => Err(SpawnError::Failed(format!("task {task_id} not found"))),
        Err(e) => Err(SpawnError::Failed(format!(
            "cannot read task {task_id}: {e}"
        ))),
    }
}
