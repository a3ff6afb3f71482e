//! The WebSocket frames as the daemon speaks them: the frame types are the
//! wire crate's (`swarmd_wire`, docs/protocol.md, Frames); here they meet
//! the daemon: `encode` writes a frame as a message's text, `decode` reads
//! a client frame under the daemon's depth bound and explains a refusal,
//! `into_reply` splits out a reply for its waiter, and `spawn` writes a
//! delegated attempt as a `spawn` frame.

use axum::extract::ws::Utf8Bytes;
use serde_json::Value;
use swarmd_engine::ErrorCode;
use swarmd_engine::ids::ReqId;
use swarmd_spawner::operator::{HookAck, SpawnFrame, SpawnReply};
pub use swarmd_wire::{CLIENT_TYPES, ClientFrame, ServerFrame, SpawnTaskFrame};

use crate::report_internal;

/// A client's reply to a server request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Spawn(SpawnReply),
    Answer(Value),
    Hook(HookAck),
}

/// A frame as the text of a WebSocket message.
pub fn encode(frame: &ServerFrame) -> Utf8Bytes {
    match serde_json::to_string(frame) {
        Ok(text) => Utf8Bytes::from(text),
        // Every field serializes (string-keyed maps only); this is a bug guard.
        Err(error) => {
            let message = report_internal(&format!("cannot encode a server frame: {error}"));
            let code = ErrorCode::Internal;
            Utf8Bytes::from(format!(
                r#"{{"type":"error","code":"{code}","error":"{message}"}}"#
            ))
        }
    }
}

/// Why a client frame could not be decoded, with whatever `req_id` it had.
#[derive(Debug)]
pub struct DecodeError {
    pub req_id: Option<ReqId>,
    pub message: String,
}

/// Decodes a client frame. On failure the error carries the frame's
/// `req_id` when it had a valid one, so the `error` frame can echo it.
pub fn decode(text: &str) -> Result<ClientFrame, DecodeError> {
    if let Err(error) = swarmd_output_store::check_text_depth(text.as_bytes()) {
        // serde_json's own recursion limit keeps this probe shallow.
        let req_id = serde_json::from_str::<Value>(text)
            .ok()
            .as_ref()
            .and_then(|frame| frame.get("req_id"))
            .and_then(Value::as_str)
            .and_then(|r| ReqId::new(r).ok());
        return Err(DecodeError {
            req_id,
            message: format!("the frame is refused: {error}"),
        });
    }
    serde_json::from_str(text).map_err(|error| {
        let probe = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(fields)) => Some(fields),
            _ => None,
        };
        let req_id = probe
            .as_ref()
            .and_then(|p| p.get("req_id"))
            .and_then(Value::as_str)
            .and_then(|r| ReqId::new(r).ok());
        let message = match probe.as_ref().map(|p| p.get("type")) {
            None => format!("not a JSON object: {error}"),
            Some(None) => "the frame has no `type`".to_owned(),
            Some(Some(Value::String(kind))) if !CLIENT_TYPES.contains(&kind.as_str()) => {
                format!("unknown frame type `{kind}`")
            }
            Some(Some(Value::String(kind))) => format!("malformed `{kind}` frame: {error}"),
            Some(Some(_)) => "`type` must be a string".to_owned(),
        };
        DecodeError { req_id, message }
    })
}

/// A reply to a server request as the request's id and the reply its
/// waiter takes; any other frame is handed back.
pub fn into_reply(frame: ClientFrame) -> Result<(ReqId, Reply), Box<ClientFrame>> {
    Ok(match frame {
        ClientFrame::SpawnAck {
            req_id,
            value,
            ok,
            error,
            stats,
        } => {
            let ack = SpawnReply::Ack {
                value,
                ok,
                error,
                stats,
            };
            (req_id, Reply::Spawn(ack))
        }
        ClientFrame::SpawnHalt {
            req_id,
            value,
            reason,
        } => (req_id, Reply::Spawn(SpawnReply::Halt { value, reason })),
        ClientFrame::Answer { req_id, value } => (req_id, Reply::Answer(value)),
        ClientFrame::HookAck { req_id, ok, reason } => {
            (req_id, Reply::Hook(HookAck { ok, reason }))
        }
        other => return Err(Box::new(other)),
    })
}

/// The `spawn` frame for a delegated attempt.
pub(crate) fn spawn(req_id: &str, frame: &SpawnFrame) -> ServerFrame {
    ServerFrame::Spawn {
        req_id: req_id.to_owned(),
        task_id: frame.attempt.task,
        agent: frame.agent.clone(),
        attempt: frame.attempt.n,
        capability_token: frame.credential.token().to_owned(),
        worker_handle: frame.credential.handle().to_owned(),
        worker: frame.worker_binding.clone(),
        directive: frame.directive.clone(),
        base_url: frame.base_url.clone(),
        deadline: frame.lease_deadline_ms,
        worktree: frame.worktree.clone(),
        continued_from: frame.continued_from,
        resume_session: frame.resume_session.clone(),
    }
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
