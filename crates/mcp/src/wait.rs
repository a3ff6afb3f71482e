//! The `wait` tool: waits for several tasks (all, any, or the first N) up to
//! a bounded timeout and returns their statuses and results. A task outside
//! the caller's part (`http::views::Reader`) is unknown.
//!
//! While it waits it sends `notifications/progress` every `mcp.progress_ms`
//! (when the client gave a progress token): coding-agent clients drop calls
//! that go silent, and a notification resets their idle timers. It returns
//! early when the client cancels the call (nothing is sent back then) or the
//! daemon drains, and at its timeout with what it has.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::Task;

use super::fanout::task_id;
use super::read::{answer_bytes, cut_value};
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::tasks;
use swarmd_api::http::views::Reader;

/// The most tasks one `wait` covers.
pub(crate) const MAX_WAIT_TASKS: usize = 100;
/// The longest one `wait` lasts.
pub(crate) const MAX_WAIT_SECS: u64 = 600;
const DEFAULT_WAIT_SECS: u64 = 60;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![entry::<WaitArgs, Waited>(
        "wait",
        "Wait for tasks to finish: all of them (default), any one, or the first n. Returns \
         at the latest after timeout_secs (default 60, at most 600) with every task's status \
         and, for finished ones, the result ({value, ok}); `done` says whether the mode was \
         met. Sends progress notifications while it waits.",
        true,
        |call, args| Box::pin(wait(call.state, call.caller, args, call.context)),
    )]
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitArgs {
    /// The tasks to wait for (1 to 100 ids, `T-…`).
    #[schemars(length(min = 1, max = MAX_WAIT_TASKS))]
    task_ids: Vec<String>,
    /// `all` (default), `any`, or `first` (then `n` says how many).
    #[serde(default)]
    mode: Mode,
    /// With `first`: how many tasks must finish (1 to the number of ids).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_WAIT_TASKS))]
    n: Option<usize>,
    /// Seconds to wait at most: 1 to 600 (default 60).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_WAIT_SECS))]
    timeout_secs: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    #[default]
    All,
    Any,
    First,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Waited {
    /// Whether the mode was met (false: the timeout came first, or the
    /// daemon is draining).
    pub(super) done: bool,
    /// How many of the tasks are final.
    pub(super) finished: usize,
    /// Every task asked for, in the order asked: finished ones carry their result.
    pub(super) tasks: Vec<TaskState>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct TaskState {
    pub(super) task_id: String,
    agent: String,
    /// queued, running, pass, blocked, failed or cancelled.
    pub(super) status: String,
    /// The deciding final's value, once the task is final (when it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) value: Option<Value>,
    /// The deciding final's `ok`, once the task is final (when it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ok: Option<bool>,
    /// Why the task ended as it did, when the daemon says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    /// The value's size in bytes (as JSON) when it is left out of this
    /// answer, which carries at most 512 KiB of values (counted as the
    /// answer carries them: as JSON and again as escaped text): read it
    /// whole with `GET /v1/tasks/{id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) value_bytes: Option<usize>,
}

/// The most bytes of values one wait answer carries, each counted as it
/// travels: a tool result is sent twice in one message (as structured
/// content and as its JSON escaped as text), and the official Python SDK
/// refuses a server-sent event over 1 MiB.
pub(super) const MAX_VALUE_BYTES: usize = 512 * 1024;
/// The most bytes of JSON a task's `reason` takes in a wait answer; a
/// longer one is cut with a marker saying where to read it whole.
const MAX_REASON_BYTES: usize = 4 * 1024;

/// Leaves out the values past [`MAX_VALUE_BYTES`], in the order asked,
/// each with its size so the caller knows to read it with `task`, and
/// cuts each reason to [`MAX_REASON_BYTES`].
fn within_bound(states: &mut [TaskState]) {
    let mut carried = 0usize;
    for state in states {
        if let Some(reason) = state.reason.take() {
            let mut reason = Value::String(reason);
            let read = format!("GET /v1/tasks/{}", state.task_id);
            cut_value(&mut reason, MAX_REASON_BYTES, &read);
            state.reason = reason.as_str().map(str::to_owned);
        }
        let Some(value) = &state.value else {
            continue;
        };
        let carries = answer_bytes(value);
        if carried.saturating_add(carries) > MAX_VALUE_BYTES {
            let bytes = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
            state.value = None;
            state.value_bytes = Some(bytes);
        } else {
            carried += carries;
        }
    }
}

impl From<&Task> for TaskState {
    fn from(task: &Task) -> Self {
        TaskState {
            task_id: task.id.to_string(),
            agent: task.agent.clone(),
            status: task.status().to_string(),
            value: task.result.as_ref().map(|r| r.value.clone()),
            ok: task.result.as_ref().map(|r| r.ok),
            reason: task.reason.clone(),
            value_bytes: None,
        }
    }
}

/// What a wait is for: the ids, and how many must be final.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) ids: Vec<TaskId>,
    pub(super) needed: usize,
    pub(super) timeout: Duration,
}

fn target(args: WaitArgs) -> Result<Target, ApiError> {
    let count = args.task_ids.len();
    if count == 0 || count > MAX_WAIT_TASKS {
        return Err(ApiError::bad_request(format!(
            "task_ids must hold 1 to {MAX_WAIT_TASKS} ids, not {count}"
        )));
    }
    let mut ids = Vec::with_capacity(count);
    let mut seen = BTreeSet::new();
    for text in &args.task_ids {
        let id = task_id(text)?;
        if seen.insert(id) {
            ids.push(id);
        }
    }
    let needed = match (args.mode, args.n) {
        (Mode::All, None) => ids.len(),
        (Mode::Any, None) => 1,
        (Mode::First, Some(n)) if (1..=ids.len()).contains(&n) => n,
        (Mode::First, Some(n)) => {
            return Err(ApiError::bad_request(format!(
                "n must be 1 to {} (the number of distinct ids), not {n}",
                ids.len()
            )));
        }
        (Mode::First, None) => return Err(ApiError::bad_request("mode `first` needs n")),
        (_, Some(_)) => return Err(ApiError::bad_request("n goes with mode `first` only")),
    };
    let secs = args.timeout_secs.unwrap_or(DEFAULT_WAIT_SECS);
    if !(1..=MAX_WAIT_SECS).contains(&secs) {
        return Err(ApiError::bad_request(format!(
            "timeout_secs must be 1 to {MAX_WAIT_SECS}, not {secs}"
        )));
    }
    Ok(Target {
        ids,
        needed,
        timeout: Duration::from_secs(secs),
    })
}

pub(super) async fn wait(
    state: &AppState,
    caller: &Caller,
    args: WaitArgs,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    let target = target(args)?;
    caller.check(state, Verb::ReadTask)?;
    let reader = Reader::of(caller);
    for &id in &target.ids {
        if reader.read(&state.engine, id).await?.is_none() {
            return Err(tasks::unknown(id));
        }
    }
    structured(&collect(state, target, context).await?)
}

/// Waits for `target` as `wait` does, with its progress notifications. A
/// client's cancellation of the call ends it with an error (the call
/// answers nothing then); the timeout and a drain end it with what it has.
pub(super) async fn collect(
    state: &AppState,
    target: Target,
    context: &RequestContext<RoleServer>,
) -> Result<Waited, ApiError> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + target.timeout;
    let mut tasks = Vec::with_capacity(target.ids.len());
    for &id in &target.ids {
        let task = state
            .engine
            .get_task(id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("task {id}")))?;
        tasks.push(task);
    }
    let mut finished = tasks.iter().filter(|t| t.status().is_terminal()).count();
    let mut pending: FuturesUnordered<_> = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.status().is_terminal())
        .map(|(index, t)| {
            let engine = state.engine.clone();
            let (id, timeout) = (t.id, target.timeout);
            async move { (index, engine.wait_task(id, timeout).await) }
        })
        .collect();
    let progress = context
        .meta
        .get_progress_token()
        .map(|token| Progress::new(token, context.peer.clone(), tasks.len(), target.timeout));
    tracing::debug!(
        tasks = tasks.len(),
        finished,
        needed = target.needed,
        "wait started"
    );
    let interval = Duration::from_millis(state.config.mcp.progress_ms);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut last: Option<usize> = None;
    while finished < target.needed {
        tokio::select! {
            next = pending.next() => {
                let Some((index, waited)) = next else { break };
                let task = waited?;
                if task.status().is_terminal() {
                    finished += 1;
                    last = Some(index);
                }
                tasks[index] = task;
            }
            _ = ticker.tick() => {
                if let Some(progress) = &progress {
                    let last = last.map(|i| &tasks[i]);
                    progress.send(finished, last, started.elapsed()).await;
                }
            }
            () = context.ct.cancelled() => {
                tracing::debug!(tasks = tasks.len(), finished, "wait cancelled by its client");
                return Err(ApiError::bad_request("the client cancelled the call"));
            }
            () = state.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    let mut states: Vec<TaskState> = tasks.iter().map(TaskState::from).collect();
    within_bound(&mut states);
    Ok(Waited {
        done: finished >= target.needed,
        finished,
        tasks: states,
    })
}

/// Where and how a wait reports progress.
struct Progress {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    total: usize,
    timeout: Duration,
}

impl Progress {
    fn new(token: ProgressToken, peer: Peer<RoleServer>, total: usize, timeout: Duration) -> Self {
        Progress {
            token,
            peer,
            total,
            timeout,
        }
    }

    /// Sends one notification. `progress` is the number of finished tasks
    /// plus the elapsed share of the timeout (below 1), so it grows with
    /// every notification as the protocol asks, and its whole part is the
    /// count. A failed send (the client went away) is not an error here:
    /// the call ends through cancellation.
    async fn send(&self, finished: usize, last: Option<&Task>, elapsed: Duration) {
        let share = (elapsed.as_secs_f64() / self.timeout.as_secs_f64()).min(0.999);
        let mut message = format!("{finished}/{} done", self.total);
        if let Some(task) = last {
            message.push_str(&format!(", last: {} {}", task.id, task.status()));
        }
        message.push_str(&format!(", {}s elapsed", elapsed.as_secs()));
        let params = ProgressNotificationParam::new(self.token.clone(), finished as f64 + share)
            .with_total(self.total as f64)
            .with_message(message);
        if let Err(error) = self.peer.notify_progress(params).await {
            tracing::debug!(%error, "progress notification not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(json: Value) -> WaitArgs {
        serde_json::from_value(json).unwrap()
    }

    const A: &str = "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";
    const B: &str = "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e1f";

    #[test]
    fn the_schema_states_the_bounds_the_tool_enforces() {
        let schema = rmcp::handler::server::common::schema_for_input::<WaitArgs>().unwrap();
        let properties = &schema["properties"];
        assert_eq!(properties["task_ids"]["minItems"], 1);
        assert_eq!(properties["task_ids"]["maxItems"], MAX_WAIT_TASKS);
        assert_eq!(properties["timeout_secs"]["minimum"], 1);
        assert_eq!(properties["timeout_secs"]["maximum"], MAX_WAIT_SECS);
        assert_eq!(properties["n"]["maximum"], MAX_WAIT_TASKS);
    }

    #[test]
    fn values_past_the_bound_are_left_out_with_their_size() {
        let state = |value: Value| TaskState {
            task_id: A.to_owned(),
            agent: "a".to_owned(),
            status: "pass".to_owned(),
            value: Some(value),
            ok: Some(true),
            reason: None,
            value_bytes: None,
        };
        let big = Value::String("x".repeat(100 * 1024));
        let mut states: Vec<_> = (0..4).map(|_| state(big.clone())).collect();
        states.push(state(serde_json::json!(1)));
        within_bound(&mut states);
        let carried: Vec<bool> = states.iter().map(|s| s.value.is_some()).collect();
        // Two of 100 KiB fit in 512 KiB as carried (twice each), the
        // small one after them too.
        assert_eq!(carried, [true, true, false, false, true]);
        assert_eq!(states[2].value_bytes, Some(100 * 1024 + 2));
        assert_eq!(states[4].value_bytes, None);
    }

    #[test]
    fn modes_set_how_many_must_finish() {
        let all = target(args(serde_json::json!({"task_ids": [A, B, A]}))).unwrap();
        assert_eq!((all.ids.len(), all.needed), (2, 2));
        let any = target(args(serde_json::json!({"task_ids": [A, B], "mode": "any"}))).unwrap();
        assert_eq!(any.needed, 1);
        let first = target(args(
            serde_json::json!({"task_ids": [A, B], "mode": "first", "n": 2}),
        ))
        .unwrap();
        assert_eq!(first.needed, 2);
        assert_eq!(first.timeout, Duration::from_secs(DEFAULT_WAIT_SECS));
    }

    #[test]
    fn bounds_are_refused_with_bad_request() {
        for bad in [
            serde_json::json!({"task_ids": []}),
            serde_json::json!({"task_ids": [A], "mode": "first"}),
            serde_json::json!({"task_ids": [A], "mode": "first", "n": 2}),
            serde_json::json!({"task_ids": [A], "n": 1}),
            serde_json::json!({"task_ids": [A], "timeout_secs": 601}),
            serde_json::json!({"task_ids": [A], "timeout_secs": 0}),
            serde_json::json!({"task_ids": ["T-nothex"]}),
            serde_json::json!({"task_ids": vec![A; MAX_WAIT_TASKS + 1]}),
        ] {
            let error = target(args(bad.clone())).unwrap_err();
            assert_eq!(error.code(), swarmd_engine::ErrorCode::BadRequest, "{bad}");
        }
    }
}
