//! The durable record of tasks, attempts, handles, events, audit lines,
//! operator sessions, flow runs and pinned flow documents: the `TaskStore`
//! trait and its memory and SQLite backends.
//!
//! Writes are batches of `WriteOp`s submitted synchronously (so submission
//! order is commit order) and acknowledged through a callback once durable;
//! the callbacks run in submission order. Reads are async.

#[cfg(any(test, feature = "test-util"))]
pub mod conformance;
mod memory;
mod sqlite;

pub use memory::{DEFAULT_KEEP_FINISHED, MemoryTaskStore};
pub use sqlite::SqliteTaskStore;
pub use swarmd_types::session::SessionKind;

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_output_store::StoreError;
use tokio::sync::oneshot;

use crate::audit::AuditRecord;
use crate::event::{EventRecord, Logged};
use crate::gate::Verb;
use crate::ids::{RunId, SessionId, TaskId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use crate::task::{AttemptRecord, Task, TaskStatus};

/// What a worker handle stands for (docs/security.md, Worker handles); stored under
/// SHA-256(handle).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandleRecord {
    pub task_id: TaskId,
    pub attempt: u32,
    pub verbs: Vec<Verb>,
    pub exp_secs: u64,
}

/// A persisted operator session (docs/protocol.md, Disconnects and parking). Only the token's
/// digest is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub sid: SessionId,
    /// Hex SHA-256 of the session token.
    pub token_digest: String,
    pub roles: Vec<String>,
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Value>,
    pub created_ms: u64,
    pub last_seen_ms: u64,
    /// The event seq through which every `task_done` of the session's tasks
    /// reached one of its sockets (`None`: not known). After a restart the
    /// session is sent `task_done` again for tasks that finished after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_through: Option<u64>,
    /// The name of the wire dialect the server writes to the session
    /// (server-defined; absent: the documented wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
}

/// A stored session and the node it is homed on, as a cluster's nodes read
/// it (docs/decisions.md, Cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct HomedSession {
    pub record: SessionRecord,
    pub home: Option<swarmd_types::cluster::NodeId>,
}

/// The fingerprint of a worker's accepted Final: enough to tell a replay
/// (same `Idempotency-Key` and body) from a second result, for as long as
/// the task is retained. Stored before the Final itself, so an acknowledged
/// Final always has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostedFinal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body.
    pub body_digest: [u8; 32],
}

/// One change in a write batch. A batch commits atomically.
#[derive(Debug, Clone)]
pub enum WriteOp {
    PutTask(Box<Task>),
    PutAttempt(AttemptRecord),
    PutHandle {
        digest: [u8; 32],
        record: HandleRecord,
    },
    IdempotencyKey {
        key: String,
        task_id: TaskId,
    },
    Events(Vec<EventRecord>),
    Audit(AuditRecord),
    PutSession(Box<SessionRecord>),
    DeleteSession(SessionId),
    /// Records the fingerprint of the Final a worker posted for an attempt.
    PutPostedFinal {
        task_id: TaskId,
        attempt: u32,
        posted: PostedFinal,
    },
    /// Withdraws a fingerprint whose Final could not be stored.
    DeletePostedFinal {
        task_id: TaskId,
        attempt: u32,
    },
    /// Stores a flow run's record, replacing the one with its id. A record
    /// with an idempotency key also makes the key name the run, unless the
    /// key already names another (the first writer keeps it).
    PutRun(Box<RunRecord>),
    /// Stores a flow document under its hash unless one is stored there
    /// (content-addressed: a stored document never changes).
    PutFlow(Box<FlowDoc>),
}

/// Called once a batch is durable (or failed), in submission order.
pub type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Like `Done`, for a store that numbers events at commit: the first seq
/// the batch's events were given (their seqs run on from it, in order).
pub type NumberedDone = Box<dyn FnOnce(Result<u64, StoreError>) + Send>;

/// Which tasks `list_tasks` returns: newest first, strictly older than
/// `before`, not older than `since` (ids are time-ordered, so these two are
/// also a creation-time range), and matching every other field given.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub agent: Option<String>,
    pub before: Option<TaskId>,
    pub since: Option<TaskId>,
    /// Tasks owned by this session.
    pub session: Option<SessionId>,
    /// Sub-tasks of this task.
    pub parent: Option<TaskId>,
    /// Continuations of this task (`continue_from`).
    pub continued_from: Option<TaskId>,
    /// Tasks whose prompt contains this text, ASCII letters in either case.
    pub prompt_contains: Option<String>,
    pub limit: usize,
}

impl TaskFilter {
    /// Whether `task` passes every field but the id range and the limit.
    pub fn matches(&self, task: &Task) -> bool {
        self.status.is_none_or(|s| task.status() == s)
            && self.agent.as_deref().is_none_or(|a| task.agent == a)
            && self.session.is_none_or(|s| task.session == Some(s))
            && self.parent.is_none_or(|p| task.parent == Some(p))
            && self
                .continued_from
                .is_none_or(|c| task.continued_from == Some(c))
            && self.prompt_contains.as_deref().is_none_or(|text| {
                task.prompt
                    .to_ascii_lowercase()
                    .contains(&text.to_ascii_lowercase())
            })
    }
}

/// A page of `TaskStore::list_page`.
#[derive(Debug, Default)]
pub struct TaskListing {
    pub tasks: Vec<Task>,
    /// Whether the page ended at its byte budget while more tasks match:
    /// the next page starts before its last task.
    pub cut: bool,
}

/// Everything recovery needs at boot.
#[derive(Debug, Default)]
pub struct LiveSnapshot {
    /// Tasks not yet terminal.
    pub tasks: Vec<Task>,
    /// The latest attempt record of each of those tasks.
    pub attempts: Vec<AttemptRecord>,
    /// Handles whose token has not expired.
    pub handles: Vec<([u8; 32], HandleRecord)>,
    pub sessions: Vec<SessionRecord>,
    /// The highest event sequence number stored (0 if none).
    pub last_event_seq: u64,
}

/// What `TaskStore::claim_key` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClaim {
    /// The key is the given task's now.
    Claimed,
    /// Another task holds the key, and its record is written.
    Taken(TaskId),
}

/// The engine's durable state.
#[async_trait]
pub trait TaskStore: Send + Sync + Debug + 'static {
    /// Queues `batch` now; `done` runs once it is durable.
    fn submit(&self, batch: Vec<WriteOp>, done: Done);
    /// Whether the store numbers events itself, at commit (several nodes
    /// share its log, docs/decisions.md, Cluster): the seqs of
    /// `WriteOp::Events` are then ignored and `submit_numbered` tells the
    /// first seq given. Stores that do not take the seqs they are given.
    fn numbers_events(&self) -> bool {
        false
    }
    /// Like `submit`; `done` gets the first seq the store gave the batch's
    /// events (only meaningful when `numbers_events`).
    fn submit_numbered(&self, batch: Vec<WriteOp>, done: NumberedDone) {
        self.submit(batch, Box::new(move |res| done(res.map(|()| 0))));
    }
    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError>;
    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError>;
    /// The tasks `filter` selects, ending early once those read weigh
    /// `max_bytes` or more as stored (a page holds at least one task):
    /// what a client's listing holds in memory is bounded by that, not by
    /// the size of the tasks it happens to match.
    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError>;
    /// Every task `filter` selects, up to its `limit`.
    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        Ok(self.list_page(filter, usize::MAX).await?.tasks)
    }
    /// The newest `window` tasks of `status`, counted by agent; only the
    /// agent of each is read.
    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError>;
    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError>;
    /// Claims an idempotency key for `task` before the task's record is
    /// written, or names the task that holds it. A store several processes
    /// write claims atomically, so two of them given one key at once create
    /// one task (docs/decisions.md, Cluster); a store only this process
    /// writes looks the key up, the engine's key map being the claim.
    async fn claim_key(&self, key: &str, _task: TaskId) -> Result<KeyClaim, StoreError> {
        Ok(match self.task_for_key(key).await? {
            Some(existing) => KeyClaim::Taken(existing),
            None => KeyClaim::Claimed,
        })
    }
    /// Gives up the claim of `key` by `task`, whose record could not be
    /// written; a claim another task holds stays.
    async fn release_key(&self, key: &str, task: TaskId) -> Result<(), StoreError> {
        let _ = (key, task);
        Ok(())
    }
    /// The fingerprint of the Final a worker posted for (task, attempt).
    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError>;
    async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError>;
    /// The log after `after_seq` for a cluster's event pump: the records
    /// whose kind is in `whole` complete, every other one as its seq only
    /// (`None`: every record complete). A store whose log only this
    /// process writes returns every record complete.
    async fn log_after(
        &self,
        after_seq: u64,
        limit: usize,
        whole: Option<&[&str]>,
    ) -> Result<Vec<Logged>, StoreError> {
        let _ = whole;
        Ok(Logged::whole(self.events_after(after_seq, limit).await?))
    }
    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError>;
    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError>;
    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError>;
    /// The run an idempotency key names.
    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError>;
    /// Newest id first, strictly older than `filter.before`, at most
    /// `filter.limit`, matching every other field given.
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError>;
    /// Every run not terminal, oldest first (recovery at boot).
    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError>;
    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError>;
    /// Deletes terminal tasks finished before the cutoff, with their attempts,
    /// handles and keys, terminal runs last updated before it, with their
    /// keys, and events older than it; returns the deleted task ids. Flow
    /// documents stay.
    async fn prune(&self, finished_before_ms: u64) -> Result<Vec<TaskId>, StoreError>;
    /// A cheap write round-trip, for readiness.
    async fn healthcheck(&self) -> Result<(), StoreError>;
}

/// Submits `batch` and waits until it is durable.
pub async fn commit(store: &dyn TaskStore, batch: Vec<WriteOp>) -> Result<(), StoreError> {
    let (tx, rx) = oneshot::channel();
    store.submit(
        batch,
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    );
    rx.await.map_err(|_| StoreError::Closed)?
}
