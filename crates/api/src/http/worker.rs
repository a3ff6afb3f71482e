//! Worker routes (docs/protocol.md, Worker routes): what a SubAgent does with its token or `wh-`
//! handle — fetch its prompt, stream output, post or submit its result,
//! heartbeat — and, in `upstream`, the routes the upstream client's SubAgent
//! tools use besides.
//!
//! The engine verifies the bearer for each route's verb and enforces binding,
//! fencing and the late-write rules (docs/security.md, Verification step 7; docs/tasks.md, Late
//! writes); this file only turns bodies into engine calls. Worker bodies are parsed whatever their
//! `Content-Type` (SubAgents often send JSON as `curl -d` form data), but
//! strictly: unknown fields are refused, so a typo never turns into a
//! silently ignored `ok`. Results are hashed as received so that a retry with
//! the same `Idempotency-Key` and body replays the first answer.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use swarmd_engine::ids::TaskId;
use swarmd_engine::{HeartbeatAck, ResultAck, ResultPost, WorkerAuth, body_digest};

use super::views::PromptView;
use swarmd_output_store::OutputEvent;

use crate::app::AppState;
use crate::http::auth::{Verified, WorkerBearer, verb, worker_refusal};
use crate::http::error::ApiError;
use crate::http::extract::{
    IdempotencyKey, Json, Query, RawBody, check_depth, is_json, media_type,
};
use swarmd_sessions::dialect::{STEP_PREFIX, step_id};

mod upstream;

pub use upstream::report_event;

/// The worker routes, to be merged into the API router.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/worker/prompt", get(prompt))
        .route("/v1/worker/result", post(result))
        .route("/v1/worker/submit", post(submit))
        .route("/v1/worker/output", post(output))
        .route("/v1/worker/heartbeat", post(heartbeat))
        .merge(upstream::routes())
}

/// A task as a worker names it: its id, or the upstream client's step id
/// (`ST-` plus the same hex, docs/protocol.md, Upstream clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NamedTask {
    id: TaskId,
    /// Named by its step id: the submit answer is the upstream one.
    step: bool,
}

impl<'de> Deserialize<'de> for NamedTask {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (id, step) = match text.strip_prefix(STEP_PREFIX) {
            Some(hex) => (format!("T-{hex}").parse::<TaskId>(), true),
            None => (text.parse::<TaskId>(), false),
        };
        id.map(|id| NamedTask { id, step })
            .map_err(serde::de::Error::custom)
    }
}

pub(super) fn id_of(task: Option<NamedTask>) -> Option<TaskId> {
    task.map(|t| t.id)
}

/// `?task_id=`: optional; the credential names the task anyway.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskQuery {
    #[serde(default)]
    task_id: Option<NamedTask>,
}

/// `POST /v1/worker/result` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultBody {
    #[serde(default)]
    task_id: Option<NamedTask>,
    value: Value,
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    attempt: Option<u32>,
}

/// `POST /v1/worker/submit` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitQuery {
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    task_id: Option<NamedTask>,
}

/// `POST /v1/worker/heartbeat` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeartbeatBody {
    #[serde(default)]
    task_id: Option<NamedTask>,
}

/// `POST /v1/worker/output` answer.
#[derive(Debug, Serialize)]
struct OutputAck {
    task_id: TaskId,
    attempt: u32,
    /// The sequence number of the last event written.
    seq: u64,
}

fn yes() -> bool {
    true
}

async fn prompt(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::FetchPrompt>,
    Query(query): Query<TaskQuery>,
) -> Result<Response, ApiError> {
    let prompt = state
        .engine
        .fetch_prompt(&auth, id_of(query.task_id))
        .await
        .map_err(|e| worker_refusal(&state, &bearer.0, e))?;
    let view = PromptView::new(&auth, prompt);
    // Asked by its step id, the prompt names the task the same way.
    if query.task_id.is_some_and(|t| t.step)
        && let Ok(Value::Object(mut fields)) = serde_json::to_value(&view)
        && let Some(step) = step_id(&view.task_id.to_string())
    {
        fields.insert("task_id".to_owned(), Value::String(step));
        return Ok(Json(Value::Object(fields)).into_response());
    }
    Ok(Json(view).into_response())
}

async fn result(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::PostResult>,
    IdempotencyKey(key): IdempotencyKey,
    RawBody(body): RawBody,
) -> Result<Json<ResultAck>, ApiError> {
    let parsed: ResultBody = parse_json(&body)?;
    let post = ResultPost {
        task_id: id_of(parsed.task_id),
        attempt: parsed.attempt,
        value: parsed.value,
        ok: parsed.ok,
        idempotency_key: key,
        body_digest: body_digest(&body),
    };
    post_final(&state, &bearer, &auth, post).await
}

async fn submit(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::PostResult>,
    Query(query): Query<SubmitQuery>,
    IdempotencyKey(key): IdempotencyKey,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let value = submitted_value(&headers, &body)?;
    // `ok` is part of what a replay must repeat.
    let digest: [u8; 32] = Sha256::new()
        .chain_update(&body)
        .chain_update(if query.ok {
            b"\0ok=true" as &[u8]
        } else {
            b"\0ok=false"
        })
        .finalize()
        .into();
    // The upstream answer: for a submit naming its task by its step id, or
    // naming none for an attempt whose `spawn` went to an upstream session
    // (the upstream client's SubAgent names none).
    let upstream = match query.task_id {
        Some(task) => task.step,
        None => state.upstream_attempts.contains(auth.attempt),
    };
    let post = ResultPost {
        task_id: id_of(query.task_id),
        attempt: None,
        value,
        ok: query.ok,
        idempotency_key: key,
        body_digest: digest,
    };
    let ack = post_final(&state, &bearer, &auth, post).await?;
    // The upstream client takes only `204` as success.
    Ok(if upstream {
        StatusCode::NO_CONTENT.into_response()
    } else {
        ack.into_response()
    })
}

/// Posts the attempt's Final: the common end of `result` and `submit`.
async fn post_final(
    state: &AppState,
    bearer: &WorkerBearer,
    auth: &WorkerAuth,
    post: ResultPost,
) -> Result<Json<ResultAck>, ApiError> {
    state
        .engine
        .post_result(auth, post)
        .await
        .map(Json)
        .map_err(|e| worker_refusal(state, &bearer.0, e))
}

async fn output(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::EmitOutput>,
    Query(query): Query<TaskQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Json<OutputAck>, ApiError> {
    let events = parse_events(&headers, &body)?;
    let seq = state
        .engine
        .worker_output(&auth, id_of(query.task_id), events)
        .await
        .map_err(|e| worker_refusal(&state, &bearer.0, e))?;
    Ok(Json(OutputAck {
        task_id: auth.attempt.task,
        attempt: auth.attempt.n,
        seq,
    }))
}

async fn heartbeat(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::Heartbeat>,
    Query(query): Query<TaskQuery>,
    RawBody(body): RawBody,
) -> Result<Json<HeartbeatAck>, ApiError> {
    let parsed: HeartbeatBody = if body.iter().all(u8::is_ascii_whitespace) {
        HeartbeatBody::default()
    } else {
        parse_json(&body)?
    };
    let task = match (id_of(parsed.task_id), id_of(query.task_id)) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request(
                "task_id differs between body and query",
            ));
        }
        (a, b) => a.or(b),
    };
    let ack = state
        .engine
        .heartbeat(&auth, task)
        .await
        .map_err(|e| worker_refusal(&state, &bearer.0, e))?;
    Ok(Json(ack))
}

pub(super) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    check_depth(body)?;
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// The value `submit` stores: the parsed body when it is declared JSON and
/// parses, else the text with trailing whitespace trimmed.
pub(super) fn submitted_value(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if is_json(headers) {
        check_depth(body)?;
    }
    if is_json(headers)
        && let Ok(value) = serde_json::from_slice::<Value>(body)
    {
        return Ok(value);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("submitted body is not UTF-8 text"))?;
    Ok(Value::String(text.trim_end().to_owned()))
}

/// One OutputEvent as JSON, or NDJSON of several (declared as
/// `application/x-ndjson`, or detected by its line breaks). Blank lines are
/// skipped; a bad line is refused with its number.
fn parse_events(headers: &HeaderMap, body: &[u8]) -> Result<Vec<OutputEvent>, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("body is not UTF-8"))?;
    // Lines never nest in each other, so the body's depth is its deepest line's.
    check_depth(body)?;
    let declared_ndjson = media_type(headers).is_some_and(|m| {
        matches!(
            m.as_str(),
            "application/x-ndjson" | "application/ndjson" | "application/jsonl"
        )
    });
    if !declared_ndjson {
        match serde_json::from_str::<OutputEvent>(text) {
            Ok(event) => return Ok(vec![event]),
            Err(e) if !text.trim().contains('\n') => {
                return Err(ApiError::bad_request(format!("invalid output event: {e}")));
            }
            Err(_) => {}
        }
    }
    let mut events = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let event = serde_json::from_str::<OutputEvent>(line).map_err(|e| {
            ApiError::bad_request(format!("line {}: invalid output event: {e}", index + 1))
        })?;
        events.push(event);
    }
    if events.is_empty() {
        return Err(ApiError::bad_request("no output events in the body"));
    }
    Ok(events)
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
