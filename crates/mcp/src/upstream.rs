//! The upstream `mse mcp` tool names, as aliases of swarmd's tools with
//! upstream's argument and result shapes (docs/mcp.md, Upstream tool
//! names), so prompts and skills written for upstream keep working:
//! `mse_operator_join`, `mse_pending_wait`, `mse_ack`, `mse_operator_leave`,
//! `mse_worker_fetch` and `mse_worker_submit`.
//!
//! Arguments that only make sense in upstream's own process (`base_url`,
//! `system_ref_path`) are accepted and ignored: the daemon is the server.
//! Reports (`degradations`, `stats`) are kept as the worker routes keep
//! them (`http::worker::report_event`). Like the `worker_*` tools, these
//! reach the node that holds the handle's task when it is another one.

use std::time::Duration;

use axum::http::Method;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::{ReqId, TaskId};
use swarmd_output_store::{ContentRef, OutputEvent};

use super::frames::{self, MAX_WAIT_SECS, session_of};
use super::registry::{ToolEntry, entry};
use super::worker::{self, PromptShape, authenticate};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::cluster::PeerCall;
use swarmd_api::http::auth::{Caller, worker_refusal};
use swarmd_api::http::error::ApiError;
use swarmd_api::http::worker::report_event;
use swarmd_sessions::LoginRequest;
use swarmd_sessions::dialect::{Dialect, STEP_PREFIX};
use swarmd_sessions::frames::ClientFrame;

/// The most degradation entries one submit records.
const MAX_DEGRADATIONS: usize = 32;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<JoinArgs, Joined>(
            "mse_operator_join",
            "Upstream alias. Join as an operator session and return its sid. Over a \
             session's own connection this is that session; the admin gets a new session \
             (upstream dialect) to use with mse_pending_wait / mse_ack / mse_operator_leave.",
            false,
            |call, args| Box::pin(join(call.state, call.caller, args)),
        ),
        entry::<PendingArgs, Pending>(
            "mse_pending_wait",
            "Upstream alias of `frames`: pop one frame for `sid`, waiting up to timeout_ms \
             (default 30000). Returns {timed_out, req_id?, type?, payload?}.",
            false,
            |call, args| Box::pin(pending_wait(call.state, call.caller, args, call.context)),
        ),
        entry::<AckArgs, Sent>(
            "mse_ack",
            "Upstream alias of `reply`: kind answer (value), hook_ack (ok, error as the \
             reason), spawn_ack (value, ok, error, stats) or spawn_halt (value, error as the \
             reason). Returns {sent: true}.",
            false,
            |call, args| Box::pin(ack(call.state, call.caller, args)),
        ),
        entry::<LeaveArgs, Removed>(
            "mse_operator_leave",
            "Upstream alias. Leave (delete) the operator session `sid`. Returns {removed: true}.",
            false,
            |call, args| Box::pin(leave(call.state, call.caller, args)),
        ),
        entry::<FetchArgs, PromptShape>(
            "mse_worker_fetch",
            "Upstream alias of `worker_prompt`: the prompt of the attempt worker_handle names \
             ({task_id, attempt, agent, prompt, system?, input?, deadline}).",
            true,
            |call, args| Box::pin(fetch(call.state, args)),
        ),
        entry::<SubmitArgs, Submitted>(
            "mse_worker_submit",
            "Upstream alias of `worker_submit`: body is the result text; ok=false fails the \
             attempt; name stages a named artifact instead of completing; degradations are \
             recorded as progress notes. Returns {submitted: true}.",
            false,
            |call, args| Box::pin(submit(call.state, args)),
        ),
    ]
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct JoinArgs {
    /// What this session is, for whoever reads the operator list.
    desc: String,
    /// Capabilities the session declares (stored as given).
    #[serde(default)]
    capability_manifest: Option<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Joined {
    sid: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PendingArgs {
    /// The sid mse_operator_join returned.
    sid: String,
    /// Long-poll timeout in milliseconds (default 30000, at most 600000).
    #[serde(default)]
    #[schemars(range(max = MAX_WAIT_SECS * 1000))]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Pending {
    timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    req_id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    /// The frame's other fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
    /// Always 0: swarmd runs no agent blocks in the client.
    blocks_dispatched: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AckArgs {
    sid: String,
    req_id: String,
    /// answer, hook_ack, spawn_ack or spawn_halt.
    kind: String,
    #[serde(default)]
    value: Option<Value>,
    /// Default true.
    #[serde(default = "yes")]
    ok: bool,
    /// spawn_ack: the error; hook_ack and spawn_halt: the reason.
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    stats: Option<Value>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Serialize, JsonSchema)]
struct Sent {
    /// The reply was taken (upstream's field; always true).
    sent: bool,
    /// False, as `reply`'s, when nothing waits for the reply: its attempt
    /// ended, or its request was sent from another node than this one.
    delivered: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaveArgs {
    sid: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Removed {
    removed: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FetchArgs {
    worker_handle: String,
    /// Ignored: the daemon is the server.
    #[serde(default)]
    base_url: Option<String>,
    /// The step (`ST-…`) or task (`T-…`) id; checked against the handle's task.
    #[serde(default)]
    task_id: Option<String>,
    /// Ignored: prompts are always inline.
    #[serde(default)]
    system_ref_path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitArgs {
    worker_handle: String,
    /// Ignored: the daemon is the server.
    #[serde(default)]
    base_url: Option<String>,
    /// The result text (trailing whitespace is trimmed).
    body: String,
    /// False fails the attempt (default true).
    #[serde(default)]
    ok: Option<bool>,
    /// Stage a named artifact instead of completing the attempt.
    #[serde(default)]
    name: Option<String>,
    /// Fallbacks the worker took ({tool, error, fallback, note?} each), kept
    /// as `progress` events of stage `degradation`.
    #[serde(default)]
    degradations: Option<Vec<Value>>,
    /// The attempt's usage as the worker saw it, kept as a `progress` event
    /// of stage `stats`.
    #[serde(default)]
    stats: Option<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Submitted {
    submitted: bool,
}

pub(super) async fn join(state: &AppState, caller: &Caller, args: JoinArgs) -> Outcome {
    let sid = match caller {
        Caller::Operator(session) => session.sid,
        Caller::Admin => {
            let request = LoginRequest {
                desc: Some(args.desc),
                capability_manifest: Some(args.capability_manifest.unwrap_or_else(|| json!({}))),
                dialect: Some(Dialect::Upstream),
                ..LoginRequest::default()
            };
            state
                .sessions
                .login(&state.engine, request)
                .await
                .map_err(ApiError::from)?
                .sid
        }
        Caller::Token { .. } => return Err(ApiError::forbidden()),
    };
    structured(&Joined {
        sid: sid.to_string(),
    })
}

pub(super) async fn pending_wait(
    state: &AppState,
    caller: &Caller,
    args: PendingArgs,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    let timeout_ms = args.timeout_ms.unwrap_or(30_000);
    if timeout_ms > MAX_WAIT_SECS * 1000 {
        return Err(ApiError::bad_request(format!(
            "timeout_ms is at most {}",
            MAX_WAIT_SECS * 1000
        )));
    }
    let session = session_of(state, caller, Some(&args.sid))?;
    // A pop takes the session's frames here: this node becomes its home,
    // as with the `frames` tool.
    state.sessions.claim_home(&session).await;
    let wait = Duration::from_millis(timeout_ms);
    let popped = frames::pop(state, &session, 1, wait, context).await?;
    let Some(Value::Object(mut frame)) = popped.into_iter().next() else {
        return structured(&Pending {
            timed_out: true,
            req_id: None,
            kind: None,
            payload: None,
            blocks_dispatched: 0,
        });
    };
    let kind = frame
        .remove("type")
        .and_then(|t| t.as_str().map(str::to_owned));
    let req_id = frame
        .remove("req_id")
        .and_then(|r| r.as_str().map(str::to_owned));
    structured(&Pending {
        timed_out: false,
        req_id,
        kind,
        payload: Some(Value::Object(frame)),
        blocks_dispatched: 0,
    })
}

pub(super) async fn ack(state: &AppState, caller: &Caller, args: AckArgs) -> Outcome {
    let session = session_of(state, caller, Some(&args.sid))?;
    let req_id = ReqId::new(&args.req_id)
        .map_err(|e| ApiError::bad_request(format!("invalid req_id: {e}")))?;
    let frame = match args.kind.as_str() {
        "answer" => ClientFrame::Answer {
            req_id,
            value: args.value.unwrap_or(Value::Null),
        },
        "hook_ack" => ClientFrame::HookAck {
            req_id,
            ok: args.ok,
            reason: args.error,
        },
        "spawn_ack" => ClientFrame::SpawnAck {
            req_id,
            value: args.value.unwrap_or(Value::Null),
            ok: args.ok,
            error: args.error,
            stats: args.stats,
        },
        "spawn_halt" => ClientFrame::SpawnHalt {
            req_id,
            value: args.value,
            reason: args.error,
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "kind `{other}` is not answer, hook_ack, spawn_ack or spawn_halt"
            )));
        }
    };
    let delivered = frames::complete(&session, frame)?;
    structured(&Sent {
        sent: true,
        delivered,
    })
}

pub(super) async fn leave(state: &AppState, caller: &Caller, args: LeaveArgs) -> Outcome {
    let session = session_of(state, caller, Some(&args.sid))?;
    state
        .sessions
        .delete(&state.engine, &session.sid)
        .await
        .map_err(ApiError::from)?;
    structured(&Removed { removed: true })
}

pub(super) async fn fetch(state: &AppState, args: FetchArgs) -> Outcome {
    let (_, _) = (args.base_url, args.system_ref_path);
    let Some(named) = args.task_id else {
        return structured(&worker::fetch(state, &args.worker_handle).await?);
    };
    let task = step_or_task(&named)?;
    let call = PeerCall {
        method: Method::GET,
        path: format!("/v1/worker/prompt?task_id={task}"),
        bearer: &args.worker_handle,
        body: None,
    };
    if let Some(answer) = worker::on_owner(state, &args.worker_handle, call).await {
        return structured(&answer?);
    }
    let (bearer, auth) = authenticate(state, &args.worker_handle, Verb::FetchPrompt)?;
    let prompt = state
        .engine
        .fetch_prompt(&auth, Some(task))
        .await
        .map_err(|e| worker_refusal(state, &bearer.0, e))?;
    structured(&swarmd_api::http::views::PromptView::new(&auth, prompt))
}

pub(super) async fn submit(state: &AppState, args: SubmitArgs) -> Outcome {
    let _ = args.base_url;
    let degradations = args.degradations.unwrap_or_default();
    if degradations.len() > MAX_DEGRADATIONS {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_DEGRADATIONS} degradations"
        )));
    }
    // Reports first, as upstream posts them before its result.
    let mut events = degradations
        .iter()
        .map(|d| report_event("degradation", d))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(stats) = &args.stats {
        events.push(report_event("stats", stats)?);
    }
    let text = Value::String(args.body.trim_end().to_owned());
    if let Some(name) = args.name {
        if args.ok == Some(false) {
            return Err(ApiError::bad_request(
                "name and ok=false are mutually exclusive",
            ));
        }
        events.push(OutputEvent::Artifact {
            name,
            content: ContentRef::Inline { value: text },
        });
        worker::emit(state, &args.worker_handle, events).await?;
        return structured(&Submitted { submitted: true });
    }
    if !events.is_empty() {
        worker::emit(state, &args.worker_handle, events).await?;
    }
    worker::post(state, &args.worker_handle, text, args.ok.unwrap_or(true)).await?;
    structured(&Submitted { submitted: true })
}

/// A task named by its id or by its upstream step id.
fn step_or_task(named: &str) -> Result<TaskId, ApiError> {
    let text = match named.strip_prefix(STEP_PREFIX) {
        Some(hex) => format!("T-{hex}"),
        None => named.to_owned(),
    };
    text.parse()
        .map_err(|e| ApiError::bad_request(format!("invalid task_id `{named}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_id_names_the_task_with_the_same_hex() {
        let task: TaskId = "T-0123456789abcdef0123456789abcdef".parse().unwrap();
        let step = format!("ST-{}", &task.to_string()[2..]);
        assert_eq!(step_or_task(&step).unwrap(), task);
        assert_eq!(step_or_task(&task.to_string()).unwrap(), task);
        assert_eq!(
            step_or_task("ST-zz").unwrap_err().code(),
            swarmd_engine::ErrorCode::BadRequest
        );
    }
}
