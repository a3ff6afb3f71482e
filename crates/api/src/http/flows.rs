//! Flows and their runs over HTTP (docs/flows.md, API): list and read the
//! flows the daemon offers, lint a flow, start a run (idempotent by key),
//! read one with every node's state (optionally waiting for its end),
//! list runs, cancel one, and answer a wait. A run is read by the admin,
//! role tokens and the session that owns it; it is cancelled by its owner
//! or the admin; a wait is answered by them or by anyone holding that one
//! wait's token.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::{ErrorCode, RunFilter, RunId, RunRecord, RunStatus, RunSummary};
use swarmd_flow::Flow;
use swarmd_flow_run::{FlowRef, RunError, StartRun, token};
use swarmd_wire::ErrorBody;

use super::views::Reader;
use crate::app::AppState;
use crate::http::MAX_WAIT_SECS;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{IdempotencyKey, Json, NoQuery, Path, Query, RawBody, empty_as_none};

/// Most runs one listing returns.
const MAX_LIST: usize = 500;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/flows", get(list_flows))
        .route("/v1/flows/lint", post(lint_flow))
        .route("/v1/flows/{name}", get(get_flow))
        .route("/v1/runs", post(start_run).get(list_runs))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/cancel", post(cancel_run))
        .route("/v1/runs/{id}/waits/{wait}", post(answer_wait))
}

/// A runner error as an answer; a flow that fails lint lists every
/// problem in `problems`.
pub(crate) fn run_error(error: RunError) -> Response {
    let message = error.to_string();
    // The code only: a message may quote the refused value (a schema's
    // error names what it met), and a wait's answer may be a secret.
    tracing::debug!(code = ?error.code(), "a run request was refused");
    match error {
        RunError::InvalidFlow { problems } => {
            let body = ErrorBody::new(ErrorCode::InvalidFlow, message).with_problems(problems);
            (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
        }
        RunError::Engine(e) => ApiError::from(e).into_response(),
        other => ApiError::coded(other.code(), message).into_response(),
    }
}

async fn list_flows(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let flows: Vec<Value> = state
        .runner
        .catalog()
        .entries()
        .map(|e| {
            json!({
                "name": e.flow.name,
                "description": e.flow.description,
                "hash": e.hash,
                "source": e.source,
                "input_schema": e.flow.input_schema,
            })
        })
        .collect();
    Ok(axum::Json(json!({ "flows": flows })).into_response())
}

async fn get_flow(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let entry = state
        .runner
        .catalog()
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("flow {name}")))?;
    Ok(axum::Json(json!({
        "name": entry.flow.name,
        "hash": entry.hash,
        "source": entry.source,
        "flow": &*entry.flow,
    }))
    .into_response())
}

/// `POST /v1/flows/lint`: `{flow}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LintRequest {
    flow: Value,
}

async fn lint_flow(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Json(request): Json<LintRequest>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let flow = parse_flow(request.flow)?;
    let problems = state.runner.lint(&flow);
    Ok(axum::Json(json!({
        "ok": problems.is_empty(),
        "hash": swarmd_flow::content_hash(&flow),
        "problems": problems,
    }))
    .into_response())
}

pub fn parse_flow(value: Value) -> Result<Flow, ApiError> {
    swarmd_flow_run::flow_from_value(&value).map_err(|e| {
        ApiError::coded(
            ErrorCode::InvalidFlow,
            format!("the flow is not flow IR (docs/flow.schema.json): {e}"),
        )
    })
}

/// `POST /v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRequest {
    /// A flow's name, or a flow's IR.
    flow: Value,
    #[serde(default = "empty_object")]
    input: Value,
    #[serde(default, deserialize_with = "empty_as_none")]
    idempotency_key: Option<String>,
}

fn empty_object() -> Value {
    json!({})
}

async fn start_run(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    IdempotencyKey(header_key): IdempotencyKey,
    Json(request): Json<StartRequest>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::SpawnTask)?;
    let key = header_key.or(request.idempotency_key);
    let start = start_request(&caller, request.flow, request.input, key)?;
    let (record, created) = match state.runner.start(start).await {
        Ok(done) => done,
        Err(e) => return Ok(run_error(e)),
    };
    let view = match state.runner.view(record.id, true).await {
        Ok(view) => view,
        Err(e) => return Ok(run_error(e)),
    };
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(view)).into_response())
}

/// The runner's request for a run `caller` starts: `flow` is a flow's
/// name or its IR; the idempotency key is scoped to the caller (its
/// session, or the admin) and the caller's session owns the run. The HTTP
/// route and the MCP tools start runs through it, so a key is shared
/// between them.
pub fn start_request(
    caller: &Caller,
    flow: Value,
    input: Value,
    key: Option<String>,
) -> Result<StartRun, ApiError> {
    let flow = match flow {
        Value::String(name) => FlowRef::Named(name),
        value @ Value::Object(_) => FlowRef::Inline(Box::new(parse_flow(value)?)),
        _ => {
            return Err(ApiError::bad_request(
                "`flow` is a flow's name or a flow's IR (an object)",
            ));
        }
    };
    let sid = caller.session().map(|s| s.sid);
    let scope = sid.map_or_else(|| "admin".to_owned(), |s| s.to_string());
    if key.as_ref().is_some_and(|k| k.len() > 200) {
        return Err(ApiError::bad_request(
            "idempotency_key is at most 200 bytes",
        ));
    }
    Ok(StartRun {
        flow,
        input,
        idempotency_key: key.map(|k| format!("run:{scope}:{k}")),
        session: sid,
        owner: Some(scope),
    })
}

/// `GET /v1/runs` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    status: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    flow: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    before: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

async fn list_runs(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let status = match query.status.as_deref() {
        None => None,
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            ApiError::bad_request("status is one of running, waiting, passed, failed, cancelled")
        })?),
    };
    let before = match query.before.as_deref() {
        None => None,
        Some(b) => Some(
            b.parse::<RunId>()
                .map_err(|e| ApiError::bad_request(format!("before: {e}")))?,
        ),
    };
    let filter = RunFilter {
        status,
        flow: query.flow,
        session: caller.session().map(|s| s.sid),
        before,
        limit: query.limit.unwrap_or(50).clamp(1, MAX_LIST),
    };
    let runs = state.runner.list(&filter).await.map_err(to_api)?;
    let runs: Vec<Value> = runs.iter().map(summary).collect();
    Ok(axum::Json(json!({ "runs": runs })).into_response())
}

/// A run as a listing shows it.
pub(crate) fn summary(run: &RunSummary) -> Value {
    json!({
        "id": run.id.to_string(),
        "flow": run.flow,
        "status": run.status.as_str(),
        "session": run.session.map(|s| s.to_string()),
        "created_ms": run.created_ms,
        "updated_ms": run.updated_ms,
        "error": run.error,
    })
}

pub fn to_api(error: RunError) -> ApiError {
    match error {
        RunError::Engine(e) => ApiError::from(e),
        other => ApiError::coded(other.code(), other.to_string()),
    }
}

/// `GET /v1/runs/{id}` query: `wait` seconds for the run to end.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetQuery {
    #[serde(default)]
    wait: Option<u64>,
}

async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<RunId>,
    Query(query): Query<GetQuery>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let record = visible(&state, &caller, id).await?;
    if let Some(secs) = query.wait.filter(|s| *s > 0)
        && !record.status.is_terminal()
    {
        let wait = state
            .runner
            .wait_for(id, Duration::from_secs(secs.min(MAX_WAIT_SECS)));
        tokio::select! {
            waited = wait => { waited.map_err(to_api)?; }
            () = state.shutdown.cancelled() => {}
        }
    }
    let owner = may_act(&caller, &record);
    match state.runner.view(id, owner).await {
        Ok(view) => Ok(axum::Json(view).into_response()),
        Err(e) => Ok(run_error(e)),
    }
}

/// Run `id` when the caller may read it; otherwise the same 404 as a run
/// that does not exist.
pub async fn visible(state: &AppState, caller: &Caller, id: RunId) -> Result<RunRecord, ApiError> {
    let unknown = || ApiError::not_found(format!("run {id}"));
    let record = match state.runner.record(id).await {
        Ok(record) => record,
        Err(RunError::NotFound(_)) => return Err(unknown()),
        Err(e) => return Err(to_api(e)),
    };
    if Reader::of(caller).sees(record.session) {
        Ok(record)
    } else {
        Err(unknown())
    }
}

/// The run's owner (the session that started it) or the admin.
pub fn may_act(caller: &Caller, record: &RunRecord) -> bool {
    match caller {
        Caller::Admin => true,
        Caller::Operator(session) => record.session == Some(session.sid),
        Caller::Token { .. } => false,
    }
}

/// `POST /v1/runs/{id}/cancel`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {
    #[serde(default)]
    reason: Option<String>,
}

async fn cancel_run(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(id): Path<RunId>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::CancelTask)?;
    let parsed: CancelRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CancelRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?
    };
    let record = visible(&state, &caller, id).await?;
    if !may_act(&caller, &record) {
        return Err(ApiError::forbidden());
    }
    let reason = parsed.reason;
    if reason.as_ref().is_some_and(|r| r.len() > 1024) {
        return Err(ApiError::bad_request("reason is at most 1024 bytes"));
    }
    if let Err(e) = state.runner.cancel(id, reason).await {
        return Ok(run_error(e));
    }
    match state.runner.view(id, true).await {
        Ok(view) => Ok(axum::Json(view).into_response()),
        Err(e) => Ok(run_error(e)),
    }
}

/// `POST /v1/runs/{id}/waits/{wait}`: `{value}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerRequest {
    value: Value,
}

/// Who answers a wait: a caller of the daemon, or the bearer of a wait
/// token (checked against the wait by the runner).
enum Answerer {
    Caller(Caller),
    WaitToken(String),
}

impl axum::extract::FromRequestParts<AppState> for Answerer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let bearer = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if let Some(token) = bearer.filter(|t| t.starts_with(token::PREFIX) && t.len() <= 128) {
            return Ok(Answerer::WaitToken(token.to_owned()));
        }
        let caller = Caller::from_request_parts(parts, state).await?;
        Ok(Answerer::Caller(caller))
    }
}

async fn answer_wait(
    State(state): State<AppState>,
    answerer: Answerer,
    _: NoQuery,
    Path((id, wait)): Path<(RunId, String)>,
    Json(request): Json<AnswerRequest>,
) -> Result<Response, ApiError> {
    let (token, owner) = match &answerer {
        Answerer::WaitToken(token) => (Some(token.as_str()), false),
        Answerer::Caller(caller) => {
            caller.check(&state, Verb::Answer)?;
            // The owner and the admin; anyone else (a role token too, whose
            // `answer` verb is for senior questions) only with the wait's
            // own token.
            let record = visible(&state, caller, id).await?;
            if !may_act(caller, &record) {
                return Err(ApiError::forbidden());
            }
            (None, true)
        }
    };
    if let Err(e) = state.runner.answer(id, &wait, request.value, token).await {
        return Ok(run_error(e));
    }
    if token.is_some() {
        // A wait's token answers that one wait and reads nothing else of
        // the run: not its input, outputs, other answers or graph.
        return match state.runner.record(id).await {
            Ok(record) => Ok(axum::Json(serde_json::json!({
                "id": id.to_string(),
                "wait": wait,
                "status": record.status.as_str(),
            }))
            .into_response()),
            Err(e) => Ok(run_error(e)),
        };
    }
    match state.runner.view(id, owner).await {
        Ok(view) => Ok(axum::Json(view).into_response()),
        Err(e) => Ok(run_error(e)),
    }
}
