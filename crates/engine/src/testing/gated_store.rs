//! A memory task store with gates a test opens and closes: every write
//! fails while `fail_writes` is set, waits while `hold_writes` is set, and
//! every idempotency-key claim waits while `hold_claims` is set. The first
//! stands for a disk or a database that refuses; the others for the round
//! trips to a shared database, the awaits where a caller that goes away
//! cuts a verb short.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use swarmd_output_store::StoreError;
use tokio::sync::watch;

use crate::audit::AuditRecord;
use crate::event::EventRecord;
use crate::ids::{RunId, TaskId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use crate::store::{
    Done, KeyClaim, LiveSnapshot, MemoryTaskStore, PostedFinal, TaskFilter, TaskListing, TaskStore,
    WriteOp,
};
use crate::task::{AttemptRecord, Task, TaskStatus};

/// A [`MemoryTaskStore`] behind gates.
#[derive(Debug)]
pub struct GatedStore {
    inner: MemoryTaskStore,
    failing: AtomicBool,
    held: watch::Sender<bool>,
    writes: Mutex<HeldWrites>,
}

/// Writes waiting at the gate, in submission order.
#[derive(Default)]
struct HeldWrites {
    on: bool,
    queue: Vec<(Vec<WriteOp>, Done)>,
}

impl std::fmt::Debug for HeldWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldWrites")
            .field("on", &self.on)
            .field("queued", &self.queue.len())
            .finish()
    }
}

impl Default for GatedStore {
    fn default() -> Self {
        GatedStore {
            inner: MemoryTaskStore::new(),
            failing: AtomicBool::new(false),
            held: watch::Sender::new(false),
            writes: Mutex::default(),
        }
    }
}

impl GatedStore {
    /// Every write fails (`StoreError::Io`) while `on`.
    pub fn fail_writes(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    /// Every key claim waits while `on`; those waiting go on once it is
    /// set off.
    pub fn hold_claims(&self, on: bool) {
        self.held.send_replace(on);
    }

    /// Every write waits while `on`; once it is set off, those waiting go
    /// on in order (and fail if `fail_writes` is on then).
    pub fn hold_writes(&self, on: bool) {
        if on {
            self.held_writes().on = true;
            return;
        }
        // Writes submitted meanwhile queue behind these; none is written
        // under the lock, as a write's answer may submit the next.
        loop {
            let queued = {
                let mut writes = self.held_writes();
                if writes.queue.is_empty() {
                    writes.on = false;
                    return;
                }
                std::mem::take(&mut writes.queue)
            };
            for (batch, done) in queued {
                self.write(batch, done);
            }
        }
    }

    fn held_writes(&self) -> std::sync::MutexGuard<'_, HeldWrites> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many writes wait at the gate now.
    pub fn writes_waiting(&self) -> usize {
        self.held_writes().queue.len()
    }

    fn write(&self, batch: Vec<WriteOp>, done: Done) {
        if self.failing.load(Ordering::SeqCst) {
            let disk = std::io::Error::other("disk unavailable");
            done(Err(StoreError::Io(disk)));
        } else {
            self.inner.submit(batch, done);
        }
    }

    /// Whether a claim is waiting at the gate now.
    pub fn claim_waiting(&self) -> bool {
        *self.held.borrow() && self.held.receiver_count() > 0
    }
}

#[async_trait]
impl TaskStore for GatedStore {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        {
            let mut writes = self.held_writes();
            if writes.on {
                writes.queue.push((batch, done));
                return;
            }
        }
        self.write(batch, done);
    }
    async fn claim_key(&self, key: &str, task: TaskId) -> Result<KeyClaim, StoreError> {
        let mut held = self.held.subscribe();
        // The sender lives as long as the store, so the wait ends only
        // when the gate opens.
        let _ = held.wait_for(|on| !*on).await;
        self.inner.claim_key(key, task).await
    }
    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        self.inner.task(id).await
    }
    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        self.inner.attempts(id).await
    }
    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError> {
        self.inner.list_page(filter, max_bytes).await
    }
    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError> {
        self.inner.count_by_agent(status, window).await
    }
    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        self.inner.task_for_key(key).await
    }
    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError> {
        self.inner.posted_final(task, attempt).await
    }
    async fn events_after(&self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events_after(after, limit).await
    }
    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.audit(task, limit).await
    }
    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
        self.inner.load_live(now_secs).await
    }
    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        self.inner.run(id).await
    }
    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError> {
        self.inner.run_for_key(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.open_runs().await
    }
    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        self.inner.flow_doc(hash).await
    }
    async fn prune(&self, before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        self.inner.prune(before_ms).await
    }
    async fn healthcheck(&self) -> Result<(), StoreError> {
        self.inner.healthcheck().await
    }
}
