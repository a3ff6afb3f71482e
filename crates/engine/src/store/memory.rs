//! The in-memory `TaskStore`, for tests and `--ephemeral` runs. One std
//! `Mutex` guards everything; no `.await` happens while it is held, and
//! `submit` applies and acknowledges a batch before it returns, so callbacks
//! run in submission order.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use swarmd_output_store::StoreError;

use super::{Done, HandleRecord, LiveSnapshot, SessionRecord, TaskFilter, TaskStore, WriteOp};
use crate::audit::AuditRecord;
use crate::event::EventRecord;
use crate::ids::{SessionId, TaskId};
use crate::task::{AttemptRecord, Task};

/// The event log keeps at most this many events; older ones fall off (an
/// ephemeral daemon has no durable log to resume from anyway).
const EVENT_WINDOW: usize = 200_000;
/// Audit lines kept in memory.
const AUDIT_WINDOW: usize = 100_000;

/// A `TaskStore` that lives and dies with the process.
#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    tasks: BTreeMap<TaskId, Task>,
    attempts: HashMap<TaskId, Vec<AttemptRecord>>,
    handles: HashMap<[u8; 32], HandleRecord>,
    keys: HashMap<String, TaskId>,
    events: VecDeque<EventRecord>,
    audit: VecDeque<AuditRecord>,
    next_audit_id: u64,
    sessions: BTreeMap<SessionId, SessionRecord>,
}

impl MemoryTaskStore {
    pub fn new() -> Self {
        Self::default()
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
                self.tasks.insert(task.id, *task);
            }
            WriteOp::PutAttempt(rec) => {
                let list = self.attempts.entry(rec.task_id).or_default();
                match list.iter_mut().find(|a| a.attempt == rec.attempt) {
                    Some(slot) => *slot = rec,
                    None => list.push(rec),
                }
            }
            WriteOp::PutHandle { digest, record } => {
                self.handles.insert(digest, record);
            }
            WriteOp::IdempotencyKey { key, task_id } => {
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
        Ok(self.lock().tasks.get(&id).cloned())
    }

    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut list = self.lock().attempts.get(&id).cloned().unwrap_or_default();
        list.sort_by_key(|a| a.attempt);
        Ok(list)
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let state = self.lock();
        let upper = match filter.before {
            Some(before) => std::ops::Bound::Excluded(before),
            None => std::ops::Bound::Unbounded,
        };
        Ok(state
            .tasks
            .range((std::ops::Bound::Unbounded, upper))
            .rev()
            .map(|(_, t)| t)
            .filter(|t| filter.status.is_none_or(|s| t.status() == s))
            .filter(|t| filter.agent.as_deref().is_none_or(|a| t.agent == a))
            .take(filter.limit)
            .cloned()
            .collect())
    }

    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        Ok(self.lock().keys.get(key).copied())
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
            .cloned()
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

    async fn prune(&self, finished_before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        let mut state = self.lock();
        let gone: Vec<TaskId> = state
            .tasks
            .values()
            .filter(|t| t.status().is_terminal())
            .filter(|t| t.finished_ms.is_some_and(|f| f < finished_before_ms))
            .map(|t| t.id)
            .collect();
        let gone_set: HashSet<TaskId> = gone.iter().copied().collect();
        for id in &gone {
            state.tasks.remove(id);
            state.attempts.remove(id);
        }
        state.handles.retain(|_, h| !gone_set.contains(&h.task_id));
        state.keys.retain(|_, t| !gone_set.contains(t));
        state.events.retain(|e| e.ts_ms >= finished_before_ms);
        Ok(gone)
    }

    async fn healthcheck(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
