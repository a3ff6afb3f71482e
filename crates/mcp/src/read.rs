//! The tools that read: `task` (a task with its attempts), `tasks` (a page
//! by status and agent) and `output` (a page of a task's output records),
//! each through the HTTP routes' own functions, bounds and reader's part
//! (`views::Reader`: a session reads only its own tasks), with each answer
//! bounded for MCP clients (`bound`: large values cut, pages ended early).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use swarmd_engine::gate::Verb;
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::TaskStatus;

use super::Outcome;
use super::changes;
use super::fanout::task_id;
use super::registry::{ToolEntry, entry};
pub(super) use bound::{
    MAX_ANSWER_BYTES, answer_bytes, bound_frames, bound_run_within, bound_task_within, cut_value,
};
use bound::{MAX_LISTED_VALUE_BYTES, bound_page, bound_record, bound_task};
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
/// The longest output cursor: `<attempt>:<seq>`, a u32 and a u64.
const MAX_CURSOR: u32 = 31;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<TaskArgs, TaskSchema>(
            "task",
            "Get one task: its status, result ({value, ok}) once final, reason, policy, \
             every attempt with its outcome, and for a coding task `changes`: the branch, \
             base, head, files, line counts and diff (at most 64 KiB) its latest attempt \
             left. Values past 64 KiB (prompt, input, result value, …) are cut with a marker \
             and listed in `cut`; `GET /v1/tasks/{id}` gives them whole.",
            true,
            |call, args| Box::pin(task(call.state, call.caller, args)),
        ),
        entry::<TasksArgs, TaskPageSchema>(
            "tasks",
            "List tasks newest first, optionally by status (queued, running, pass, blocked, \
             failed, cancelled) and agent; at most 200 a page (limit 1 to 200), each value \
             cut at 4 KiB (see `task`); continue with `after` = `next`.",
            true,
            |call, args| Box::pin(tasks(call.state, call.caller, args)),
        ),
        entry::<OutputArgs, OutputPageSchema>(
            "output",
            "Read a task's output records (progress, logs, finals) after a seq, at most 1000 \
             a page (limit 1 to 1000), values past 64 KiB cut with a marker and listed in \
             `cut`; while `more` is true, continue with `after` = the page's `next` (or, \
             with `attempt`, `after_seq` = the last record's seq).",
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
    /// The values cut to bound the answer: `{values: {<JSON pointer>:
    /// <whole size in bytes>}, read}`, `read` saying where to read them whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut: Option<Value>,
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
    /// Records after this seq of `attempt` (refused without `attempt`: a
    /// seq is one attempt's).
    #[serde(default)]
    after_seq: Option<u64>,
    /// Records after this cursor: a page's `next` (`<attempt>:<seq>`, or
    /// with `attempt` its seq).
    #[serde(default)]
    #[schemars(length(max = MAX_CURSOR))]
    after: Option<String>,
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
    bound_task_within(&mut value, MAX_ANSWER_BYTES);
    Ok(value)
}

pub(super) async fn tasks(state: &AppState, caller: &Caller, args: TasksArgs) -> Outcome {
    let before = args.after.as_deref().map(task_id).transpose()?;
    let filter = TaskFilter {
        status: args.status.map(Into::into),
        agent: args.agent,
        before,
        limit: within("limit", args.limit, DEFAULT_TASKS, MAX_TASKS)?,
        ..TaskFilter::default()
    };
    let page = tasks::page_within(state, caller, filter, MAX_READ_BYTES).await?;
    let mut page = serde_json::to_value(&page).map_err(|e| ApiError::internal(&e))?;
    bound_page(&mut page, "tasks", "next", |task| {
        bound_task(task, MAX_LISTED_VALUE_BYTES);
        task.get("id").and_then(Value::as_str).map(str::to_owned)
    });
    Ok(page)
}

/// The stored bytes of tasks one `tasks` call reads at most (its page
/// ends early, with its `next`, past it); the answer is then bounded by
/// [`MAX_ANSWER_BYTES`] with each task's values cut.
const MAX_READ_BYTES: usize = 4 << 20;

/// `value`, or `default` when unset; outside 1 to `max` a `bad_request`
/// naming the range.
fn within(name: &str, value: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "{name} must be 1 to {max}, not {n}"
        ))),
    }
}

pub(super) async fn output(state: &AppState, caller: &Caller, args: OutputArgs) -> Outcome {
    let id = task_id(&args.task_id)?;
    caller.check(state, Verb::ReadOutput)?;
    let view = TaskView::read(&state.engine, Reader::of(caller), id)
        .await?
        .ok_or_else(|| tasks::unknown(id))?;
    let cursor = PageCursor {
        attempt: args.attempt,
        after_seq: args.after_seq,
        last_id: args.after.as_deref(),
        limit: within("limit", args.limit, DEFAULT_RECORDS, MAX_RECORDS)?,
    };
    let page = output::page(state, &view, cursor).await?;
    let mut page = serde_json::to_value(&page).map_err(|e| ApiError::internal(&e))?;
    let whole = format!("GET /v1/tasks/{id}/output");
    let cut = bound_page(&mut page, "records", "next", |record| {
        bound_record(record, &whole, args.attempt.is_some())
    });
    if cut {
        page["more"] = Value::Bool(true);
    }
    Ok(page)
}

#[path = "read_bound.rs"]
mod bound;

#[cfg(test)]
mod tests {
    use super::bound::*;
    use super::*;
    use serde_json::json;
    use swarmd_engine::ErrorCode;

    const ID: &str = "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";

    #[test]
    fn a_long_value_is_cut_on_a_character_boundary_with_a_marker() {
        let mut value = Value::String("é\"".repeat(200 * 1024));
        let whole = serde_json::to_string(&value).unwrap().len();
        assert_eq!(
            cut_value(&mut value, 64 * 1024, "GET /v1/tasks/X"),
            Some(whole)
        );
        let text = value.as_str().unwrap();
        assert!(serde_json::to_string(&value).unwrap().len() <= 64 * 1024);
        assert!(text.starts_with("é\"é"), "{}", &text[..10]);
        assert!(
            text.ends_with(&format!(
                " … [cut: {whole} bytes in all; read it whole with GET /v1/tasks/X]"
            )),
            "{}",
            &text[text.len() - 120..]
        );
        let mut small = json!({"a": 1});
        assert_eq!(cut_value(&mut small, 64, "x"), None);
        assert_eq!(small, json!({"a": 1}));
    }

    #[test]
    fn a_task_answer_stays_within_its_budget_whatever_the_task_holds() {
        let big = "y".repeat(600 * 1024);
        let mut task = json!({
            "id": ID, "agent": "echo", "status": "pass", "prompt": big,
            "system": big, "input": {"list": [big]}, "metadata": {"k": big},
            "result": {"value": big, "ok": true}, "reason": big,
            "attempts": [{"attempt": 1, "reason": big}],
        });
        bound_task_within(&mut task, MAX_ANSWER_BYTES);
        assert!(answer_bytes(&task) <= MAX_ANSWER_BYTES);
        let cut = &task["cut"];
        assert_eq!(cut["read"], format!("GET /v1/tasks/{ID}"));
        for pointer in [
            "/prompt",
            "/system",
            "/input",
            "/metadata",
            "/result/value",
            "/reason",
            "/attempts/0/reason",
        ] {
            assert!(
                cut["values"][pointer].as_u64().unwrap() > 600 * 1024,
                "{pointer}"
            );
            let text = task.pointer(pointer).unwrap().as_str().unwrap();
            assert!(text.contains("[cut: "), "{pointer}");
        }
        assert_eq!(task["result"]["ok"], true);
        // One large value alone keeps 64 KiB.
        let mut task = json!({"id": ID, "prompt": big});
        bound_task_within(&mut task, MAX_ANSWER_BYTES);
        let kept = serde_json::to_string(&task["prompt"]).unwrap().len();
        assert!((60 * 1024..=64 * 1024).contains(&kept), "{kept}");
        // A small task is left as it is, with no `cut`.
        let mut small = json!({"id": ID, "prompt": "hi"});
        bound_task_within(&mut small, MAX_ANSWER_BYTES);
        assert_eq!(small, json!({"id": ID, "prompt": "hi"}));
    }

    #[test]
    fn a_run_answer_stays_within_its_budget_whatever_its_steps_returned() {
        const RUN: &str = "R-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";
        let big = "y".repeat(600 * 1024);
        let step = |n: u32| {
            json!({"key": format!("/s{n}"), "kind": "step", "status": "passed",
                   "tries": [{"key": "t", "task_id": ID, "output": {"text": big}}]})
        };
        let mut view = json!({
            "id": RUN, "flow": "f", "status": "passed", "input": {"topic": big},
            "result": big, "nodes": (0..12).map(step).collect::<Vec<_>>(),
            "waits": [{"key": "w", "name": "ok", "open": false, "prompt": big, "answer": "yes"}],
            "graph": {"name": "f"},
        });
        bound_run_within(&mut view, MAX_ANSWER_BYTES);
        assert!(answer_bytes(&view) <= MAX_ANSWER_BYTES);
        let cut = &view["cut"];
        assert_eq!(cut["read"], format!("GET /v1/runs/{RUN}"));
        for pointer in [
            "/input",
            "/result",
            "/nodes/0/tries/0/output",
            "/nodes/11/tries/0/output",
            "/waits/0/prompt",
        ] {
            assert!(
                cut["values"][pointer].as_u64().unwrap() > 600 * 1024,
                "{pointer}"
            );
            let text = view.pointer(pointer).unwrap().as_str().unwrap();
            assert!(
                text.ends_with(&format!("read it whole with GET /v1/runs/{RUN}]")),
                "{pointer}"
            );
        }
        assert_eq!(view["waits"][0]["answer"], "yes");
        assert_eq!(view["graph"], json!({"name": "f"}));
        // A flow tool's answer names its run as `run_id`; one large result
        // keeps 64 KiB.
        let mut called = json!({"run_id": RUN, "status": "passed", "done": true, "result": big});
        bound_run_within(&mut called, MAX_ANSWER_BYTES);
        let kept = serde_json::to_string(&called["result"]).unwrap().len();
        assert!((60 * 1024..=64 * 1024).contains(&kept), "{kept}");
        assert_eq!(called["cut"]["read"], format!("GET /v1/runs/{RUN}"));
        // A small run is left as it is, with no `cut`.
        let small = json!({"id": RUN, "result": "hi", "nodes": [step(0)["key"]]});
        let mut same = small.clone();
        bound_run_within(&mut same, MAX_ANSWER_BYTES);
        assert_eq!(same, small);
    }

    #[test]
    fn a_page_ends_early_past_its_answer_bound_and_keeps_its_first_item() {
        let item = |n: u32| json!({"id": format!("T-{n}"), "prompt": "z".repeat(200 * 1024)});
        let mut page = json!({"tasks": [item(1), item(2), item(3)]});
        let ended = bound_page(&mut page, "tasks", "next", |t| {
            t["id"].as_str().map(str::to_owned)
        });
        assert!(ended);
        assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
        assert_eq!(page["next"], "T-1");
        // Cut first, three fit, and the page keeps its own `next`.
        let mut page = json!({"tasks": [item(1), item(2), item(3)], "next": "T-3"});
        let ended = bound_page(&mut page, "tasks", "next", |t| {
            bound_task(t, MAX_LISTED_VALUE_BYTES);
            t["id"].as_str().map(str::to_owned)
        });
        assert!(!ended);
        assert_eq!(page["tasks"].as_array().unwrap().len(), 3);
        assert_eq!(page["next"], "T-3");
        assert_eq!(page["tasks"][2]["cut"]["values"]["/prompt"], 200 * 1024 + 2);
    }

    #[test]
    fn an_output_record_is_cut_and_names_its_place() {
        let mut record = json!({
            "attempt": 2, "seq": 7, "ts_ms": 1, "producer": "w",
            "event": {"type": "final", "ok": true,
                      "content": {"kind": "inline", "value": "v".repeat(300 * 1024)}},
        });
        let id = bound_record(&mut record, "GET /v1/tasks/T-1/output", false);
        assert_eq!(id.as_deref(), Some("2:7"));
        let read = "GET /v1/tasks/T-1/output?attempt=2&after_seq=6&limit=1";
        assert_eq!(record["cut"]["read"], read);
        assert_eq!(
            record["cut"]["values"]["/event/content/value"],
            300 * 1024 + 2
        );
        let mut small =
            json!({"attempt": 1, "seq": 3, "event": {"type": "progress", "stage": "s"}});
        assert_eq!(bound_record(&mut small, "x", true).as_deref(), Some("3"));
        assert!(small.get("cut").is_none());
    }

    #[test]
    fn limits_out_of_range_are_refused_naming_the_range() {
        assert_eq!(within("limit", None, 50, MAX_TASKS).unwrap(), 50);
        assert_eq!(within("limit", Some(200), 50, MAX_TASKS).unwrap(), 200);
        for (bad, max) in [
            (0, MAX_TASKS),
            (201, MAX_TASKS),
            (0, MAX_RECORDS),
            (1001, MAX_RECORDS),
        ] {
            let error = within("limit", Some(bad), 1, max).unwrap_err();
            assert_eq!(error.code(), ErrorCode::BadRequest);
            assert_eq!(
                error.message(),
                format!("limit must be 1 to {max}, not {bad}")
            );
        }
    }

    #[test]
    fn the_schemas_state_the_bounds_the_tools_enforce() {
        let catalogue = crate::catalogue(true);
        let property = |tool: &str, field: &str| {
            let tool = catalogue.get(tool).unwrap().tool();
            Value::Object((*tool.input_schema).clone())["properties"][field].clone()
        };
        assert_eq!(property("tasks", "limit")["minimum"], 1);
        assert_eq!(property("tasks", "limit")["maximum"], MAX_TASKS);
        assert_eq!(property("output", "limit")["minimum"], 1);
        assert_eq!(property("output", "limit")["maximum"], MAX_RECORDS);
        assert_eq!(property("output", "after")["maxLength"], MAX_CURSOR);
        assert_eq!(property("run", "wait_secs")["maximum"], 600);
        assert_eq!(property("cancel", "reason")["maxLength"], 1024);
        assert_eq!(property("cancel_run", "reason")["maxLength"], 1024);
        assert_eq!(property("worker_progress", "stage")["maxLength"], 4096);
        assert_eq!(property("worker_progress", "note")["maxLength"], 4096);
        assert_eq!(property("spawn", "idempotency_key")["maxLength"], 256);
        assert_eq!(property("start_run", "idempotency_key")["maxLength"], 200);
        assert_eq!(
            property("mse_pending_wait", "timeout_ms")["maximum"],
            600_000
        );
    }

    #[test]
    fn popped_frames_are_cut_to_one_answer_naming_where_to_read_them() {
        let big = "z".repeat(600 * 1024);
        let small = json!({"type": "spawn", "req_id": "r-1", "task_id": "T-2", "directive": "go"});
        let mut frames = vec![
            json!({"type": "run_done", "run_id": "R-1", "status": "pass", "result": {"text": big}}),
            json!({"type": "task_done", "task_id": "T-1", "status": "pass", "value": big}),
            small.clone(),
        ];
        bound_frames(&mut frames, MAX_ANSWER_BYTES);
        let total: usize = frames.iter().map(answer_bytes).sum();
        assert!(total <= MAX_ANSWER_BYTES, "{total}");
        assert_eq!(frames[0]["run_id"], "R-1");
        assert_eq!(frames[0]["cut"]["read"], "GET /v1/runs/R-1");
        assert!(frames[0]["cut"]["values"]["/result"].as_u64().unwrap() > 600 * 1024);
        let result = frames[0]["result"].as_str().unwrap();
        assert!(
            result.ends_with("read it whole with GET /v1/runs/R-1]"),
            "{result:.80}"
        );
        assert_eq!(frames[1]["cut"]["read"], "GET /v1/tasks/T-1");
        assert!(frames[1]["value"].as_str().unwrap().starts_with("zzz"));
        assert_eq!(frames[2], small, "a small frame is left whole");

        let mut few = vec![small.clone()];
        bound_frames(&mut few, MAX_ANSWER_BYTES);
        assert_eq!(few, [small]);
    }
}
