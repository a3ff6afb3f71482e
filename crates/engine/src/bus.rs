//! The event bus: the one place that numbers events with the global sequence
//! number, appends them to the durable log, and broadcasts them.
//!
//! On a store that takes the seqs it is given (memory, SQLite), seqs are
//! assigned and the write is queued under one short std `Mutex`, so log
//! order is seq order; the broadcast happens in the store's commit
//! callback, which runs in submission order, so subscribers see every event
//! exactly when and in the order it became durable. A batch that fails
//! leaves its seqs unused, and the broadcast goes on after them.
//!
//! On a store that numbers events at commit (PostgreSQL, shared by the
//! nodes of a cluster), the bus hands events unnumbered and learns their
//! first seq in the commit callback. The log then holds other nodes' events
//! between this node's, so broadcasting goes through a `Sequencer`: it
//! broadcasts strictly in seq order, without gaps; this node's committed
//! events are offered by the callback, everything else by the event pump
//! (the server's, following the committed log), which the sequencer wakes
//! when it holds events past a gap.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, broadcast};

use crate::clock::Clock;
use crate::event::{Event, EventRecord, Logged};
use crate::ids::SessionId;
use crate::store::{Done, TaskStore, WriteOp};

/// How many events a slow subscriber may fall behind before it must resume
/// from the durable log.
pub(crate) const BROADCAST_CAPACITY: usize = 8192;

#[derive(Debug)]
pub(crate) struct EventBus {
    next_seq: Mutex<u64>,
    sequencer: Arc<Sequencer>,
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    /// Subscribers that need every event (`Follower`s held).
    followers: Arc<AtomicUsize>,
}

/// Held by a subscriber that needs every event, not only the kinds the
/// node acts on (`Event::ACTED_ON`): a client's event feed or stream.
/// While one is held, a cluster's event pump reads other nodes' events
/// whole; a subscriber must still read the log when the seqs it receives
/// jump (a record stepped past before it started following).
#[derive(Debug)]
pub struct Follower {
    count: Arc<AtomicUsize>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Broadcasts committed events in seq order without gaps, whoever offers them.
#[derive(Debug)]
pub(crate) struct Sequencer {
    state: Mutex<Pending>,
    /// The highest seq that is durable and broadcast: a reader that lists
    /// tasks after reading it and then follows the log from it misses nothing.
    durable_seq: AtomicU64,
    tx: broadcast::Sender<Arc<EventRecord>>,
    /// Fired when events wait past a gap that only the log can fill.
    gap: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    /// The seq to broadcast next.
    next: u64,
    /// Committed events after a gap, by seq; `None` for one only stepped
    /// past (the pump read its seq alone).
    waiting: BTreeMap<u64, Option<Arc<EventRecord>>>,
}

impl Sequencer {
    fn new(last_seq: u64) -> Sequencer {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Sequencer {
            state: Mutex::new(Pending {
                next: last_seq + 1,
                waiting: BTreeMap::new(),
            }),
            durable_seq: AtomicU64::new(last_seq),
            tx,
            gap: Notify::new(),
        }
    }

    /// Broadcasts `records` (committed events, any order, seen before or
    /// not) once every lower seq has been: the ones at or below the last
    /// broadcast are dropped, the ones after a gap wait for it.
    pub(crate) fn offer(&self, records: impl IntoIterator<Item = Arc<EventRecord>>) {
        self.offer_slots(records.into_iter().map(|record| (record.seq, Some(record))));
    }

    /// As `offer`, for seqs with their record or without one: a seq
    /// without a record takes its place in the order and is stepped past,
    /// not broadcast (a subscriber that sees the jump reads the log).
    fn offer_slots(&self, slots: impl IntoIterator<Item = (u64, Option<Arc<EventRecord>>)>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        let first = state.next;
        for (seq, record) in slots {
            if seq < state.next {
                continue;
            }
            // The common case, a node's own events in order with nothing
            // waiting, goes straight out without the map.
            if seq == state.next && state.waiting.is_empty() {
                state.next += 1;
                if let Some(record) = record {
                    // No subscribers is fine: the log has it.
                    let _ = self.tx.send(record);
                }
            } else {
                // A whole record replaces a bare seq, never the reverse.
                let slot = state.waiting.entry(seq).or_default();
                if record.is_some() {
                    *slot = record;
                }
            }
        }
        while let Some(record) = state.waiting.remove(&state.next) {
            state.next += 1;
            if let Some(record) = record {
                // No subscribers is fine: the log has it.
                let _ = self.tx.send(record);
            }
        }
        if state.next != first {
            self.durable_seq.store(state.next - 1, Ordering::Release);
        }
        if !state.waiting.is_empty() {
            self.gap.notify_one();
        }
    }

    /// Moves past `last_seq` (recovery, before anything is published; or
    /// events the log cannot give), then broadcasts what waited behind it.
    fn resume_after(&self, last_seq: u64) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.next = state.next.max(last_seq + 1);
            let next = state.next;
            state.waiting.retain(|seq, _| *seq >= next);
            self.durable_seq.fetch_max(last_seq, Ordering::Release);
        }
        self.offer(std::iter::empty());
    }
}

impl EventBus {
    pub(crate) fn new(store: Arc<dyn TaskStore>, clock: Arc<dyn Clock>, last_seq: u64) -> Self {
        EventBus {
            next_seq: Mutex::new(last_seq + 1),
            sequencer: Arc::new(Sequencer::new(last_seq)),
            store,
            clock,
            followers: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.sequencer.tx.subscribe()
    }

    /// Resets the next sequence number (recovery, before anything is published).
    pub(crate) fn resume_after(&self, last_seq: u64) {
        let mut next = self.next_seq.lock().unwrap_or_else(|e| e.into_inner());
        *next = (*next).max(last_seq + 1);
        self.sequencer.resume_after(last_seq);
    }

    /// The seq of the last durable event (0 when the log is empty).
    pub(crate) fn durable_seq(&self) -> u64 {
        self.sequencer.durable_seq.load(Ordering::Acquire)
    }

    /// The log as the pump read it, for the sequencer to broadcast in
    /// order: whole records go out, bare seqs are stepped past.
    pub(crate) fn offer_log(&self, entries: Vec<Logged>) {
        self.sequencer
            .offer_slots(entries.into_iter().map(|entry| match entry {
                Logged::Whole(record) => (record.seq, Some(Arc::new(record))),
                Logged::Seq(seq) => (seq, None),
            }));
    }

    /// Counts a subscriber that needs every event until the guard drops.
    pub(crate) fn follow(&self) -> Follower {
        self.followers.fetch_add(1, Ordering::AcqRel);
        Follower {
            count: Arc::clone(&self.followers),
        }
    }

    /// Whether any subscriber needs every event now.
    pub(crate) fn followed(&self) -> bool {
        self.followers.load(Ordering::Acquire) > 0
    }

    /// Resolves when committed events wait past a gap in the log.
    pub(crate) async fn gap(&self) {
        self.sequencer.gap.notified().await;
    }

    /// Whether committed events wait past a gap in the log now.
    pub(crate) fn gapped(&self) -> bool {
        let state = self
            .sequencer
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        !state.waiting.is_empty()
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
        if self.store.numbers_events() {
            self.submit_numbered(ops, events, ts_ms, done);
            return;
        }
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
        let sequencer = Arc::clone(&self.sequencer);
        self.store.submit(
            ops,
            Box::new(move |res| {
                match (&res, records.last()) {
                    (Ok(()), _) => sequencer.offer(records),
                    // The batch's seqs stay unused: a hole the log never
                    // fills, so the events after it must not wait for it.
                    (Err(_), Some(last)) => sequencer.resume_after(last.seq),
                    (Err(_), None) => {}
                }
                match done {
                    Some(done) => done(res),
                    None => log_failure(res),
                }
            }),
        );
        drop(next);
    }

    /// The events go unnumbered (seq 0); the commit gives them their seqs.
    fn submit_numbered(
        &self,
        mut ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
        ts_ms: u64,
        done: Option<Done>,
    ) {
        let records: Vec<EventRecord> = events
            .into_iter()
            .map(|(session, event)| EventRecord {
                seq: 0,
                ts_ms,
                session,
                event,
            })
            .collect();
        ops.push(WriteOp::Events(records.clone()));
        let sequencer = Arc::clone(&self.sequencer);
        self.store.submit_numbered(
            ops,
            Box::new(move |res| {
                let res = res.map(|first| {
                    sequencer.offer(records.into_iter().zip(first..).map(|(mut record, seq)| {
                        record.seq = seq;
                        Arc::new(record)
                    }));
                });
                match done {
                    Some(done) => done(res),
                    None => log_failure(res),
                }
            }),
        );
    }
}

fn log_failure(res: Result<(), swarmd_output_store::StoreError>) {
    if let Err(error) = res {
        tracing::error!(%error, "store write failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TaskId;

    fn record(seq: u64) -> Arc<EventRecord> {
        Arc::new(EventRecord {
            seq,
            ts_ms: seq,
            session: None,
            event: Event::TaskQueued {
                task_id: TaskId::new(),
            },
        })
    }

    fn drain(rx: &mut broadcast::Receiver<Arc<EventRecord>>) -> Vec<u64> {
        std::iter::from_fn(|| rx.try_recv().ok().map(|r| r.seq)).collect()
    }

    #[tokio::test]
    async fn the_sequencer_broadcasts_in_seq_order_once_gaps_fill() {
        let sequencer = Sequencer::new(10);
        let mut rx = sequencer.tx.subscribe();
        // This node's events after another node's: they wait, and the pump
        // is woken to fill the gap.
        sequencer.offer([record(13), record(14)]);
        assert!(drain(&mut rx).is_empty());
        assert_eq!(sequencer.durable_seq.load(Ordering::Acquire), 10);
        tokio::time::timeout(std::time::Duration::from_secs(1), sequencer.gap.notified())
            .await
            .expect("a gap wakes the pump");
        // The pump reads the log from 11 on: what it finds again is dropped.
        sequencer.offer([record(11), record(12), record(13), record(14)]);
        assert_eq!(drain(&mut rx), [11, 12, 13, 14]);
        assert_eq!(sequencer.durable_seq.load(Ordering::Acquire), 14);
        sequencer.offer([record(12), record(15)]);
        assert_eq!(drain(&mut rx), [15]);
    }

    #[test]
    fn bare_seqs_keep_their_place_and_are_stepped_past_unsent() {
        let sequencer = Sequencer::new(10);
        let mut rx = sequencer.tx.subscribe();
        // The pump read 12 as a seq only, then this node's callback offers
        // it whole: the record wins while both wait behind 11.
        sequencer.offer_slots([(12, None)]);
        sequencer.offer([record(12)]);
        sequencer.offer_slots([(13, None)]);
        assert!(drain(&mut rx).is_empty());
        sequencer.offer([record(11)]);
        assert_eq!(drain(&mut rx), [11, 12]);
        assert_eq!(sequencer.durable_seq.load(Ordering::Acquire), 13);
        // A record stepped past is not sent when it comes whole later.
        sequencer.offer([record(13)]);
        sequencer.offer_slots([(14, None)]);
        sequencer.offer([record(15)]);
        assert_eq!(drain(&mut rx), [15]);
        // A bare seq never replaces a waiting record.
        sequencer.offer([record(17)]);
        sequencer.offer_slots([(17, None), (16, None)]);
        assert_eq!(drain(&mut rx), [17]);
        assert_eq!(sequencer.durable_seq.load(Ordering::Acquire), 17);
    }

    #[test]
    fn recovery_moves_the_sequencer_past_the_stored_log() {
        let sequencer = Sequencer::new(0);
        let mut rx = sequencer.tx.subscribe();
        sequencer.resume_after(7);
        sequencer.offer([record(7), record(8)]);
        assert_eq!(drain(&mut rx), [8]);
    }

    #[test]
    fn a_failed_batch_leaves_a_hole_the_broadcast_steps_over() {
        let sequencer = Sequencer::new(0);
        let mut rx = sequencer.tx.subscribe();
        sequencer.offer([record(1)]);
        // Seqs 2 and 3 were stamped for a batch that failed.
        sequencer.resume_after(3);
        sequencer.offer([record(4)]);
        assert_eq!(drain(&mut rx), [1, 4]);
    }

    #[test]
    fn events_the_log_cannot_give_are_skipped_and_the_rest_flows() {
        let sequencer = Sequencer::new(3);
        let mut rx = sequencer.tx.subscribe();
        sequencer.offer([record(6), record(7)]);
        assert!(drain(&mut rx).is_empty());
        sequencer.resume_after(5);
        assert_eq!(drain(&mut rx), [6, 7]);
        assert_eq!(sequencer.durable_seq.load(Ordering::Acquire), 7);
    }
}
