//! The tasks this engine holds in memory: their cells (`live`), the
//! idempotency keys of live tasks, admission's queues and the worker
//! handles, with the rules for taking them together (the lock order in
//! `engine.rs`). A verb that changes a task hands out its cell's lock here
//! and never reaches the stores through this handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::admission::Admission;
use crate::error::EngineError;
use crate::handles::{HandleTable, RETIRED_KEEP};
use crate::ids::TaskId;
use crate::live::{LiveTasks, RunState, TaskCell};
use crate::store::HandleRecord;

/// Live tasks, their keys, admission and handles.
#[derive(Debug)]
pub(crate) struct Held {
    pub live: LiveTasks,
    /// Idempotency key → live task; held while a new task goes into `live`.
    keys: Mutex<HashMap<String, TaskId>>,
    /// Taken under a task's cell lock, never the other way round.
    admission: Mutex<Admission>,
    handles: Mutex<HandleTable>,
}

impl Held {
    pub(crate) fn new(max_running: usize) -> Held {
        Held {
            live: LiveTasks::new(),
            keys: Mutex::new(HashMap::new()),
            admission: Mutex::new(Admission::new(max_running)),
            handles: Mutex::new(HandleTable::new(RETIRED_KEEP)),
        }
    }

    pub(crate) fn keys(&self) -> MutexGuard<'_, HashMap<String, TaskId>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn handles(&self) -> MutexGuard<'_, HandleTable> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live cell of a task; a task no longer in memory is terminal.
    pub(crate) fn cell(&self, id: TaskId) -> Result<Arc<TaskCell>, EngineError> {
        self.live.get(&id).ok_or(EngineError::TaskTerminal)
    }

    /// Runs `f` on the task's open run if the task is live and `attempt` is
    /// its current attempt; otherwise does nothing.
    pub(crate) fn with_run(&self, id: TaskId, attempt: u32, f: impl FnOnce(&mut RunState)) {
        if let Some(cell) = self.live.get(&id)
            && let Some(run) = cell.lock().run.as_mut().filter(|r| r.attempt == attempt)
        {
            f(run);
        }
    }

    /// Marks a terminal task done for waiters and drops it from memory.
    /// Its idempotency key leaves memory too: the store answers later
    /// retries, so the key map holds live tasks only. Its handles move to
    /// the handle table's bounded window of retired handles.
    pub(crate) fn retire(&self, cell: &Arc<TaskCell>, id: TaskId) {
        cell.terminal.send_replace(true);
        self.live.remove(&id);
        if let Some(key) = &cell.key {
            self.keys().remove(key);
        }
        self.handles().retire_task(id);
    }

    /// Retires the handles of tasks that are not live: at boot the store
    /// hands back the unexpired handles of finished tasks too.
    pub(crate) fn retire_handles_of_finished(&self) {
        let tasks = self.handles().tasks();
        let finished: Vec<_> = tasks
            .into_iter()
            .filter(|task| self.live.get(task).is_none())
            .collect();
        let mut handles = self.handles();
        for task in finished {
            handles.retire_task(task);
        }
    }

    /// Learns the handle of a task not held here into the retired window
    /// (`Engine::learn_retired_handle`); a held task's is never replaced.
    pub(crate) fn learn_retired_handle(&self, digest: [u8; 32], record: HandleRecord) {
        if self.live.get(&record.task_id).is_some() {
            return;
        }
        self.handles().insert_retired(digest, record);
    }
}
