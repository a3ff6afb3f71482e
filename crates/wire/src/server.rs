//! Server → client frames (docs/protocol.md, Frames): JSON text frames
//! tagged by `type` (snake_case), with exactly the documented field names.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_types::event::{Event, EventRecord};
use swarmd_types::ids::{ReqId, TaskId};
use swarmd_types::task::TaskStatus;
use swarmd_types::{ErrorCode, RunId, RunStatus};

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

/// The `worktree` of a `spawn` frame: where the SubAgent works and commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnWorktree {
    /// The checkout's absolute path.
    pub path: String,
    /// The attempt's branch, checked out there.
    pub branch: String,
    /// The commit the branch starts from.
    pub base: String,
}

impl ServerFrame {
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
