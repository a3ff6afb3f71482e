//! The SubAgent's tools: `worker_prompt`, `worker_progress` and
//! `worker_submit`, by `worker_handle`, so a SubAgent that inherited its
//! MainAI's MCP connection needs no HTTP client. The handle is the
//! credential, checked exactly as the worker routes check it (the gate,
//! binding, fencing, late writes); the MCP caller's own rights play no part.
//! When another cluster node holds the handle's task, each tool calls that
//! node's worker route with the handle (`cluster::call_owner`).

use axum::http::Method;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::{ResultPost, WorkerAuth, body_digest};
use swarmd_output_store::{ContentRef, OutputEvent};

use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::cluster::{self, PeerCall};
use swarmd_api::http::auth::{WorkerBearer, authenticate_worker, worker_refusal};
use swarmd_api::http::error::ApiError;
use swarmd_api::http::views::PromptView;

/// The longest progress stage or note, in bytes.
const MAX_NOTE_BYTES: usize = 4096;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<HandleArgs, PromptShape>(
            "worker_prompt",
            "SubAgent: fetch the prompt of the attempt a `spawn` frame handed you, by its \
             worker_handle (`wh-…`): task_id, attempt, agent, system, prompt, input, deadline.",
            true,
            |call, args| Box::pin(prompt(call.state, args)),
        ),
        entry::<ProgressArgs, Reported>(
            "worker_progress",
            "SubAgent: record progress on your attempt (a stage and an optional note) and/or \
             a piece of partial text, by worker_handle. Stored in the task's output.",
            false,
            |call, args| Box::pin(progress(call.state, args)),
        ),
        entry::<SubmitArgs, AckShape>(
            "worker_submit",
            "SubAgent: submit your attempt's result by worker_handle: value (any JSON, text \
             included) and ok (false marks the attempt failed). The first result decides the \
             attempt; repeating the same one is harmless.",
            false,
            |call, args| Box::pin(submit(call.state, args)),
        ),
    ]
}

/// The schema of a fetched prompt (`PromptView`, as `GET /v1/worker/prompt`).
#[derive(Debug, JsonSchema)]
#[expect(
    dead_code,
    reason = "a schema only: prompts are serialized as PromptView"
)]
pub(super) struct PromptShape {
    task_id: String,
    attempt: u32,
    agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Value>,
    /// The lease deadline (unix ms).
    deadline: u64,
}

/// The schema of a submit's answer (`ResultAck`, as `POST /v1/worker/result`).
#[derive(Debug, JsonSchema)]
#[expect(
    dead_code,
    reason = "a schema only: answers are serialized as ResultAck"
)]
struct AckShape {
    task_id: String,
    attempt: u32,
    /// Whether this result decided the attempt (false: a replay of the first).
    accepted: bool,
}

/// Only the handle.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct HandleArgs {
    /// The `worker_handle` of the spawn frame (or its `capability_token`).
    worker_handle: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ProgressArgs {
    /// The `worker_handle` of the spawn frame.
    worker_handle: String,
    /// A short name of where the work is ("reading", "tests", …); at most
    /// 4 096 bytes.
    #[serde(default)]
    #[schemars(length(max = MAX_NOTE_BYTES))]
    stage: Option<String>,
    /// A line about it; at most 4 096 bytes.
    #[serde(default)]
    #[schemars(length(max = MAX_NOTE_BYTES))]
    note: Option<String>,
    /// Partial output text, appended to the task's stream.
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Reported {
    /// The output sequence number of the last event written.
    seq: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitArgs {
    /// The `worker_handle` of the spawn frame.
    worker_handle: String,
    /// The result.
    value: Value,
    /// False marks the attempt failed (default true).
    #[serde(default = "yes")]
    ok: bool,
}

fn yes() -> bool {
    true
}

/// The attempt a handle names, for `verb`.
pub(super) fn authenticate(
    state: &AppState,
    handle: &str,
    verb: Verb,
) -> Result<(WorkerBearer, WorkerAuth), ApiError> {
    let bearer = WorkerBearer(handle.to_owned());
    let auth = authenticate_worker(state, &bearer, verb)?;
    Ok((bearer, auth))
}

pub(super) async fn prompt(state: &AppState, args: HandleArgs) -> Outcome {
    structured(&fetch(state, &args.worker_handle).await?)
}

/// The prompt of the attempt `handle` names.
pub(super) async fn fetch(state: &AppState, handle: &str) -> Result<Value, ApiError> {
    let call = PeerCall {
        method: Method::GET,
        path: "/v1/worker/prompt".to_owned(),
        bearer: handle,
        body: None,
    };
    if let Some(answer) = on_owner(state, handle, call).await {
        return answer;
    }
    let (bearer, auth) = authenticate(state, handle, Verb::FetchPrompt)?;
    let prompt = state
        .engine
        .fetch_prompt(&auth, None)
        .await
        .map_err(|e| worker_refusal(state, &bearer.0, e))?;
    serde_json::to_value(PromptView::new(&auth, prompt)).map_err(|e| ApiError::internal(&e))
}

/// The answer of the node that holds the task `handle` is bound to, when
/// that is another node.
pub(super) async fn on_owner(
    state: &AppState,
    handle: &str,
    call: PeerCall<'_>,
) -> Option<Result<Value, ApiError>> {
    let subject = cluster::worker_subject(handle)?;
    cluster::call_owner(state, &subject, call).await
}

pub(super) async fn progress(state: &AppState, args: ProgressArgs) -> Outcome {
    let mut events = Vec::with_capacity(2);
    if args.stage.is_some() || args.note.is_some() {
        let stage = args.stage.unwrap_or_else(|| "progress".to_owned());
        for text in std::iter::once(&stage).chain(args.note.as_ref()) {
            if text.len() > MAX_NOTE_BYTES {
                return Err(ApiError::bad_request(format!(
                    "stage and note are at most {MAX_NOTE_BYTES} bytes"
                )));
            }
        }
        events.push(OutputEvent::Progress {
            stage,
            note: args.note,
        });
    }
    if let Some(text) = args.text {
        events.push(OutputEvent::Partial {
            chunk: ContentRef::Inline { value: json!(text) },
        });
    }
    if events.is_empty() {
        return Err(ApiError::bad_request("give a stage, a note or text"));
    }
    let seq = emit(state, &args.worker_handle, events).await?;
    structured(&Reported { seq })
}

/// Writes output events for the attempt `handle` names (on the node that
/// holds its task, as NDJSON to its output route); the last event's seq.
pub(super) async fn emit(
    state: &AppState,
    handle: &str,
    events: Vec<OutputEvent>,
) -> Result<u64, ApiError> {
    let lines: Result<Vec<String>, _> = events.iter().map(serde_json::to_string).collect();
    let call = PeerCall {
        method: Method::POST,
        path: "/v1/worker/output".to_owned(),
        bearer: handle,
        body: Some(
            lines
                .map_err(|e| ApiError::internal(&e))?
                .join("\n")
                .into_bytes(),
        ),
    };
    if let Some(answer) = on_owner(state, handle, call).await {
        return Ok(answer?["seq"].as_u64().unwrap_or_default());
    }
    let (bearer, auth) = authenticate(state, handle, Verb::EmitOutput)?;
    state
        .engine
        .worker_output(&auth, None, events)
        .await
        .map_err(|e| worker_refusal(state, &bearer.0, e))
}

pub(super) async fn submit(state: &AppState, args: SubmitArgs) -> Outcome {
    structured(&post(state, &args.worker_handle, args.value, args.ok).await?)
}

/// Posts the attempt's Final. The digest covers the value and `ok`, so the
/// same submit repeated replays the first answer.
pub(super) async fn post(
    state: &AppState,
    handle: &str,
    value: Value,
    ok: bool,
) -> Result<Value, ApiError> {
    // The result route's body, so its digest is the same on either node.
    let body = json!({ "value": value, "ok": ok }).to_string();
    let call = PeerCall {
        method: Method::POST,
        path: "/v1/worker/result".to_owned(),
        bearer: handle,
        body: Some(body.clone().into_bytes()),
    };
    if let Some(answer) = on_owner(state, handle, call).await {
        return answer;
    }
    let (bearer, auth) = authenticate(state, handle, Verb::PostResult)?;
    let digest = body_digest(body.as_bytes());
    let post = ResultPost {
        task_id: None,
        attempt: None,
        value,
        ok,
        idempotency_key: None,
        body_digest: digest,
    };
    let ack = state
        .engine
        .post_result(&auth, post)
        .await
        .map_err(|e| worker_refusal(state, &bearer.0, e))?;
    serde_json::to_value(ack).map_err(|e| ApiError::internal(&e))
}
