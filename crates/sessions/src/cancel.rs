//! Who may cancel a task, for both surfaces (`POST /v1/tasks/{id}/cancel`
//! and the WebSocket `cancel_task`): the admin cancels any task; an operator
//! session cancels the tasks it owns, that is whose owning session is this
//! session, which includes the sub-tasks of its tasks (they inherit it).
//! Observer and senior tokens never reach this far: the gate refuses them
//! `cancel_task`.
//!
//! Another session's task is `NotOwner`, which every surface answers as an
//! unknown task (`404 not_found`): a session reads only its own tasks
//! (`http::views::Reader`), so it does not learn that another's exists.

use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::task::Task;
use swarmd_engine::{Engine, EngineError};

/// Who asks for a cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canceller {
    Admin,
    Session(SessionId),
}

/// Why a cancel was refused.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    #[error("the task is not owned by this session")]
    NotOwner,
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Cancels task `id` on behalf of `who` (see the module's rule).
///
/// # Errors
/// `NotOwner` for another session's task; the engine's `NotFound`,
/// `TaskTerminal` and store errors otherwise.
pub async fn cancel_as(
    engine: &Engine,
    who: Canceller,
    id: TaskId,
    reason: Option<String>,
) -> Result<Task, CancelError> {
    if let Canceller::Session(sid) = who {
        let task = engine
            .get_task(id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("task {id}")))?;
        if task.session != Some(sid) {
            return Err(CancelError::NotOwner);
        }
    }
    Ok(engine.cancel_task(id, reason).await?)
}
