//! `MemoryOutputStore`: the in-process backend for tests and `--ephemeral` mode.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use uuid::Uuid;

use crate::{
    Clock, Durable, OutputEvent, OutputRecord, OutputStore, Prepared, StoreError, SystemClock,
    records_at,
};

/// Streams held in memory; everything is lost when the process exits.
///
/// Concurrency: one `std::sync::Mutex` guards all streams. Every method takes
/// it, works on plain data and releases it without awaiting, so an async mutex
/// would only add cost. Holding it across the whole append is what makes seq
/// assignment race-free.
///
/// Values are never spilled to blob files: ephemeral mode has no state
/// directory, so large inline values stay inline.
#[derive(Debug)]
pub struct MemoryOutputStore {
    /// task -> attempt -> records, where `records[i].seq == i + 1`.
    streams: Mutex<HashMap<Uuid, BTreeMap<u32, Vec<OutputRecord>>>>,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryOutputStore {
    fn default() -> Self {
        MemoryOutputStore::new()
    }
}

impl MemoryOutputStore {
    /// An empty store stamping records with the system clock.
    pub fn new() -> MemoryOutputStore {
        MemoryOutputStore::with_clock(Arc::new(SystemClock))
    }

    /// An empty store stamping records with `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryOutputStore {
        MemoryOutputStore {
            streams: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// Locks the streams. No code path panics while holding the lock, so a
    /// poisoned lock still guards consistent data and is used as is.
    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, BTreeMap<u32, Vec<OutputRecord>>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl OutputStore for MemoryOutputStore {
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        Ok(Prepared {
            events,
            encoded: Vec::new(),
            pending: Vec::new(),
            created: Vec::new(),
        })
    }

    fn append_at(
        &self,
        task: Uuid,
        attempt: u32,
        first_seq: u64,
        producer: &str,
        prepared: Prepared,
    ) -> (Vec<OutputRecord>, Durable) {
        let ts_ms = self.clock.now_ms();
        let records = records_at(
            task,
            attempt,
            first_seq,
            ts_ms,
            producer,
            prepared.into_parts().0,
        );
        let mut streams = self.lock();
        let stream = streams.entry(task).or_default().entry(attempt).or_default();
        let outcome = if stream.len() as u64 + 1 == first_seq {
            stream.extend(records.iter().cloned());
            Ok(())
        } else {
            Err(StoreError::Io(std::io::Error::other(format!(
                "seq {first_seq} does not follow the stream's last seq {}",
                stream.len()
            ))))
        };
        (records, Box::pin(std::future::ready(outcome)))
    }

    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
        Ok(self
            .lock()
            .get(&task)
            .and_then(|attempts| attempts.get(&attempt))
            .map_or(0, |stream| stream.len() as u64))
    }

    async fn append(
        &self,
        task: Uuid,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut streams = self.lock();
        let stream = streams.entry(task).or_default().entry(attempt).or_default();
        let ts_ms = self.clock.now_ms();
        let first = stream.len() as u64 + 1;
        let records = records_at(task, attempt, first, ts_ms, producer, events);
        stream.extend(records.iter().cloned());
        Ok(records)
    }

    async fn tail(
        &self,
        task: Uuid,
        attempt: u32,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        let streams = self.lock();
        let Some(stream) = streams
            .get(&task)
            .and_then(|attempts| attempts.get(&attempt))
        else {
            return Ok(Vec::new());
        };
        // seq n lives at index n - 1, so records after `after_seq` start at index `after_seq`.
        let start = usize::try_from(after_seq).unwrap_or(usize::MAX);
        Ok(stream
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take(limit)
            .cloned()
            .collect())
    }

    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError> {
        let streams = self.lock();
        Ok(streams
            .get(&task)
            .and_then(|attempts| attempts.get(&attempt))
            .and_then(|stream| stream.iter().rev().find(|record| record.event.is_final()))
            .cloned())
    }

    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
        let streams = self.lock();
        Ok(streams
            .get(&task)
            .map(|attempts| attempts.keys().copied().collect())
            .unwrap_or_default())
    }

    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
        let mut streams = self.lock();
        let mut removed = 0u64;
        streams.retain(|_, attempts| {
            let newest = attempts
                .values()
                .flatten()
                .map(|record| record.ts_ms)
                .max()
                .unwrap_or(0);
            if newest < before_ms {
                removed += attempts
                    .values()
                    .map(|stream| stream.len() as u64)
                    .sum::<u64>();
                false
            } else {
                true
            }
        });
        Ok(removed)
    }

    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
        let mut streams = self.lock();
        let removed = tasks
            .iter()
            .filter_map(|task| streams.remove(task))
            .flat_map(|attempts| attempts.into_values())
            .map(|stream| stream.len() as u64)
            .sum();
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_store_conformance_suite() {
        let clock = Arc::new(crate::ManualClock::new(1_000));
        let store = Arc::new(MemoryOutputStore::with_clock(clock.clone()));
        conformance::run_all(store, &clock).await;
    }

    #[tokio::test]
    async fn keeps_large_values_inline() {
        let store = MemoryOutputStore::new();
        let big = serde_json::Value::String("x".repeat(1 << 20));
        let records = store
            .append(
                Uuid::from_u128(1),
                1,
                "w",
                vec![OutputEvent::inline_final(big.clone(), true)],
            )
            .await
            .unwrap();
        assert_eq!(records[0].event, OutputEvent::inline_final(big, true));
    }
}
