//! The tools that read: `task` (a task with its attempts), `tasks` (a page
//! by status and agent) and `output` (a page of a task's output records),
//! each through the HTTP routes' own functions, bounds and reader's part
//! (`views::Reader`: a session reads only its own tasks).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use swarmd_engine::gate::Verb;
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::TaskStatus;

use super::changes;
use super::fanout::task_id;
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::output::{self, PageCursor};
use swarmd_api::http::tasks;
use swarmd_api::http::views::{Reader, TaskView};

/// The longest `tasks` page.
const MAX_TASKS: usize = 200;
const DEFAULT_TASKS: usize = 50;
/// The longest `output` page.
const MAX_RECORDS: usize = 1_000;
const DEFAULT_RECORDS: usize = 200;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<TaskArgs, TaskSchema>(
            "task",
            "Get one task: its status, result ({value, ok}) once final, reason, policy, \
             every attempt with its outcome, and for a coding task `changes`: the branch, \
             base, head, files, line counts and diff (at most 64 KiB) its latest attempt \
             left.",
            true,
            |call, args| Box::pin(task(call.state, call.caller, args)),
        ),
        entry::<TasksArgs, TaskPageSchema>(
            "tasks",
            "List tasks newest first, optionally by status (queued, running, pass, blocked, \
             failed, cancelled) and agent; at most 200 a page, continue with `after`.",
            true,
            |call, args| Box::pin(tasks(call.state, call.caller, args)),
        ),
        entry::<OutputArgs, OutputPageSchema>(
            "output",
            "Read a task's output records (progress, logs, finals) after a seq, at most 1000 \
             a page; continue with `after_seq` = the last record's seq while `more` is true.",
            true,
            |call, args| Box::pin(output(call.state, call.caller, args)),
        ),
    ]
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskArgs {
    /// The task (`T-…`).
    task_id: String,
}

/// A task as `GET /v1/tasks/{id}` shows it (the task's fields and `attempts`).
#[derive(Debug, JsonSchema)]
#[allow(dead_code, reason = "only its schema is used")]
struct TaskSchema {
    id: String,
    agent: String,
    /// queued, running, pass, blocked, failed or cancelled.
    status: String,
    /// `{value, ok}` of the deciding final, once the task is final.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    attempts: Vec<Value>,
    /// What the latest attempt that ran in a worktree left on its branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<super::changes::Changes>,
    #[schemars(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TasksArgs {
    /// Only tasks in this status.
    #[serde(default)]
    status: Option<TaskStatusArg>,
    /// Only tasks of this agent.
    #[serde(default)]
    agent: Option<String>,
    /// Page length, 1 to 200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_TASKS))]
    limit: Option<usize>,
    /// The `next` of the previous page.
    #[serde(default)]
    after: Option<String>,
}

/// A task status filter.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum TaskStatusArg {
    Queued,
    Running,
    Pass,
    Blocked,
    Failed,
    Cancelled,
}

impl From<TaskStatusArg> for TaskStatus {
    fn from(status: TaskStatusArg) -> Self {
        match status {
            TaskStatusArg::Queued => TaskStatus::Queued,
            TaskStatusArg::Running => TaskStatus::Running,
            TaskStatusArg::Pass => TaskStatus::Pass,
            TaskStatusArg::Blocked => TaskStatus::Blocked,
            TaskStatusArg::Failed => TaskStatus::Failed,
            TaskStatusArg::Cancelled => TaskStatus::Cancelled,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[allow(dead_code, reason = "only its schema is used")]
struct TaskPageSchema {
    tasks: Vec<Value>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputArgs {
    /// The task (`T-…`).
    task_id: String,
    /// Only this attempt; unset: every attempt in order.
    #[serde(default)]
    attempt: Option<u32>,
    /// Records after this seq (of `attempt`, else of the current attempt).
    #[serde(default)]
    after_seq: Option<u64>,
    /// Page length, 1 to 1000 (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_RECORDS))]
    limit: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[allow(dead_code, reason = "only its schema is used")]
struct OutputPageSchema {
    task_id: String,
    /// `{attempt, seq, ts_ms, producer, event}` each.
    records: Vec<Value>,
    /// The id of the last record, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    /// Whether more records may follow right now.
    more: bool,
}

pub(super) async fn task(state: &AppState, caller: &Caller, args: TaskArgs) -> Outcome {
    let id = task_id(&args.task_id)?;
    let view = tasks::view(state, caller, id).await?;
    let mut value = serde_json::to_value(&view).map_err(|e| ApiError::internal(&e))?;
    // The diff is output: shown only to a caller who may read output.
    if caller.check(state, Verb::ReadOutput).is_ok() {
        let found = changes::of(state, id, view.task.attempt).await;
        changes::attach(&mut value, found);
    }
    Ok(value)
}

pub(super) async fn tasks(state: &AppState, caller: &Caller, args: TasksArgs) -> Outcome {
    let before = args.after.as_deref().map(task_id).transpose()?;
    let filter = TaskFilter {
        status: args.status.map(Into::into),
        agent: args.agent,
        before,
        limit: args.limit.unwrap_or(DEFAULT_TASKS).clamp(1, MAX_TASKS),
        ..TaskFilter::default()
    };
    structured(&tasks::page_within(state, caller, filter, MAX_PAGE_BYTES).await?)
}

/// The most bytes of tasks one `tasks` page carries (a page ends early,
/// with its `next`, past it): a tool result is sent twice in one message
/// (as escaped text and as structured content), and the official Python
/// SDK refuses a message over 1 MiB.
const MAX_PAGE_BYTES: usize = 256 * 1024;

pub(super) async fn output(state: &AppState, caller: &Caller, args: OutputArgs) -> Outcome {
    let id = task_id(&args.task_id)?;
    caller.check(state, Verb::ReadOutput)?;
    let view = TaskView::read(&state.engine, Reader::of(caller), id)
        .await?
        .ok_or_else(|| tasks::unknown(id))?;
    let cursor = PageCursor {
        attempt: args.attempt,
        after_seq: args.after_seq,
        last_id: None,
        limit: args.limit.unwrap_or(DEFAULT_RECORDS).clamp(1, MAX_RECORDS),
    };
    structured(&output::page(state, &view, cursor).await?)
}
