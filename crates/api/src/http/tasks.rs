//! Task routes (docs/protocol.md, Task routes): spawn (with `wait_secs` and `Idempotency-Key`),
//! list with cursor paging, get with attempts, long-poll wait, cancel.
//!
//! A task's run never belongs to the request that created it: the engine
//! owns it once `create_task` returns, and a client that disconnects while
//! waiting only stops its own wait. Idempotency keys are scoped per caller
//! (`http:<sid>:<key>` for a session, `http:admin:<key>` for the admin), so
//! two callers never collide on a key.
//!
//! Every read goes through `views::Reader`: an operator session reads,
//! waits for and cancels only the tasks it owns, and another session's task
//! is answered as an unknown one. Only the admin pins a task to any session
//! (`operator_sid`); a session pins only to itself (`check_pin`).

use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use swarmd_engine::auth::{looks_like_handle, looks_like_token};
use swarmd_engine::gate::{Role, Verb};
use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::{PolicyOverrides, Task, TaskStatus};
use swarmd_engine::{ErrorCode, MAX_CANCEL_REASON};

use super::views::{Reader, TaskView};

use crate::app::AppState;
use crate::http::auth::{Caller, WorkerBearer, authenticate, authenticate_worker};
use crate::http::error::ApiError;
use crate::http::extract::{IdempotencyKey, Json, NoQuery, Path, Query, RawBody, empty_as_none};
use crate::new_task::{NewTask, Origin};
use swarmd_sessions::{CancelError, Canceller, cancel_as};

/// The longest a request may wait for a task (`wait_secs`, `timeout_secs`).
pub const MAX_WAIT_SECS: u64 = 300;
const DEFAULT_WAIT_SECS: u64 = 30;
const DEFAULT_LIST_LIMIT: usize = 50;
const MAX_LIST_LIMIT: usize = 1000;
/// A listing's page ends once its tasks weigh this much as stored (it
/// holds at least one), so `limit=1000` over large prompts is not a
/// gigabyte held in memory; `next` then continues after its last task.
pub const MAX_PAGE_BYTES: usize = 16 << 20;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tasks", post(spawn).get(list))
        .route("/v1/tasks/{id}", get(get_task))
        .route("/v1/tasks/{id}/wait", get(wait))
        .route("/v1/tasks/{id}/cancel", post(cancel))
}

/// `POST /v1/tasks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnBody {
    /// May be left out with `continue_from`: the previous task's agent.
    #[serde(default)]
    agent: String,
    prompt: String,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    layers: Vec<String>,
    #[serde(default)]
    policy: PolicyOverrides,
    /// Pins the task's operator attempts to this session.
    #[serde(default)]
    operator_sid: Option<SessionId>,
    /// The finished task this one continues (docs/tasks.md, Continuations).
    #[serde(default)]
    continue_from: Option<TaskId>,
    #[serde(default)]
    wait_secs: Option<u64>,
}

/// `POST /v1/tasks` answer while the task runs.
#[derive(Debug, Serialize)]
struct Accepted {
    task_id: TaskId,
    status: TaskStatus,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    status: Option<TaskStatus>,
    #[serde(default, deserialize_with = "empty_as_none")]
    agent: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    limit: Option<usize>,
    /// The last task id of the previous page.
    #[serde(default, deserialize_with = "empty_as_none")]
    after: Option<TaskId>,
    /// Tasks owned by this session.
    #[serde(default, deserialize_with = "empty_as_none")]
    session: Option<SessionId>,
    /// Sub-tasks of this task.
    #[serde(default, deserialize_with = "empty_as_none")]
    parent: Option<TaskId>,
    /// Continuations of this task.
    #[serde(default, deserialize_with = "empty_as_none")]
    continued_from: Option<TaskId>,
    /// Text the prompt contains (ASCII letters in either case).
    #[serde(default, deserialize_with = "empty_as_none")]
    q: Option<String>,
    /// Created at or after this unix millisecond.
    #[serde(default, deserialize_with = "empty_as_none")]
    since_ms: Option<u64>,
    /// Created before this unix millisecond.
    #[serde(default, deserialize_with = "empty_as_none")]
    until_ms: Option<u64>,
}

/// The longest prompt text a list may search for.
const MAX_QUERY_CHARS: usize = 256;

#[derive(Debug, Serialize)]
pub struct TaskPage {
    pub(crate) tasks: Vec<Task>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next: Option<TaskId>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

async fn spawn(
    State(state): State<AppState>,
    Spawner(origin): Spawner,
    _: NoQuery,
    IdempotencyKey(key): IdempotencyKey,
    Json(body): Json<SpawnBody>,
) -> Result<Response, ApiError> {
    let wait_secs = body.wait_secs;
    let request = NewTask {
        agent: body.agent,
        prompt: body.prompt,
        system: body.system,
        input: body.input,
        metadata: body.metadata,
        layers: body.layers,
        policy: body.policy,
        operator_sid: body.operator_sid,
        continue_from: body.continue_from,
    };
    let task = create(&state, &origin, request, key).await?;
    if let Some(secs) = wait_secs.filter(|s| *s > 0) {
        let waited = wait_for(&state, task.id, secs.min(MAX_WAIT_SECS)).await?;
        if waited.status().is_terminal() {
            let view = view_of(&state, waited).await?;
            return Ok((StatusCode::CREATED, Json(finished_body(view)?)).into_response());
        }
        return Ok(accepted(&waited));
    }
    Ok(accepted(&task))
}

/// Creates a task for `origin` (`NewTask::create`), once its pin of an
/// operator session, if any, is allowed.
pub async fn create(
    state: &AppState,
    origin: &Origin,
    request: NewTask,
    key: Option<String>,
) -> Result<Task, ApiError> {
    if let Some(sid) = request.operator_sid {
        check_pin(state, origin, sid).await?;
    }
    Ok(request
        .create(&state.engine, origin, key.as_deref())
        .await?)
}

/// Whether `origin` may pin its task to session `pin`: the admin may name
/// any session; an operator session only itself; a worker only the session
/// that owns its task (which its sub-task inherits). Anyone else is refused
/// `403` before the session is looked up, so a refusal says nothing of which
/// sessions exist; a pin allowed but naming no session is `400`.
async fn check_pin(state: &AppState, origin: &Origin, pin: SessionId) -> Result<(), ApiError> {
    let own = match (&origin.worker, origin.session) {
        (Some(worker), _) => state
            .engine
            .get_task(worker.attempt.task)
            .await?
            .and_then(|task| task.session),
        (None, Some(sid)) => Some(sid),
        (None, None) => Some(pin),
    };
    if own != Some(pin) {
        state.metrics.token_failure("forbidden");
        return Err(ApiError::coded(
            ErrorCode::Forbidden,
            "operator_sid may name only the session that owns the task",
        ));
    }
    if state.sessions.find(&pin).await.is_none() {
        return Err(ApiError::bad_request(format!(
            "operator_sid names no session: {pin}"
        )));
    }
    Ok(())
}

/// Who creates a task, resolved from the bearer (`spawner_of`) before the
/// body is read: a refused credential costs no body.
struct Spawner(Origin);

impl FromRequestParts<AppState> for Spawner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let bearer = WorkerBearer::from_request_parts(parts, state).await?;
        spawner_of(state, &bearer).map(Spawner)
    }
}

/// Admins and operator sessions create top-level tasks; a worker whose agent
/// allows sub-tasks (its credential carries `spawn_task`) creates a sub-task
/// of its own task (docs/tasks.md, Sub-tasks), which the engine refuses once
/// the worker's attempt is no longer the open one.
fn spawner_of(state: &AppState, bearer: &WorkerBearer) -> Result<Origin, ApiError> {
    let token = bearer.0.as_str();
    let is_worker = looks_like_handle(token)
        || (looks_like_token(token)
            && state
                .engine
                .tokens()
                .verify(token)
                .is_ok_and(|claims| claims.role == Role::Worker));
    if is_worker {
        let auth = authenticate_worker(state, bearer, Verb::SpawnTask)?;
        return Ok(Origin {
            session: None,
            scope: format!("http:worker:{}", auth.attempt.task),
            worker: Some(auth),
        });
    }
    let caller = authenticate(state, token)?;
    origin_of(state, &caller)
}

/// An admin or operator session creating a top-level task.
pub fn origin_of(state: &AppState, caller: &Caller) -> Result<Origin, ApiError> {
    caller.check(state, Verb::SpawnTask)?;
    let sid = caller.session().map(|s| s.sid);
    Ok(Origin {
        session: sid,
        worker: None,
        scope: sid.map_or_else(|| "http:admin".to_owned(), |sid| format!("http:{sid}")),
    })
}

fn accepted(task: &Task) -> Response {
    let body = Accepted {
        task_id: task.id,
        status: task.status(),
    };
    (StatusCode::CREATED, Json(body)).into_response()
}

/// A finished task as `POST /v1/tasks` returns it: the task view plus the
/// `task_id` every spawn answer carries.
fn finished_body(view: TaskView) -> Result<Value, ApiError> {
    let id = view.task.id;
    let mut value = serde_json::to_value(view).map_err(|e| ApiError::internal(&e))?;
    if let Value::Object(map) = &mut value {
        map.insert("task_id".into(), Value::String(id.to_string()));
    }
    Ok(value)
}

/// Waits up to `secs` for the task; a draining daemon ends the wait early.
async fn wait_for(state: &AppState, id: TaskId, secs: u64) -> Result<Task, ApiError> {
    let wait = state.engine.wait_task(id, Duration::from_secs(secs));
    tokio::select! {
        waited = wait => Ok(waited?),
        () = state.shutdown.cancelled() => state
            .engine
            .get_task(id)
            .await?
            .ok_or_else(|| unknown(id)),
    }
}

async fn view_of(state: &AppState, task: Task) -> Result<TaskView, ApiError> {
    Ok(TaskView::of(&state.engine, task).await?)
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<TaskPage>, ApiError> {
    if query
        .q
        .as_ref()
        .is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS)
    {
        return Err(ApiError::bad_request(format!(
            "q is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    let first_at = |name: &str, ms: Option<u64>| {
        ms.map(|ms| {
            TaskId::first_at(ms)
                .ok_or_else(|| ApiError::bad_request(format!("{name} is out of range")))
        })
        .transpose()
    };
    let since = first_at("since_ms", query.since_ms)?;
    // The earlier of the page cursor and the end of the time range.
    let before = match (query.after, first_at("until_ms", query.until_ms)?) {
        (Some(after), Some(until)) => Some(after.min(until)),
        (after, until) => after.or(until),
    };
    let filter = TaskFilter {
        status: query.status,
        agent: query.agent,
        before,
        since,
        session: query.session,
        parent: query.parent,
        continued_from: query.continued_from,
        prompt_contains: query.q,
        limit: query.limit.unwrap_or(DEFAULT_LIST_LIMIT),
    };
    Ok(Json(page(&state, &caller, filter).await?))
}

/// One page of the caller's tasks (`Reader`), newest first,
/// `filter.limit` clamped to 1–1000 and the page to [`MAX_PAGE_BYTES`].
pub async fn page(
    state: &AppState,
    caller: &Caller,
    filter: TaskFilter,
) -> Result<TaskPage, ApiError> {
    page_within(state, caller, filter, MAX_PAGE_BYTES).await
}

/// [`page`], the page cut at about `max_bytes` of tasks (at least one).
pub async fn page_within(
    state: &AppState,
    caller: &Caller,
    mut filter: TaskFilter,
    max_bytes: usize,
) -> Result<TaskPage, ApiError> {
    caller.check(state, Verb::ReadTask)?;
    if !Reader::of(caller).narrow(&mut filter) {
        return Ok(TaskPage {
            tasks: Vec::new(),
            next: None,
        });
    }
    let limit = filter.limit.clamp(1, MAX_LIST_LIMIT);
    filter.limit = limit;
    let listing = state.engine.list_page(&filter, max_bytes).await?;
    let tasks = listing.tasks;
    let next = (listing.cut || tasks.len() == limit)
        .then(|| tasks.last().map(|t| t.id))
        .flatten();
    Ok(TaskPage { tasks, next })
}

async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    Ok(Json(view(&state, &caller, id).await?))
}

/// A task with its attempts; one outside the caller's part is unknown.
pub async fn view(state: &AppState, caller: &Caller, id: TaskId) -> Result<TaskView, ApiError> {
    caller.check(state, Verb::ReadTask)?;
    TaskView::read(&state.engine, Reader::of(caller), id)
        .await?
        .ok_or_else(|| unknown(id))
}

/// The answer for a task that does not exist or is outside the caller's part.
pub fn unknown(id: TaskId) -> ApiError {
    ApiError::not_found(format!("task {id}"))
}

async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<TaskId>,
    Query(query): Query<WaitQuery>,
) -> Result<Json<TaskView>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    if Reader::of(&caller).read(&state.engine, id).await?.is_none() {
        return Err(unknown(id));
    }
    let secs = query
        .timeout_secs
        .unwrap_or(DEFAULT_WAIT_SECS)
        .min(MAX_WAIT_SECS);
    let task = wait_for(&state, id, secs).await?;
    Ok(Json(view_of(&state, task).await?))
}

async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(id): Path<TaskId>,
    RawBody(body): RawBody,
) -> Result<Json<Task>, ApiError> {
    caller.check(&state, Verb::CancelTask)?;
    let parsed: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
        CancelBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?
    };
    cancel_by(&state, &caller, id, parsed.reason)
        .await
        .map(Json)
}

/// Cancels a task as `caller` (admin, or the session that owns it); to a
/// session, another session's task is unknown (`Reader`).
pub async fn cancel_by(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
    reason: Option<String>,
) -> Result<Task, ApiError> {
    caller.check(state, Verb::CancelTask)?;
    if reason.as_ref().is_some_and(|r| r.len() > MAX_CANCEL_REASON) {
        return Err(ApiError::bad_request(format!(
            "reason is at most {MAX_CANCEL_REASON} bytes"
        )));
    }
    let who = match caller {
        Caller::Admin => Canceller::Admin,
        Caller::Operator(session) => Canceller::Session(session.sid),
        // The gate above refuses role tokens `cancel_task`.
        Caller::Token { .. } => return Err(ApiError::forbidden()),
    };
    let reason = reason.or_else(|| Some(cancel_reason(caller)));
    match cancel_as(&state.engine, who, id, reason).await {
        Ok(task) => Ok(task),
        Err(CancelError::NotOwner) => Err(unknown(id)),
        Err(CancelError::Engine(error)) => Err(error.into()),
    }
}

/// Who cancelled, for the task's reason when the request gives none.
fn cancel_reason(caller: &Caller) -> String {
    match caller.session() {
        Some(session) => format!("cancelled by session {}", session.sid),
        None => format!("cancelled by {}", caller.role()),
    }
}
