//! The in-memory state of tasks that are not terminal yet: one `TaskCell`
//! per task in a sharded map.
//!
//! Each cell's std `Mutex` is the task's lock (docs/tasks.md, Attempts): every transition
//! of the task happens under it, and the store write for the transition is
//! queued under it too (so the durable order matches the memory order). No
//! `.await` ever happens while it is held.

use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use swarmd_output_store::StoreError;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::EngineError;
use crate::ids::{IdMap, TaskId};
use crate::outcome::Stopped;
use crate::task::{AttemptRecord, OverBudget, ProcessGroupMark, SpawnerKind, Task};
use crate::usage::AttemptUsage;

const SHARDS: usize = 64;

pub(crate) use crate::store::PostedFinal;

/// How the write of a claimed Final ended.
#[derive(Debug, Clone)]
pub(crate) enum FinalWrite {
    /// The Final is durable.
    Stored,
    /// The Final's write failed (a fenced node, a failed group commit).
    Failed(Arc<StoreError>),
    /// The post that claimed the Final went away (or was refused) before
    /// queuing it: the attempt's Final is free to claim again.
    Abandoned,
}

/// The outcome of a claimed Final's write, shared by every post that waits
/// on it; it resolves even when the claiming request is dropped.
pub(crate) type FinalOutcome = Shared<BoxFuture<'static, FinalWrite>>;

/// The Final an open attempt accepted, while its write is in flight and
/// after.
#[derive(Clone)]
pub(crate) struct PostedClaim {
    /// The first post's fingerprint: a retry must match it to replay.
    pub first: PostedFinal,
    pub outcome: FinalOutcome,
}

impl PostedClaim {
    /// Whether its post went away before it queued its Final: the claim
    /// then holds no Final, and the next post or a cancel takes it over.
    pub(crate) fn abandoned(&self) -> bool {
        matches!(
            self.outcome.clone().now_or_never(),
            Some(FinalWrite::Abandoned)
        )
    }
}

impl std::fmt::Debug for PostedClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostedClaim")
            .field("first", &self.first)
            .field("settled", &self.outcome.peek().is_some())
            .finish()
    }
}

/// The runtime side of the current attempt.
#[derive(Debug)]
pub(crate) struct RunState {
    pub attempt: u32,
    /// False once the attempt is decided or fenced: writes then fail.
    pub open: bool,
    pub cancel: CancellationToken,
    pub lease_deadline: Instant,
    pub lease_deadline_ms: u64,
    pub lease_secs: u64,
    pub spawner: SpawnerKind,
    pub started_ms: u64,
    /// The Final a worker posted over HTTP, once one claimed it.
    pub posted: Option<PostedClaim>,
    /// Flips to true when a worker posts a Final over HTTP.
    pub posted_tx: watch::Sender<bool>,
    pub token_exp_secs: u64,
    /// What the attempt's credentials carry (re-mints keep them).
    pub verbs: Vec<crate::gate::Verb>,
    /// The attempt's last Final as stored (highest seq), so deciding the
    /// attempt and the layers that look at it need no store read.
    pub last_final: Option<swarmd_output_store::OutputRecord>,
    /// The seq the attempt's next output gets (see `output`).
    pub next_seq: u64,
    /// Bytes of output stored for the attempt by this process, against
    /// `EngineConfig::max_output_bytes_per_attempt`.
    pub output_bytes: u64,
    /// Why the engine stopped the worker, once it did: the layers see only
    /// the worker's cancel and read the reason here (`outcome`).
    pub stopped: Option<Stopped>,
    /// The host process group its worker runs in, once recorded, so that
    /// later writes of the open record keep it.
    pub process_group: Option<ProcessGroupMark>,
    /// What the attempt's worker reported it used so far (`usage`).
    pub usage: AttemptUsage,
    /// The budget the task passed during this attempt, once it did.
    pub over_budget: Option<OverBudget>,
}

impl RunState {
    /// The attempt's durable record as it stands while the attempt is open.
    pub(crate) fn open_record(&self, task_id: TaskId) -> AttemptRecord {
        AttemptRecord {
            task_id,
            attempt: self.attempt,
            started_ms: self.started_ms,
            lease_deadline_ms: self.lease_deadline_ms,
            spawner: self.spawner,
            outcome: None,
            reason: None,
            finished_ms: None,
            process_group: self.process_group.clone(),
            usage: self.usage.clone(),
        }
    }

    /// Pushes the lease deadline out to `lease_secs` from now.
    pub(crate) fn extend_lease(&mut self, now: Instant, now_ms: u64) {
        (self.lease_deadline, self.lease_deadline_ms) = lease_until(now, now_ms, self.lease_secs);
    }
}

/// The deadline of a lease of `secs` from now, as an instant and in unix ms.
/// Policies are bounded when a task is created, but a stored task is read
/// back as it is: a lease never runs past `MAX_POLICY_SECS`, so neither
/// clock can overflow.
pub(crate) fn lease_until(now: Instant, now_ms: u64, secs: u64) -> (Instant, u64) {
    let secs = secs.min(crate::task::MAX_POLICY_SECS);
    (
        now + std::time::Duration::from_secs(secs),
        now_ms.saturating_add(secs * 1000),
    )
}

#[derive(Debug)]
pub(crate) struct TaskState {
    pub task: Task,
    pub run: Option<RunState>,
    /// When the task began waiting for somewhere to run (unix ms), while
    /// the resolver says its next attempt cannot start.
    pub waiting_since_ms: Option<u64>,
}

impl TaskState {
    /// Refuses writes to an attempt that is not the task's open, current
    /// one.
    pub(crate) fn check_open(&self, attempt: u32) -> Result<(), EngineError> {
        if self.task.status().is_terminal() {
            return Err(EngineError::TaskTerminal);
        }
        match self.run.as_ref() {
            Some(run) if run.attempt == attempt && run.open => Ok(()),
            _ => Err(EngineError::AttemptSuperseded {
                attempt,
                current: self.task.attempt,
            }),
        }
    }
}

#[derive(Debug)]
pub(crate) struct TaskCell {
    /// A task's transitions happen under this lock, which is second in the
    /// engine's lock order (`engine::Inner`): after the idempotency map,
    /// before the leaf locks its writes take; never two at once, never
    /// across an `.await`, never while the resolver is asked.
    state: Mutex<TaskState>,
    /// Flips to true when the task becomes terminal.
    pub terminal: watch::Sender<bool>,
    /// The idempotency key that created the task, held in the engine's
    /// in-memory key map only while the task is live.
    pub key: Option<String>,
}

impl TaskCell {
    pub(crate) fn new(task: Task) -> Arc<Self> {
        Self::with_key(task, None)
    }

    pub(crate) fn with_key(task: Task, key: Option<String>) -> Arc<Self> {
        let terminal = task.status().is_terminal();
        Arc::new(TaskCell {
            state: Mutex::new(TaskState {
                task,
                run: None,
                waiting_since_ms: None,
            }),
            terminal: watch::Sender::new(terminal),
            key,
        })
    }

    pub(crate) fn lock(&self) -> TaskGuard<'_> {
        // Transitions validate before they mutate, so a panic mid-update
        // leaves a consistent record behind.
        TaskGuard::new(self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(debug_assertions)]
thread_local! {
    /// How many task locks this thread holds (debug builds): what
    /// [`task_lock_held`] answers.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A task's lock, held. Debug builds count it per thread, so the engine can
/// assert that the resolver is never asked under one.
pub(crate) struct TaskGuard<'a> {
    guard: MutexGuard<'a, TaskState>,
}

impl<'a> TaskGuard<'a> {
    fn new(guard: MutexGuard<'a, TaskState>) -> Self {
        #[cfg(debug_assertions)]
        HELD.with(|held| held.set(held.get() + 1));
        TaskGuard { guard }
    }
}

impl Drop for TaskGuard<'_> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|held| held.set(held.get() - 1));
    }
}

impl std::ops::Deref for TaskGuard<'_> {
    type Target = TaskState;
    fn deref(&self) -> &TaskState {
        &self.guard
    }
}

impl std::ops::DerefMut for TaskGuard<'_> {
    fn deref_mut(&mut self) -> &mut TaskState {
        &mut self.guard
    }
}

/// Whether this thread holds a task's lock; always false in release builds.
pub(crate) fn task_lock_held() -> bool {
    #[cfg(debug_assertions)]
    return HELD.with(|held| held.get() > 0);
    #[cfg(not(debug_assertions))]
    false
}

/// Live tasks by id.
#[derive(Debug)]
pub(crate) struct LiveTasks {
    shards: Vec<Mutex<IdMap<TaskId, Arc<TaskCell>>>>,
}

impl LiveTasks {
    pub(crate) fn new() -> Self {
        LiveTasks {
            shards: (0..SHARDS).map(|_| Mutex::new(IdMap::default())).collect(),
        }
    }

    fn shard(&self, id: &TaskId) -> MutexGuard<'_, IdMap<TaskId, Arc<TaskCell>>> {
        // UUIDv7's low bytes are random, so they spread tasks evenly.
        let idx = (id.as_uuid().as_u128() as usize) % SHARDS;
        self.shards[idx].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, id: &TaskId) -> Option<Arc<TaskCell>> {
        self.shard(id).get(id).cloned()
    }

    pub(crate) fn insert(&self, cell: Arc<TaskCell>) {
        let id = cell.lock().task.id;
        self.shard(&id).insert(id, cell);
    }

    pub(crate) fn remove(&self, id: &TaskId) {
        self.shard(id).remove(id);
    }

    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task stored with a policy no longer accepted still gets a lease
    /// both clocks can hold.
    #[test]
    fn a_lease_never_overflows_either_clock() {
        let now = Instant::now();
        let (deadline, deadline_ms) = lease_until(now, u64::MAX - 5, u64::MAX);
        let cap = std::time::Duration::from_secs(crate::task::MAX_POLICY_SECS);
        assert_eq!(deadline, now + cap);
        assert_eq!(deadline_ms, u64::MAX);
        assert_eq!(
            lease_until(now, 1_000, 2),
            (now + std::time::Duration::from_secs(2), 3_000)
        );
    }
}
