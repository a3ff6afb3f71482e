//! The tools of a MainAI acting on delegated work without a WebSocket:
//! `frames` pops the session's next frames (`spawn`, `ask`, `hook_before`,
//! `cancel`, `task_done`, …) with a long-poll, and `reply` answers one
//! (`spawn_ack`, `spawn_halt`, `answer`, `hook_ack`).
//!
//! Frames come from the session's outbox, the same queue a WebSocket writer
//! drains, in the same order and in the session's dialect; a popped frame is
//! acknowledged when the call returns it. While a WebSocket is attached its
//! writer owns the queue and a pop is refused (`socket_attached`). Pops of
//! one session run one at a time, and the session counts as connected while
//! one waits (docs/mcp.md, Acting as the MainAI).

use std::convert::identity;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use futures_util::{SinkExt, future};
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, model::ProgressToken};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use swarmd_engine::ErrorCode;
use swarmd_engine::ids::SessionId;

use super::read::{MAX_ANSWER_BYTES, bound_frames};
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_sessions::Session;
use swarmd_sessions::frames::{ClientFrame, decode, into_reply};

/// The longest a pop waits for a frame.
pub(crate) const MAX_WAIT_SECS: u64 = 600;
/// The most frames one pop returns.
const MAX_FRAMES: usize = 50;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<FramesArgs, Popped>(
            "frames",
            "Act as the MainAI of delegated work: pop this session's next frames, waiting up \
             to wait_secs for one. A `spawn` asks you to launch a SubAgent with its directive \
             and worker_handle, then `reply` spawn_ack (or spawn_halt); an `ask` wants \
             `reply` answer; a `hook_before` wants `reply` hook_ack; `cancel` and `task_done` \
             need no reply. Sends progress notifications while it waits.",
            false,
            |call, args| Box::pin(frames(call.state, call.caller, args, call.context)),
        ),
        entry::<ReplyArgs, Replied>(
            "reply",
            "Answer a frame popped with `frames`, by its req_id: type spawn_ack (value, ok, \
             error, stats), spawn_halt (value, reason), answer (value) or hook_ack (ok, \
             reason).",
            false,
            |call, args| Box::pin(reply(call.state, call.caller, args)),
        ),
    ]
}

/// `frames` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FramesArgs {
    /// Seconds to wait for a first frame (0 to 600, default 30).
    #[serde(default = "default_wait")]
    #[schemars(range(max = MAX_WAIT_SECS))]
    wait_secs: u64,
    /// The most frames to return (1 to 50, default 10).
    #[serde(default = "default_max")]
    #[schemars(range(min = 1, max = MAX_FRAMES))]
    max: usize,
    /// The session to pop for; only the admin names one, a session pops its own.
    #[serde(default)]
    sid: Option<String>,
}

fn default_wait() -> u64 {
    30
}

fn default_max() -> usize {
    10
}

#[derive(Debug, Serialize, JsonSchema)]
struct Popped {
    /// The frames, in order, as docs/protocol.md describes them.
    frames: Vec<Value>,
    /// Frames still queued after these.
    queued: usize,
}

/// `reply` arguments: a reply frame of docs/protocol.md.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplyArgs {
    /// `spawn_ack`, `spawn_halt`, `answer` or `hook_ack`.
    #[serde(rename = "type")]
    kind: String,
    /// The `req_id` of the frame answered.
    req_id: String,
    /// spawn_ack / spawn_halt / answer: the value.
    #[serde(default)]
    value: Option<Value>,
    /// spawn_ack: whether the SubAgent succeeded; hook_ack: whether the spawn may go on.
    #[serde(default)]
    ok: Option<bool>,
    /// spawn_ack: the error when not ok.
    #[serde(default)]
    error: Option<String>,
    /// spawn_halt / hook_ack: why.
    #[serde(default)]
    reason: Option<String>,
    /// spawn_ack: the SubAgent's usage (tokens, model, turns).
    #[serde(default)]
    stats: Option<Value>,
    /// The session replying; only the admin names one.
    #[serde(default)]
    sid: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Replied {
    /// The reply reached the request waiting for it; false for a spawn
    /// reply that came after its attempt ended (nothing waits any more).
    delivered: bool,
}

/// The session a frame tool acts on: the caller's own, or for the admin the
/// one named by `sid`.
pub(super) fn session_of(
    state: &AppState,
    caller: &Caller,
    sid: Option<&str>,
) -> Result<Arc<Session>, ApiError> {
    let named = sid
        .map(|s| {
            s.parse::<SessionId>()
                .map_err(|e| ApiError::bad_request(format!("invalid sid: {e}")))
        })
        .transpose()?;
    match (caller, named) {
        (Caller::Operator(session), None) => Ok(session.clone()),
        (Caller::Operator(session), Some(sid)) if sid == session.sid => Ok(session.clone()),
        (Caller::Operator(_), Some(_)) => Err(ApiError::forbidden()),
        (Caller::Admin, Some(sid)) => state
            .sessions
            .get(&sid)
            .ok_or_else(|| ApiError::not_found(format!("session {sid}"))),
        (Caller::Admin, None) => Err(ApiError::bad_request(
            "the admin names the session: pass `sid` (or connect with the session's token)",
        )),
        (Caller::Token { .. }, _) => Err(ApiError::forbidden()),
    }
}

pub(super) async fn frames(
    state: &AppState,
    caller: &Caller,
    args: FramesArgs,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    if args.wait_secs > MAX_WAIT_SECS || !(1..=MAX_FRAMES).contains(&args.max) {
        return Err(ApiError::bad_request(format!(
            "wait_secs is 0 to {MAX_WAIT_SECS} and max 1 to {MAX_FRAMES}"
        )));
    }
    let session = session_of(state, caller, args.sid.as_deref())?;
    // A pop takes the session's frames here: this node becomes its home.
    state.sessions.claim_home(&session).await;
    let frames = pop(
        state,
        &session,
        args.max,
        Duration::from_secs(args.wait_secs),
        context,
    )
    .await?;
    structured(&Popped {
        frames,
        queued: session.parked(),
    })
}

/// Pops up to `max` frames of `session`, waiting up to `wait` for the first;
/// an empty list at the wait's end, at the drain, or when the session ends.
/// Their large values are cut to fit one answer (`bound_frames`).
pub(super) async fn pop(
    state: &AppState,
    session: &Arc<Session>,
    max: usize,
    wait: Duration,
    context: &RequestContext<RoleServer>,
) -> Result<Vec<Value>, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    let progress = context.meta.get_progress_token();
    let _polling = session.polling();
    let locked = tokio::select! {
        guard = session.pop_lock.lock() => Some(guard),
        () = tokio::time::sleep_until(deadline) => None,
        () = context.ct.cancelled() => return Err(cancelled()),
    };
    let Some(_guard) = locked else {
        return Ok(Vec::new());
    };
    if session.outbox.is_attached() {
        return Err(ApiError::coded(
            ErrorCode::SocketAttached,
            "this session's frames go to its attached WebSocket",
        ));
    }
    let interval = Duration::from_millis(state.config.mcp.progress_ms);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let started = tokio::time::Instant::now();
    let batch = loop {
        tokio::select! {
            batch = session.outbox.next_batch(max) => break batch,
            _ = ticker.tick() => {
                if let Some(token) = &progress {
                    notify_waiting(context, token, started.elapsed(), wait).await;
                }
            }
            () = context.ct.cancelled() => return Err(cancelled()),
            () = state.shutdown.cancelled() => return Ok(Vec::new()),
            () = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
        }
    };
    // Each text is taken as JSON before the batch is acknowledged.
    let mut frames = Vec::with_capacity(batch.frames.len() + 1);
    let mut taken = (&mut frames).with(|text: Utf8Bytes| future::ready(as_json(text.as_str())));
    let upstream = &state.upstream_attempts;
    session
        .deliver(&state.engine, upstream, batch, &mut taken, identity)
        .await?;
    drop(taken);
    // Within a client's event limit, however large a frame's values.
    bound_frames(&mut frames, MAX_ANSWER_BYTES);
    Ok(frames)
}

fn as_json(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::internal(&e))
}

fn cancelled() -> ApiError {
    ApiError::bad_request("the client cancelled the call")
}

/// A progress notification for a pop still waiting.
async fn notify_waiting(
    context: &RequestContext<RoleServer>,
    token: &ProgressToken,
    elapsed: Duration,
    wait: Duration,
) {
    let params = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64())
        .with_total(wait.as_secs_f64())
        .with_message(format!(
            "waiting for frames, {}s of {}s",
            elapsed.as_secs(),
            wait.as_secs()
        ));
    if let Err(error) = context.peer.notify_progress(params).await {
        tracing::debug!(%error, "progress notification not sent");
    }
}

pub(super) async fn reply(state: &AppState, caller: &Caller, args: ReplyArgs) -> Outcome {
    let session = session_of(state, caller, args.sid.as_deref())?;
    let mut frame = Map::new();
    frame.insert("type".into(), json!(args.kind));
    frame.insert("req_id".into(), json!(args.req_id));
    let fields = [
        ("value", args.value),
        ("ok", args.ok.map(Value::Bool)),
        ("error", args.error.map(Value::String)),
        ("reason", args.reason.map(Value::String)),
        ("stats", args.stats),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            frame.insert(name.into(), value);
        }
    }
    let text = Value::Object(frame).to_string();
    let decoded = decode(&text).map_err(|e| ApiError::bad_request(e.message))?;
    let delivered = complete(&session, decoded)?;
    structured(&Replied { delivered })
}

/// Completes the request a reply frame answers; false for a spawn reply
/// that came after its attempt ended (nothing waits for it).
pub(super) fn complete(session: &Session, frame: ClientFrame) -> Result<bool, ApiError> {
    let Ok((req_id, reply)) = into_reply(frame) else {
        return Err(ApiError::bad_request(
            "reply answers spawn_ack, spawn_halt, answer or hook_ack; use the spawn and \
             cancel tools to start and stop tasks",
        ));
    };
    session
        .answer(req_id.as_str(), reply)
        .map_err(|error| ApiError::coded(error.code(), error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pop_bounds_are_documented_in_the_schema() {
        let tool = tools()[0].tool().clone();
        let schema = Value::Object((*tool.input_schema).clone()).to_string();
        assert!(
            schema.contains("wait_secs") && schema.contains("max"),
            "{schema}"
        );
    }
}
