//! Client → server frames (docs/protocol.md, Frames): a MainAI's replies to
//! server requests and its own requests. Unknown fields are ignored; the
//! `type`s a client may send are `CLIENT_TYPES`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use swarmd_types::ids::{ReqId, TaskId};
use swarmd_types::task::PolicyOverrides;

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
