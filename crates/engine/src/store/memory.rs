//! The in-memory `TaskStore`, for tests and `--ephemeral` runs. One std
//! `Mutex` guards everything; no `.await` happens while it is held, and
//! `submit` applies and acknowledges a batch before it returns, so callbacks
//! run in submission order.
//!
//! Memory is bounded: the newest `keep_finished` terminal tasks are kept
//! (older ones are evicted with their attempts and idempotency keys as newer
//! ones finish), as are the newest [`EVENT_WINDOW`] events and
//! [`AUDIT_WINDOW`] audit lines. Evicted tasks are reported by the next
//! `prune`, so that their outputs and handles go too; the daemon runs
//! retention every few seconds on this store. Flow runs are kept until
//! `prune` finds them terminal and old; flow documents are kept for good.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use swarmd_output_store::StoreError;

use super::{
    Done, HandleRecord, LiveSnapshot, PostedFinal, SessionRecord, TaskFilter, TaskListing,
    TaskStore, WriteOp,
};
use crate::audit::AuditRecord;
use crate::event::EventRecord;
use crate::ids::{IdMap, RunId, SessionId, TaskId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use crate::task::{AttemptRecord, Task, TaskStatus};

/// The event log keeps at most this many events; older ones fall off (an
/// ephemeral daemon has no durable log to resume from anyway).
const EVENT_WINDOW: usize = 200_000;
/// Audit lines kept in memory.
const AUDIT_WINDOW: usize = 100_000;

/// Terminal tasks kept when no other number is given
/// (`store.memory_keep_finished`).
pub const DEFAULT_KEEP_FINISHED: usize = 100_000;

/// A `TaskStore` that lives and dies with the process.
#[derive(Debug)]
pub struct MemoryTaskStore {
    state: Mutex<State>,
}

impl Default for MemoryTaskStore {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Boxed: a task is large, and a B-tree shifts its neighbours on every
    /// insert and eviction.
    tasks: BTreeMap<TaskId, Box<Task>>,
    attempts: IdMap<TaskId, Vec<AttemptRecord>>,
    handles: IdMap<[u8; 32], HandleRecord>,
    keys: HashMap<String, TaskId>,
    /// The idempotency key of each keyed task, to drop it with the task.
    key_of: IdMap<TaskId, String>,
    /// The handle digests of each task, to drop them with the task.
    handles_of: IdMap<TaskId, Vec<[u8; 32]>>,
    /// Posted-Final fingerprints by task, then attempt.
    posted: IdMap<TaskId, HashMap<u32, PostedFinal>>,
    /// Terminal tasks, oldest first.
    finished: VecDeque<TaskId>,
    keep_finished: usize,
    /// Tasks evicted since the last `prune`, which reports them.
    evicted: Vec<TaskId>,
    events: VecDeque<EventRecord>,
    audit: VecDeque<AuditRecord>,
    next_audit_id: u64,
    sessions: BTreeMap<SessionId, SessionRecord>,
    runs: BTreeMap<RunId, RunRecord>,
    run_keys: HashMap<String, RunId>,
    flows: HashMap<String, FlowDoc>,
}

impl MemoryTaskStore {
    /// A store keeping [`DEFAULT_KEEP_FINISHED`] terminal tasks.
    pub fn new() -> Self {
        Self::keeping(DEFAULT_KEEP_FINISHED)
    }

    /// A store keeping the newest `keep_finished` terminal tasks (at least one).
    /// The ids it evicts wait (16 bytes each) for the next `prune` to report
    /// them, so an owner that keeps finishing tasks must also prune; the
    /// engine's retention job does.
    pub fn keeping(keep_finished: usize) -> Self {
        MemoryTaskStore {
            state: Mutex::new(State {
                keep_finished: keep_finished.max(1),
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves whole records behind (every
        // op replaces or pushes a complete value), so the data stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn apply(&mut self, op: WriteOp) {
        match op {
            WriteOp::PutTask(task) => {
                let (id, terminal) = (task.id, task.status().is_terminal());
                let was_terminal = self
                    .tasks
                    .insert(id, task)
                    .is_some_and(|old| old.status().is_terminal());
                if terminal && !was_terminal {
                    self.finished.push_back(id);
                    self.evict_excess();
                }
            }
            WriteOp::PutAttempt(rec) => {
                let list = self.attempts.entry(rec.task_id).or_default();
                match list.iter_mut().find(|a| a.attempt == rec.attempt) {
                    Some(slot) => *slot = rec,
                    None => list.push(rec),
                }
            }
            WriteOp::PutHandle { digest, record } => {
                let digests = self.handles_of.entry(record.task_id).or_default();
                if !digests.contains(&digest) {
                    digests.push(digest);
                }
                self.handles.insert(digest, record);
            }
            WriteOp::IdempotencyKey { key, task_id } => {
                self.key_of.insert(task_id, key.clone());
                self.keys.insert(key, task_id);
            }
            WriteOp::Events(events) => {
                for e in events {
                    if self.events.len() >= EVENT_WINDOW {
                        self.events.pop_front();
                    }
                    self.events.push_back(e);
                }
            }
            WriteOp::Audit(mut rec) => {
                self.next_audit_id += 1;
                rec.id = self.next_audit_id;
                if self.audit.len() >= AUDIT_WINDOW {
                    self.audit.pop_front();
                }
                self.audit.push_back(rec);
            }
            WriteOp::PutSession(rec) => {
                self.sessions.insert(rec.sid, *rec);
            }
            WriteOp::DeleteSession(sid) => {
                self.sessions.remove(&sid);
            }
            WriteOp::PutPostedFinal {
                task_id,
                attempt,
                posted,
            } => {
                self.posted
                    .entry(task_id)
                    .or_default()
                    .insert(attempt, posted);
            }
            WriteOp::DeletePostedFinal { task_id, attempt } => {
                if let Some(by_attempt) = self.posted.get_mut(&task_id) {
                    by_attempt.remove(&attempt);
                }
            }
            WriteOp::PutRun(run) => {
                if let Some(key) = &run.idempotency_key {
                    self.run_keys.entry(key.clone()).or_insert(run.id);
                }
                self.runs.insert(run.id, *run);
            }
            WriteOp::PutFlow(doc) => {
                self.flows.entry(doc.hash.clone()).or_insert(*doc);
            }
        }
    }

    /// Evicts the oldest terminal tasks beyond `keep_finished`.
    fn evict_excess(&mut self) {
        while self.finished.len() > self.keep_finished {
            let Some(id) = self.finished.pop_front() else {
                return;
            };
            self.forget_task(id);
            self.evicted.push(id);
        }
    }

    fn forget_task(&mut self, id: TaskId) {
        self.tasks.remove(&id);
        self.attempts.remove(&id);
        self.posted.remove(&id);
        if let Some(key) = self.key_of.remove(&id) {
            self.keys.remove(&key);
        }
        for digest in self.handles_of.remove(&id).unwrap_or_default() {
            self.handles.remove(&digest);
        }
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        let mut state = self.lock();
        for op in batch {
            state.apply(op);
        }
        // Acknowledged under the lock, so acknowledgements keep batch order.
        done(Ok(()));
    }

    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.lock().tasks.get(&id).map(|t| Task::clone(t)))
    }

    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut list = self.lock().attempts.get(&id).cloned().unwrap_or_default();
        list.sort_by_key(|a| a.attempt);
        Ok(list)
    }

    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError> {
        let state = self.lock();
        let upper = match filter.before {
            Some(before) => std::ops::Bound::Excluded(before),
            None => std::ops::Bound::Unbounded,
        };
        let lower = match filter.since {
            Some(since) => std::ops::Bound::Included(since),
            None => std::ops::Bound::Unbounded,
        };
        if let (Some(since), Some(before)) = (filter.since, filter.before)
            && since >= before
        {
            return Ok(TaskListing::default());
        }
        let mut page = TaskListing::default();
        let mut weight = 0usize;
        let matching = state
            .tasks
            .range((lower, upper))
            .rev()
            .map(|(_, t)| t)
            .filter(|t| filter.matches(t))
            .take(filter.limit);
        for task in matching {
            if weight >= max_bytes {
                page.cut = true;
                break;
            }
            if max_bytes != usize::MAX {
                weight = weight.saturating_add(stored_weight(task));
            }
            page.tasks.push(Task::clone(task));
        }
        Ok(page)
    }

    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError> {
        let state = self.lock();
        let mut counts = BTreeMap::new();
        for task in state
            .tasks
            .values()
            .rev()
            .filter(|t| t.status() == status)
            .take(window)
        {
            *counts.entry(task.agent.clone()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        Ok(self.lock().keys.get(key).copied())
    }

    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError> {
        Ok(self
            .lock()
            .posted
            .get(&task)
            .and_then(|by_attempt| by_attempt.get(&attempt))
            .cloned())
    }

    async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let state = self.lock();
        let start = state.events.partition_point(|e| e.seq <= after_seq);
        Ok(state
            .events
            .iter()
            .skip(start)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let state = self.lock();
        Ok(state
            .audit
            .iter()
            .rev()
            .filter(|r| task.is_none_or(|t| r.task_id == t))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
        let state = self.lock();
        let tasks: Vec<Task> = state
            .tasks
            .values()
            .filter(|t| !t.status().is_terminal())
            .map(|t| Task::clone(t))
            .collect();
        let attempts = tasks
            .iter()
            .filter_map(|t| {
                state
                    .attempts
                    .get(&t.id)
                    .and_then(|l| l.iter().max_by_key(|a| a.attempt).cloned())
            })
            .collect();
        Ok(LiveSnapshot {
            tasks,
            attempts,
            handles: state
                .handles
                .iter()
                .filter(|(_, h)| h.exp_secs > now_secs)
                .map(|(d, h)| (*d, h.clone()))
                .collect(),
            sessions: state.sessions.values().cloned().collect(),
            last_event_seq: state.events.back().map_or(0, |e| e.seq),
        })
    }

    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock().runs.get(&id).cloned())
    }

    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError> {
        Ok(self.lock().run_keys.get(key).copied())
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let state = self.lock();
        let upper = match filter.before {
            Some(before) => std::ops::Bound::Excluded(before),
            None => std::ops::Bound::Unbounded,
        };
        Ok(state
            .runs
            .range((std::ops::Bound::Unbounded, upper))
            .rev()
            .map(|(_, r)| r)
            .filter(|r| filter.matches(r))
            .take(filter.limit)
            .map(RunSummary::from)
            .collect())
    }

    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        Ok(self
            .lock()
            .runs
            .values()
            .filter(|r| !r.status.is_terminal())
            .cloned()
            .collect())
    }

    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        Ok(self.lock().flows.get(hash).cloned())
    }

    async fn prune(&self, finished_before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        // Tasks sit in `finished` in the order they finished, and events in
        // seq order, so what expired is a prefix of each: this costs what it
        // removes, not what the store holds. Runs are fewer and scanned whole.
        let mut state = self.lock();
        let mut gone = std::mem::take(&mut state.evicted);
        while let Some(&id) = state.finished.front() {
            let expired = state
                .tasks
                .get(&id)
                .is_none_or(|t| t.finished_ms.is_some_and(|f| f < finished_before_ms));
            if !expired {
                break;
            }
            state.finished.pop_front();
            state.forget_task(id);
            gone.push(id);
        }
        let old_runs: Vec<RunId> = state
            .runs
            .values()
            .filter(|r| r.status.is_terminal() && r.updated_ms < finished_before_ms)
            .map(|r| r.id)
            .collect();
        for id in old_runs {
            if let Some(run) = state.runs.remove(&id)
                && let Some(key) = run.idempotency_key
                && state.run_keys.get(&key) == Some(&id)
            {
                state.run_keys.remove(&key);
            }
        }
        while state
            .events
            .front()
            .is_some_and(|e| e.ts_ms < finished_before_ms)
        {
            state.events.pop_front();
        }
        Ok(gone)
    }

    async fn healthcheck(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A task's weight in a listing: the bytes of its JSON, as a stored
/// store would hold it.
fn stored_weight(task: &Task) -> usize {
    serde_json::to_vec(task).map_or(0, |json| json.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{AttemptOutcome, Policy, SpawnerKind, TaskSpec};

    fn write(store: &MemoryTaskStore, ops: Vec<WriteOp>) {
        store.submit(ops, Box::new(|outcome| outcome.unwrap()));
    }

    /// A task created under `key`, with one attempt, then finished.
    fn finished_task(store: &MemoryTaskStore, key: &str, now_ms: u64) -> TaskId {
        let mut task = Task::new(
            TaskId::new(),
            TaskSpec::default(),
            Policy::default(),
            0,
            now_ms,
        );
        let attempt = AttemptRecord {
            task_id: task.id,
            attempt: 1,
            started_ms: now_ms,
            lease_deadline_ms: now_ms + 1,
            spawner: SpawnerKind::InProcess,
            outcome: None,
            reason: None,
            finished_ms: None,
            process_group: None,
            usage: Default::default(),
        };
        write(
            store,
            vec![
                WriteOp::PutTask(Box::new(task.clone())),
                WriteOp::IdempotencyKey {
                    key: key.to_owned(),
                    task_id: task.id,
                },
                WriteOp::PutAttempt(attempt),
                WriteOp::PutHandle {
                    digest: *task.id.as_uuid().as_bytes().repeat(2).as_array().unwrap(),
                    record: HandleRecord {
                        task_id: task.id,
                        attempt: 1,
                        verbs: Vec::new(),
                        exp_secs: u64::MAX,
                    },
                },
            ],
        );
        task.start_attempt(now_ms).unwrap();
        task.finish(AttemptOutcome::Pass, None, None, now_ms)
            .unwrap();
        // Written twice while terminal: counted once.
        write(store, vec![WriteOp::PutTask(Box::new(task.clone()))]);
        write(store, vec![WriteOp::PutTask(Box::new(task.clone()))]);
        task.id
    }

    #[tokio::test]
    async fn keeps_only_the_newest_finished_tasks_and_reports_the_evicted() {
        let store = MemoryTaskStore::keeping(2);
        let ids: Vec<TaskId> = (0..3)
            .map(|i| finished_task(&store, &format!("k{i}"), 1_000 + i))
            .collect();
        let live = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 1);
        write(&store, vec![WriteOp::PutTask(Box::new(live.clone()))]);

        assert!(store.task(ids[0]).await.unwrap().is_none());
        assert!(store.attempts(ids[0]).await.unwrap().is_empty());
        assert_eq!(store.task_for_key("k0").await.unwrap(), None);
        for (i, id) in ids.iter().enumerate().skip(1) {
            assert!(store.task(*id).await.unwrap().is_some());
            assert_eq!(store.attempts(*id).await.unwrap().len(), 1);
            let key = format!("k{i}");
            assert_eq!(store.task_for_key(&key).await.unwrap(), Some(*id));
        }
        assert!(store.task(live.id).await.unwrap().is_some());
        let handles = store.load_live(0).await.unwrap().handles;
        assert_eq!(handles.len(), 2, "the evicted task's handle went with it");
        assert!(handles.iter().all(|(_, h)| h.task_id != ids[0]));

        // The next prune reports the evicted task once, plus what expired.
        assert_eq!(store.prune(0).await.unwrap(), vec![ids[0]]);
        assert!(store.prune(0).await.unwrap().is_empty());
        let expired = store.prune(1_002).await.unwrap();
        assert_eq!(expired, vec![ids[1]]);
        assert_eq!(store.task_for_key("k1").await.unwrap(), None);

        // A pruned task no longer counts against the window.
        let newer = finished_task(&store, "k3", 2_000);
        assert!(store.task(ids[2]).await.unwrap().is_some());
        assert!(store.task(newer).await.unwrap().is_some());
    }
}
