//! The WebSocket frames (docs/protocol.md, Frames): JSON text frames tagged by `type`
//! (snake_case), with exactly the documented field names so that MainAI
//! clients written for this frame set work unchanged. Unknown fields in a
//! client frame are ignored; an unknown `type` is answered with an `error`.

use axum::extract::ws::Utf8Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use swarmd_engine::event::{Event, EventRecord};
use swarmd_engine::ids::{ReqId, TaskId};
use swarmd_engine::task::{PolicyOverrides, TaskStatus};
use swarmd_engine::{ErrorCode, RunId, RunStatus};
use swarmd_spawner::operator::{HookAck, SpawnFrame, SpawnReply, SpawnWorktree};

use crate::sessions::Reply;

use crate::http::error::report_internal;

/// Server → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// Launch a SubAgent for a delegated attempt; answered by `spawn_ack` or
    /// `spawn_halt`.
    Spawn {
        req_id: String,
        task_id: TaskId,
        agent: String,
        attempt: u32,
        capability_token: String,
        worker_handle: String,
        /// The agent's worker binding (`subagent_type`, `tools`, …).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<Value>,
        directive: String,
        base_url: String,
        /// The attempt's lease deadline (unix ms).
        deadline: u64,
        /// The attempt's git worktree, when its agent has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worktree: Option<SpawnWorktree>,
        /// The finished task this attempt's task continues.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continued_from: Option<TaskId>,
        /// The SubAgent session to resume, read from that task's last attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_session: Option<String>,
    },
    /// A senior question; answered by `answer`.
    Ask {
        req_id: String,
        task_id: TaskId,
        question: Value,
    },
    /// Before an attempt is spawned; answered by `hook_ack`.
    HookBefore {
        req_id: String,
        task_id: TaskId,
        agent: String,
        attempt: u32,
    },
    /// After an attempt completed; no reply.
    HookAfter {
        req_id: String,
        task_id: TaskId,
        agent: String,
        attempt: u32,
        result: Value,
    },
    /// Stop the SubAgent launched for the spawn `req_id`; no reply.
    Cancel {
        req_id: String,
        task_id: TaskId,
        attempt: u32,
        reason: String,
    },
    /// A `spawn_task` was accepted.
    TaskAccepted { req_id: ReqId, task_id: TaskId },
    /// An engine event about a task; `seq` is the global event sequence
    /// number that `subscribe … after_seq` resumes from. `attempt` is null for
    /// task-level events.
    TaskEvent {
        task_id: TaskId,
        attempt: Option<u32>,
        seq: u64,
        event: Event,
    },
    /// A task this session owns finished.
    TaskDone {
        task_id: TaskId,
        attempt: u32,
        status: TaskStatus,
        ok: bool,
        value: Value,
    },
    /// A flow run this session owns ended (passed, failed or cancelled):
    /// its `result` when it passed, its `error` otherwise.
    RunDone {
        run_id: RunId,
        flow: String,
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A client frame was refused; the connection stays up.
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        req_id: Option<ReqId>,
        code: ErrorCode,
        error: String,
    },
}

/// Client → server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// The SubAgent of a `spawn` finished (docs/tasks.md, Operator agents).
    SpawnAck {
        req_id: ReqId,
        #[serde(default)]
        value: Value,
        #[serde(default = "yes")]
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stats: Option<Value>,
    },
    /// The MainAI stopped the SubAgent of a `spawn` gracefully.
    SpawnHalt {
        req_id: ReqId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Answers an `ask`.
    Answer { req_id: ReqId, value: Value },
    /// Answers a `hook_before`.
    HookAck {
        req_id: ReqId,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Creates a task owned by this session (boxed: the largest frame).
    SpawnTask(Box<SpawnTaskFrame>),
    /// Cancels a task this session owns.
    CancelTask { req_id: ReqId, task_id: TaskId },
    /// Streams a task's events from `after_seq` (absent: from now on).
    Subscribe {
        req_id: ReqId,
        task_id: TaskId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
    },
}

impl ClientFrame {
    /// A reply to a server request as the request's id and the reply its
    /// waiter takes; any other frame is handed back.
    pub fn into_reply(self) -> Result<(ReqId, Reply), Box<ClientFrame>> {
        Ok(match self {
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
}

/// The body of a `spawn_task` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnTaskFrame {
    pub req_id: ReqId,
    /// May be left out with `continue_from`: the previous task's agent.
    #[serde(default)]
    pub agent: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyOverrides>,
    /// Adds the `operator_delegate` layer: the attempt comes back to this
    /// session as a `spawn` frame.
    #[serde(default)]
    pub delegate: bool,
    /// The finished task this one continues (docs/tasks.md, Continuations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_from: Option<TaskId>,
}

fn yes() -> bool {
    true
}

impl ServerFrame {
    /// The `spawn` frame for a delegated attempt.
    pub fn spawn(req_id: &str, frame: &SpawnFrame) -> ServerFrame {
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

    /// The `task_event` for a logged event about a task.
    pub fn task_event(record: &EventRecord) -> Option<ServerFrame> {
        Some(ServerFrame::TaskEvent {
            task_id: record.event.task_id()?,
            attempt: record.event.attempt(),
            seq: record.seq,
            event: record.event.clone(),
        })
    }

    /// An `error` frame.
    pub fn error(req_id: Option<ReqId>, code: ErrorCode, error: impl Into<String>) -> ServerFrame {
        ServerFrame::Error {
            req_id,
            code,
            error: error.into(),
        }
    }

    /// The notice that `dropped` frames were evicted from a full outbox,
    /// sent before the next batch (docs/protocol.md, Disconnects and parking).
    pub fn frames_dropped(dropped: u64) -> ServerFrame {
        ServerFrame::error(
            None,
            ErrorCode::FramesDropped,
            format!(
                "{dropped} frames were dropped while the outbox was full; resume task events \
                 with subscribe after_seq"
            ),
        )
    }
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

/// The `type`s a client may send.
pub const CLIENT_TYPES: [&str; 7] = [
    "spawn_ack",
    "spawn_halt",
    "answer",
    "hook_ack",
    "spawn_task",
    "cancel_task",
    "subscribe",
];

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
