//! Operator sessions as the layers see them: the traits through which a
//! connected MainAI hooks attempts, answers seniors and runs delegated
//! attempts, and the `SessionDirectory` that finds a live session. The
//! server implements them over WebSocket and hands the directory to the
//! resolver, which gives it to the layers that need it when it builds them.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use swarmd_engine::ids::{AttemptId, SessionId, TaskId};
use swarmd_engine::store::SessionKind;
use swarmd_engine::{SpawnError, WorkerCredential};
/// The `worktree` of a `spawn` frame is a wire type.
pub use swarmd_wire::SpawnWorktree;

/// The attempt a hook is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRequest {
    pub task_id: TaskId,
    pub agent: String,
    pub attempt: u32,
}

/// A MainAI's answer to `hook_before`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookAck {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a bridge call to a session produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("the session is gone")]
    SessionGone,
    #[error("no answer within the timeout")]
    Timeout,
    #[error("{0}")]
    Failed(String),
}

/// `hook_before` / `hook_after` towards a MainAI session.
#[async_trait]
pub trait SpawnHook: Send + Sync + Debug {
    /// Sends `hook_before` and waits for the `hook_ack` (the caller bounds the wait).
    async fn before(&self, req: HookRequest) -> Result<HookAck, BridgeError>;
    /// Sends `hook_after` with the result; fire and forget.
    fn after(&self, req: HookRequest, result: Value);
}

/// Asks a senior a question and waits for the answer (the caller bounds the wait).
#[async_trait]
pub trait SeniorBridge: Send + Sync + Debug {
    async fn ask(&self, attempt: AttemptId, question: Value) -> Result<Value, BridgeError>;
}

/// Everything a `spawn` frame carries (docs/protocol.md, Frames; The spawn directive).
#[derive(Debug, Clone)]
pub struct SpawnFrame {
    pub attempt: AttemptId,
    pub agent: String,
    pub credential: WorkerCredential,
    pub worker_binding: Option<Value>,
    pub directive: String,
    pub base_url: String,
    pub lease_deadline_ms: u64,
    /// The attempt's worktree, when its agent has one.
    pub worktree: Option<SpawnWorktree>,
    /// The finished task the attempt's task continues, and the session it
    /// resumes (docs/tasks.md, Continuations).
    pub continued_from: Option<TaskId>,
    pub resume_session: Option<String>,
}

/// A MainAI's reply to a `spawn` frame.
#[derive(Debug, Clone, PartialEq)]
pub enum SpawnReply {
    Ack {
        value: Value,
        ok: bool,
        error: Option<String>,
        stats: Option<Value>,
    },
    Halt {
        value: Option<Value>,
        reason: Option<String>,
    },
}

/// A delivered (or parked) spawn: its `req_id` and where the reply will come.
#[derive(Debug)]
pub struct SpawnReceipt {
    pub req_id: String,
    pub reply: oneshot::Receiver<SpawnReply>,
}

/// Runs delegated attempts on a MainAI session (docs/tasks.md, Operator agents).
#[async_trait]
pub trait SpawnChannel: Send + Sync + Debug {
    /// Sends the `spawn` frame now, or parks it while the session has no socket.
    async fn spawn(&self, frame: SpawnFrame) -> Result<SpawnReceipt, SpawnError>;
    /// Sends a `cancel` frame for a spawn; fire and forget.
    fn cancel(&self, req_id: &str, attempt: AttemptId, reason: &str);
}

/// One live operator session's capabilities.
#[derive(Clone, Debug)]
pub struct LiveSession {
    pub sid: SessionId,
    pub kind: SessionKind,
    pub hooks: Option<Arc<dyn SpawnHook>>,
    pub senior: Option<Arc<dyn SeniorBridge>>,
    pub spawn_channel: Option<Arc<dyn SpawnChannel>>,
}

/// Finds live sessions: by id, or by a claimed role name (`main-ai`, `senior`).
pub trait SessionDirectory: Send + Sync + Debug {
    fn session(&self, sid: &SessionId) -> Option<LiveSession>;
    fn by_role(&self, role: &str) -> Option<LiveSession>;
    /// The MainAI session (kind `main_ai` or `composite`) with the fewest
    /// requests in flight, preferring one with a socket; ties go to the
    /// session seen last.
    fn least_loaded_main_ai(&self) -> Option<LiveSession>;
}

/// Which session an operator agent's attempts go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorRoute {
    /// The session holding this role name.
    Role(String),
    /// The least loaded MainAI session.
    AnyMainAi,
}

impl OperatorRoute {
    /// The spawn channel an attempt goes to: the session its task pins
    /// (`operator_sid`), else the route's. Without one, the refusal names
    /// the session that was wanted.
    pub fn find(
        &self,
        sessions: &dyn SessionDirectory,
        pinned: Option<SessionId>,
    ) -> Result<Arc<dyn SpawnChannel>, SpawnError> {
        let found = match (pinned, self) {
            (Some(sid), _) => sessions.session(&sid),
            (None, OperatorRoute::Role(role)) => sessions.by_role(role),
            (None, OperatorRoute::AnyMainAi) => sessions.least_loaded_main_ai(),
        };
        found.and_then(|s| s.spawn_channel).ok_or_else(|| {
            SpawnError::NoOperator(match (pinned, self) {
                (Some(sid), _) => format!("session {sid}"),
                (None, OperatorRoute::Role(role)) => role.clone(),
                (None, OperatorRoute::AnyMainAi) => "any MainAI session".to_owned(),
            })
        })
    }
}

/// A directory with no sessions: the engine alone, tests, benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSessions;

impl SessionDirectory for NoSessions {
    fn session(&self, _sid: &SessionId) -> Option<LiveSession> {
        None
    }

    fn by_role(&self, _role: &str) -> Option<LiveSession> {
        None
    }

    fn least_loaded_main_ai(&self) -> Option<LiveSession> {
        None
    }
}
