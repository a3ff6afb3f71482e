//! A memory output store whose encoding a test holds: every
//! `OutputStore::encode` waits while `hold_encodes` is set. An output or a
//! result post encodes its events after it claimed what it writes, so the
//! gate is where a post whose caller goes away is cut short.

use async_trait::async_trait;
use swarmd_output_store::{
    BlobSweep, Durable, MemoryOutputStore, OutputEvent, OutputRecord, OutputStore, Prepared,
    StoreError,
};
use tokio::sync::watch;
use uuid::Uuid;

/// A [`MemoryOutputStore`] behind a gate on `encode`.
#[derive(Debug)]
pub struct GatedOutputs {
    inner: MemoryOutputStore,
    held: watch::Sender<bool>,
}

impl Default for GatedOutputs {
    fn default() -> Self {
        GatedOutputs {
            inner: MemoryOutputStore::new(),
            held: watch::Sender::new(false),
        }
    }
}

impl GatedOutputs {
    /// Every encode waits while `on`; those waiting go on once it is off.
    pub fn hold_encodes(&self, on: bool) {
        self.held.send_replace(on);
    }

    /// Whether an encode is waiting at the gate now.
    pub fn encode_waiting(&self) -> bool {
        *self.held.borrow() && self.held.receiver_count() > 0
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
        let mut held = self.held.subscribe();
        // The sender lives as long as the store: the wait ends only when
        // the gate opens.
        let _ = held.wait_for(|on| !*on).await;
        self.inner.encode(events).await
    }
    async fn store_blobs(&self, prepared: Prepared) -> Result<Prepared, StoreError> {
        self.inner.store_blobs(prepared).await
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
        self.inner
            .append_at(task, attempt, first_seq, producer, prepared)
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
