//! The in-memory table of worker handles (docs/security.md, Worker handles): SHA-256 digest →
//! (task, attempt, verbs, expiry), with an index of each live task's
//! digests so that a task's handles leave memory when the task does.
//!
//! A retired task's handles are kept for a bounded while
//! ([`RETIRED_KEEP`] of them, oldest dropped first), so a worker that writes
//! shortly after its task ended still gets the fence's answer (`410
//! task_terminal`, or the replay of its posted result) rather than `401`;
//! past that window a retired task's handle is unknown, `401 unauthorized`,
//! while its token still answers `410`. The store keeps every handle until
//! it expires, and a restart loads the unexpired ones back.

use std::collections::VecDeque;

use crate::ids::{AttemptId, IdMap, TaskId};
use crate::store::HandleRecord;

/// How many handles of retired tasks stay answerable: minutes of retries
/// at thousands of tasks a second, in a few MiB.
pub(crate) const RETIRED_KEEP: usize = 65_536;

/// Worker handles by digest, indexed by live task.
#[derive(Debug)]
pub(crate) struct HandleTable {
    by_digest: IdMap<[u8; 32], HandleRecord>,
    /// The digests of each task that has not retired.
    by_task: IdMap<TaskId, Vec<[u8; 32]>>,
    /// Digests of retired tasks' handles, oldest first.
    retired: VecDeque<[u8; 32]>,
    retired_keep: usize,
}

impl HandleTable {
    /// An empty table keeping up to `retired_keep` handles of retired tasks.
    pub(crate) fn new(retired_keep: usize) -> Self {
        HandleTable {
            by_digest: IdMap::default(),
            by_task: IdMap::default(),
            retired: VecDeque::new(),
            retired_keep,
        }
    }

    /// Registers (or replaces) the record of a handle.
    pub(crate) fn insert(&mut self, digest: [u8; 32], record: HandleRecord) {
        let task = record.task_id;
        if self.by_digest.insert(digest, record).is_none() {
            self.by_task.entry(task).or_default().push(digest);
        }
    }

    pub(crate) fn get(&self, digest: &[u8; 32]) -> Option<&HandleRecord> {
        self.by_digest.get(digest)
    }

    pub(crate) fn get_mut(&mut self, digest: &[u8; 32]) -> Option<&mut HandleRecord> {
        self.by_digest.get_mut(digest)
    }

    /// The digests of every handle of (task, attempt) still in the table.
    pub(crate) fn digests_of(&self, id: AttemptId) -> Vec<[u8; 32]> {
        let AttemptId { task, n: attempt } = id;
        self.by_task.get(&task).map_or_else(Vec::new, |digests| {
            digests
                .iter()
                .filter(|d| self.by_digest.get(*d).is_some_and(|r| r.attempt == attempt))
                .copied()
                .collect()
        })
    }

    /// Registers the handle of a task that is not live here, straight into
    /// the retired window (so it is bounded like the others); a handle
    /// already in the table is left as it is.
    pub(crate) fn insert_retired(&mut self, digest: [u8; 32], record: HandleRecord) {
        if self.by_digest.contains_key(&digest) {
            return;
        }
        self.by_digest.insert(digest, record);
        self.retired.push_back(digest);
        while self.retired.len() > self.retired_keep {
            if let Some(old) = self.retired.pop_front() {
                self.by_digest.remove(&old);
            }
        }
    }

    /// Moves a task's handles to the retired window, dropping the oldest
    /// retired handles beyond its capacity.
    pub(crate) fn retire_task(&mut self, task: TaskId) {
        let Some(digests) = self.by_task.remove(&task) else {
            return;
        };
        self.retired.extend(digests);
        while self.retired.len() > self.retired_keep {
            if let Some(old) = self.retired.pop_front() {
                self.by_digest.remove(&old);
            }
        }
    }

    /// Keeps only the handles for which `keep` holds.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&[u8; 32], &mut HandleRecord) -> bool) {
        self.by_digest.retain(|digest, record| keep(digest, record));
        let by_digest = &self.by_digest;
        self.by_task.retain(|_, digests| {
            digests.retain(|d| by_digest.contains_key(d));
            !digests.is_empty()
        });
        self.retired.retain(|d| by_digest.contains_key(d));
    }

    /// The tasks with handles that have not retired.
    pub(crate) fn tasks(&self) -> Vec<TaskId> {
        self.by_task.keys().copied().collect()
    }

    /// Handles in the table, retired ones included.
    pub(crate) fn len(&self) -> usize {
        self.by_digest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Verb;

    fn record(task_id: TaskId, attempt: u32) -> HandleRecord {
        HandleRecord {
            task_id,
            attempt,
            verbs: vec![Verb::PostResult],
            exp_secs: 100,
        }
    }

    fn digest(n: usize) -> [u8; 32] {
        let mut d = [0u8; 32];
        d[..8].copy_from_slice(&(n as u64).to_le_bytes());
        d
    }

    #[test]
    fn finished_tasks_leave_no_handle_behind() {
        let mut table = HandleTable::new(0);
        for n in 0..1000 {
            let task = TaskId::new();
            // A first attempt, its retry, and a handle announced again.
            table.insert(digest(3 * n), record(task, 1));
            table.insert(digest(3 * n + 1), record(task, 2));
            table.insert(digest(3 * n + 2), record(task, 2));
            assert_eq!(table.digests_of(AttemptId::new(task, 2)).len(), 2);
            table.retire_task(task);
        }
        assert_eq!(table.len(), 0);
        assert!(table.tasks().is_empty());
        assert!(table.retired.is_empty());
    }

    #[test]
    fn retired_handles_stay_answerable_within_the_window() {
        let mut table = HandleTable::new(2);
        let tasks: Vec<_> = (0..3).map(|_| TaskId::new()).collect();
        for (n, task) in tasks.iter().enumerate() {
            table.insert(digest(n), record(*task, 1));
        }
        for task in &tasks {
            table.retire_task(*task);
        }
        assert!(table.get(&digest(0)).is_none(), "the oldest is dropped");
        assert_eq!(table.get(&digest(2)).map(|r| r.task_id), Some(tasks[2]));
        assert_eq!(table.len(), 2);
        assert!(
            table.digests_of(AttemptId::new(tasks[2], 1)).is_empty(),
            "no longer live"
        );
    }

    /// Through the engine: every finished task's handles leave the live
    /// index as the task retires.
    #[tokio::test]
    async fn the_engine_retires_the_handles_of_finished_tasks() {
        use std::sync::Arc;
        use std::time::Duration;

        use crate::EngineConfig;
        use crate::task::{SpawnerKind, TaskSpec, TaskStatus};
        use crate::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};

        let spawner = ScriptedSpawner::new(|_| Script::Final {
            value: serde_json::json!("done"),
            ok: true,
        });
        let resolver =
            Arc::new(StaticResolver::new().with("a", SpawnerKind::Process, None, spawner.clone()));
        let engine = memory_engine(resolver, EngineConfig::default());
        let mut ids = Vec::new();
        for _ in 0..50 {
            let spec = TaskSpec {
                agent: "a".into(),
                prompt: "p".into(),
                ..TaskSpec::default()
            };
            ids.push(engine.create_task(spec).await.unwrap().id);
        }
        for id in ids {
            let task = engine.wait_task(id, Duration::from_secs(10)).await.unwrap();
            assert_eq!(task.status(), TaskStatus::Pass);
        }
        // `wait_task` wakes on the terminal flag, which retire sets first.
        for _ in 0..100 {
            if engine.inner.held.handles().tasks().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            engine.inner.held.handles().tasks().is_empty(),
            "no live task has a handle"
        );
        assert_eq!(engine.handle_count(), 50, "the retired window holds them");
    }

    #[test]
    fn digests_of_names_one_attempt_and_retain_cleans_the_index() {
        let mut table = HandleTable::new(RETIRED_KEEP);
        let task = TaskId::new();
        table.insert(digest(1), record(task, 1));
        table.insert(digest(2), record(task, 2));
        table.insert(digest(3), record(task, 2));
        table.insert(digest(3), record(task, 2));
        let mut of_two = table.digests_of(AttemptId::new(task, 2));
        of_two.sort_unstable();
        assert_eq!(of_two, vec![digest(2), digest(3)]);
        table.retain(|d, _| *d != digest(2));
        assert_eq!(table.digests_of(AttemptId::new(task, 2)), vec![digest(3)]);
        table.retain(|_, _| false);
        assert!(table.tasks().is_empty());
        assert_eq!(table.len(), 0);
    }
}
