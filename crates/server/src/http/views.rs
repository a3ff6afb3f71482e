//! The wire shapes of task reads and of the worker's prompt, built here from
//! what the engine returns: the engine keeps no HTTP-shaped types.

use serde::Serialize;
use serde_json::Value;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::{AttemptRecord, Task};
use swarmd_engine::{Engine, EngineError, Prompt, WorkerAuth};

/// A task with its attempts, as `GET /v1/tasks/{id}` serves it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskView {
    #[serde(flatten)]
    pub task: Task,
    pub attempts: Vec<AttemptRecord>,
}

impl TaskView {
    /// The task with its attempt records, or `None` when there is no such task.
    pub(crate) async fn read(engine: &Engine, id: TaskId) -> Result<Option<TaskView>, EngineError> {
        let Some(task) = engine.get_task(id).await? else {
            return Ok(None);
        };
        Ok(Some(TaskView::of(engine, task).await?))
    }

    /// `task` with its attempt records.
    pub(crate) async fn of(engine: &Engine, task: Task) -> Result<TaskView, EngineError> {
        let attempts = engine.attempts(task.id).await?;
        Ok(TaskView { task, attempts })
    }
}

/// `GET /v1/worker/prompt`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PromptView {
    pub task_id: TaskId,
    pub attempt: u32,
    pub agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The lease deadline (unix ms).
    pub deadline: u64,
}

impl PromptView {
    /// The prompt of the credential's attempt.
    pub(crate) fn new(auth: &WorkerAuth, prompt: Prompt) -> PromptView {
        PromptView {
            task_id: auth.attempt.task,
            attempt: auth.attempt.n,
            agent: prompt.agent,
            system: prompt.system,
            prompt: prompt.prompt,
            input: prompt.input,
            deadline: prompt.lease_deadline_ms,
        }
    }
}
