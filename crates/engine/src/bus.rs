//! The event bus: the one place that stamps events with the global sequence
//! number, appends them to the durable log, and broadcasts them.
//!
//! Sequence numbers are assigned and the write is queued under one short
//! std `Mutex`, so log order is seq order; the broadcast happens in the
//! store's commit callback, which runs in submission order, so subscribers
//! see every event exactly when and in the order it became durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::clock::Clock;
use crate::event::{Event, EventRecord};
use crate::ids::SessionId;
use crate::store::{Done, TaskStore, WriteOp};

/// How many events a slow subscriber may fall behind before it must resume
/// from the durable log.
pub(crate) const BROADCAST_CAPACITY: usize = 8192;

#[derive(Debug)]
pub(crate) struct EventBus {
    next_seq: Mutex<u64>,
    /// The highest seq that is durable (and broadcast): a reader that lists
    /// tasks after reading it and then follows the log from it misses nothing.
    durable_seq: Arc<AtomicU64>,
    tx: broadcast::Sender<Arc<EventRecord>>,
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
}

impl EventBus {
    pub(crate) fn new(store: Arc<dyn TaskStore>, clock: Arc<dyn Clock>, last_seq: u64) -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        EventBus {
            next_seq: Mutex::new(last_seq + 1),
            durable_seq: Arc::new(AtomicU64::new(last_seq)),
            tx,
            store,
            clock,
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.tx.subscribe()
    }

    /// Resets the next sequence number (recovery, before anything is published).
    pub(crate) fn resume_after(&self, last_seq: u64) {
        let mut next = self.next_seq.lock().unwrap_or_else(|e| e.into_inner());
        *next = (*next).max(last_seq + 1);
        self.durable_seq.fetch_max(last_seq, Ordering::Relaxed);
    }

    /// The seq of the last durable event (0 when the log is empty).
    pub(crate) fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    /// Queues `ops` plus `events` as one atomic batch. Once it is durable the
    /// events are broadcast and `done` runs.
    pub(crate) fn submit(
        &self,
        mut ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
        done: Option<Done>,
    ) {
        if events.is_empty() {
            let done = done.unwrap_or_else(|| Box::new(log_failure));
            self.store.submit(ops, done);
            return;
        }
        let ts_ms = self.clock.now_ms();
        let mut next = self.next_seq.lock().unwrap_or_else(|e| e.into_inner());
        let records: Vec<Arc<EventRecord>> = events
            .into_iter()
            .map(|(session, event)| {
                let seq = *next;
                *next += 1;
                Arc::new(EventRecord {
                    seq,
                    ts_ms,
                    session,
                    event,
                })
            })
            .collect();
        ops.push(WriteOp::Events(
            records.iter().map(|r| EventRecord::clone(r)).collect(),
        ));
        let tx = self.tx.clone();
        let durable_seq = self.durable_seq.clone();
        self.store.submit(
            ops,
            Box::new(move |res| {
                if res.is_ok() {
                    if let Some(last) = records.last() {
                        durable_seq.fetch_max(last.seq, Ordering::Release);
                    }
                    for record in records {
                        // No subscribers is fine: the log has it.
                        let _ = tx.send(record);
                    }
                }
                match done {
                    Some(done) => done(res),
                    None => log_failure(res),
                }
            }),
        );
        drop(next);
    }
}

fn log_failure(res: Result<(), swarmd_output_store::StoreError>) {
    if let Err(error) = res {
        tracing::error!(%error, "store write failed");
    }
}
