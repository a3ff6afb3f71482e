//! An output store whose steps a test holds: encodes wait at one gate,
//! blob stores wait (after storing) at another, and Finals become durable
//! only once a third settles them, as stored or as a fenced node's write.
//! An output or a result post encodes its events after it claimed what it
//! writes and stores its blobs after it counted them, so these gates are
//! where a post whose caller goes away is cut short.

use std::sync::Arc;

use async_trait::async_trait;
use swarmd_output_store::{
    BlobSweep, Durable, MemoryOutputStore, OutputEvent, OutputRecord, OutputStore, Prepared,
    StoreError,
};
use tokio::sync::watch;
use uuid::Uuid;

/// An output store (memory unless [`GatedOutputs::over`] names another)
/// behind gates on `encode`, `store_blobs` and the durability of Finals.
#[derive(Debug)]
pub struct GatedOutputs {
    inner: Arc<dyn OutputStore>,
    encodes: watch::Sender<bool>,
    blob_stores: watch::Sender<bool>,
    /// `None` holds every Final's durability; `Some(ok)` settles them.
    finals: watch::Sender<Option<bool>>,
    /// How many Finals were queued.
    finals_queued: watch::Sender<usize>,
}

impl Default for GatedOutputs {
    fn default() -> Self {
        GatedOutputs::over(Arc::new(MemoryOutputStore::new()))
    }
}

/// Waits while `gate` is on. The sender lives as long as the store, so
/// the wait ends only when the gate opens.
async fn pass(gate: &watch::Sender<bool>) {
    let mut held = gate.subscribe();
    let _ = held.wait_for(|on| !*on).await;
}

/// Whether something waits at `gate` now.
fn waiting(gate: &watch::Sender<bool>) -> bool {
    *gate.borrow() && gate.receiver_count() > 0
}

impl GatedOutputs {
    /// `inner` behind gates that are all open, Finals' included.
    pub fn over(inner: Arc<dyn OutputStore>) -> Self {
        GatedOutputs {
            inner,
            encodes: watch::Sender::new(false),
            blob_stores: watch::Sender::new(false),
            finals: watch::Sender::new(Some(true)),
            finals_queued: watch::Sender::new(0),
        }
    }

    /// Every encode waits while `on`; those waiting go on once it is off.
    pub fn hold_encodes(&self, on: bool) {
        self.encodes.send_replace(on);
    }

    /// Whether an encode is waiting at the gate now.
    pub fn encode_waiting(&self) -> bool {
        waiting(&self.encodes)
    }

    /// Every blob store, its blobs stored, waits while `on` before it
    /// returns.
    pub fn hold_blob_stores(&self, on: bool) {
        self.blob_stores.send_replace(on);
    }

    /// Whether a blob store is waiting at the gate now.
    pub fn blob_store_waiting(&self) -> bool {
        waiting(&self.blob_stores)
    }

    /// `None`: every Final queued from now on stays not yet durable;
    /// `Some(true)`: they are durable; `Some(false)`: their writes fail as a
    /// fenced node's do.
    pub fn settle_finals(&self, settled: Option<bool>) {
        self.finals.send_replace(settled);
    }

    /// How many Finals were queued so far.
    pub fn finals_queued(&self) -> watch::Receiver<usize> {
        self.finals_queued.subscribe()
    }
}

#[async_trait]
impl OutputStore for GatedOutputs {
    async fn append(
        &self,
        task: Uuid,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        self.inner.append(task, attempt, producer, events).await
    }
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        self.inner.prepare(events).await
    }
    async fn encode(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        pass(&self.encodes).await;
        self.inner.encode(events).await
    }
    async fn store_blobs(&self, prepared: Prepared) -> Result<Prepared, StoreError> {
        let prepared = self.inner.store_blobs(prepared).await?;
        pass(&self.blob_stores).await;
        Ok(prepared)
    }
    async fn discard_blobs(&self, prepared: Prepared) -> Result<u64, StoreError> {
        self.inner.discard_blobs(prepared).await
    }
    fn append_at(
        &self,
        task: Uuid,
        attempt: u32,
        first_seq: u64,
        producer: &str,
        prepared: Prepared,
    ) -> (Vec<OutputRecord>, Durable) {
        let is_final = prepared.events().iter().any(OutputEvent::is_final);
        let (records, durable) = self
            .inner
            .append_at(task, attempt, first_seq, producer, prepared);
        if !is_final {
            return (records, durable);
        }
        self.finals_queued.send_modify(|n| *n += 1);
        let mut settled = self.finals.subscribe();
        let gated: Durable = Box::pin(async move {
            durable.await?;
            match settled.wait_for(Option::is_some).await.map(|s| *s) {
                Ok(Some(true)) => Ok(()),
                _ => Err(StoreError::Fenced),
            }
        });
        (records, gated)
    }
    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
        self.inner.last_seq(task, attempt).await
    }
    async fn tail(
        &self,
        task: Uuid,
        attempt: u32,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        self.inner.tail(task, attempt, after_seq, limit).await
    }
    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError> {
        self.inner.last_final(task, attempt).await
    }
    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
        self.inner.list_attempts(task).await
    }
    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
        self.inner.prune(before_ms).await
    }
    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
        self.inner.forget(tasks).await
    }
    async fn sweep_blobs(&self, grace: std::time::Duration) -> Result<BlobSweep, StoreError> {
        self.inner.sweep_blobs(grace).await
    }
    async fn read_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.read_blob(sha256).await
    }
}
