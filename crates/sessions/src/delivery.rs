//! At-least-once `task_done` across restarts: each session keeps a
//! watermark, `done_through`, the event seq through which every `task_done`
//! of its tasks has reached one of its sockets, and writes it with its
//! record. At boot the event router replays the durable event log from the
//! lowest restored watermark, so a `task_done` that was parked, in flight,
//! or not yet routed when the daemon died is sent again. A client may see a
//! `task_done` twice and drops the repeat by (task, attempt).
//!
//! The watermark is the seq before the oldest `task_done` still in the
//! outbox, or, with none there, the router's position: every event up to it
//! was routed and nothing for this session is waiting. Active sessions write
//! it every second; the idle sweep writes the others.
//!
//! On a cluster only a session's home moves and writes its watermark: a
//! node that holds a copy of a session homed elsewhere routes none of its
//! events, so its router's position says nothing about what reached the
//! session. A session that moves to this node (its socket attached here,
//! or its home died and this node adopted it) takes the watermark its
//! stored record holds, the one its previous home wrote (`rewind`), and
//! the router routes its events after it again; the watermark stays there
//! until that catch-up has queued them (`CatchUps`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use swarmd_engine::Engine;

use super::outbox::OutboxFull;
use super::{Session, SessionRegistry};
use crate::frames::ServerFrame;

/// How often sessions that delivered a `task_done` write their watermark.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// A session's `task_done` bookkeeping.
#[derive(Debug)]
pub(crate) struct Delivery {
    /// Lock order: this, then the session's outbox (`notify_done` queues
    /// the frame under it, so a frame's outbox id and its event seq are
    /// tracked together); nothing takes this under the outbox's lock, and
    /// `advance` reads the outbox before it takes this.
    state: Mutex<State>,
    /// `task_done` frames at or below this seq reached a socket before the
    /// restart that restored the session; `None` for a record without one.
    restored: Option<u64>,
    /// The watermark as last written to the store.
    persisted: AtomicU64,
    /// Set when a tracked frame was delivered since the last write.
    delivered: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// (outbox queue id, event seq) of each `task_done` not yet
    /// acknowledged, in queue order (a catch-up queues older seqs after
    /// newer ones).
    pending: VecDeque<(u64, u64)>,
    through: u64,
    /// Catch-ups of this session the router has not finished: while there
    /// is one, the watermark does not move.
    catching_up: usize,
}

impl Delivery {
    pub(super) fn new(restored: Option<u64>) -> Delivery {
        let through = restored.unwrap_or(0);
        Delivery {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                through,
                catching_up: 0,
            }),
            restored,
            persisted: AtomicU64::new(through),
            delivered: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the `task_done` of event `seq` reached a socket before the
    /// restart (so the replay skips it).
    pub(crate) fn delivered_before_restart(&self, seq: u64) -> bool {
        self.restored.is_some_and(|through| seq <= through)
    }

    /// The watermark now.
    pub(super) fn through(&self) -> u64 {
        self.lock().through
    }

    /// Moves the watermark: frames up to outbox id `acked` were sent, and
    /// every event up to `routed` was routed. Returns the new watermark.
    fn advance(&self, acked: u64, routed: u64) -> u64 {
        let mut state = self.lock();
        while state.pending.front().is_some_and(|(id, _)| *id <= acked) {
            state.pending.pop_front();
            self.delivered.store(true, Ordering::Relaxed);
        }
        if state.catching_up > 0 {
            return state.through;
        }
        let now = match state.pending.iter().map(|(_, seq)| *seq).min() {
            Some(seq) => seq.saturating_sub(1),
            None => routed,
        };
        state.through = state.through.max(now);
        state.through
    }

    /// The session just moved to this node: its watermark becomes `stored`,
    /// the one its record holds (this node's own when the record has none),
    /// and stays there until `caught_up`. What this node still tracked
    /// from an earlier stay is dropped: the catch-up routes it again.
    /// Returns where the catch-up starts.
    pub(super) fn rewind(&self, stored: Option<u64>) -> u64 {
        let mut state = self.lock();
        let from = stored.unwrap_or(state.through);
        state.through = from;
        state.pending.clear();
        state.catching_up += 1;
        self.persisted.store(from, Ordering::Relaxed);
        from
    }

    /// The router queued what one catch-up of the session routed again.
    pub(super) fn caught_up(&self) {
        let mut state = self.lock();
        state.catching_up = state.catching_up.saturating_sub(1);
    }

    /// Records that the watermark `through` is stored.
    pub(super) fn persisted(&self, through: u64) {
        self.persisted.fetch_max(through, Ordering::Relaxed);
    }
}

impl Session {
    /// Queues the `task_done` of event `seq` and tracks its delivery.
    pub(crate) fn notify_done(&self, frame: &ServerFrame, seq: u64) -> Result<(), OutboxFull> {
        let mut state = self.delivery.lock();
        let id = self.notify(frame)?;
        state.pending.push_back((id, seq));
        Ok(())
    }
}

impl SessionRegistry {
    /// The seq of the last event the router has routed.
    pub(crate) fn routed_through(&self) -> u64 {
        self.routed.load(Ordering::Acquire)
    }

    /// Called by the router once it has routed the event `seq`.
    pub(crate) fn routed(&self, seq: u64) {
        self.routed.fetch_max(seq, Ordering::AcqRel);
    }

    /// Where the router's replay starts: the lowest watermark of the
    /// restored sessions that have one; `None` when none has.
    pub(crate) fn replay_from(&self) -> Option<u64> {
        self.all().iter().filter_map(|s| s.delivery.restored).min()
    }

    /// Moves the watermark of every session homed here; writes those that
    /// delivered a `task_done` since their last write, or all that moved
    /// when `all`. A copy of a session homed elsewhere keeps the watermark
    /// it was read with: this node routed none of its events.
    pub(super) async fn checkpoint_delivery(&self, engine: &Engine, all: bool) {
        let routed = self.routed_through();
        for session in self.all() {
            if !session.is_home() {
                continue;
            }
            let delivery = &session.delivery;
            let through = delivery.advance(session.outbox.acked_through(), routed);
            let moved = through > delivery.persisted.load(Ordering::Relaxed);
            if moved
                && (all || delivery.delivered.swap(false, Ordering::Relaxed))
                && let Err(error) = session.persist(engine).await
            {
                tracing::warn!(sid = %session.sid, %error, "cannot persist the task_done watermark");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_stops_before_the_oldest_undelivered_task_done() {
        let delivery = Delivery::new(Some(0));
        delivery.lock().pending.extend([(3, 10), (5, 14)]);
        assert_eq!(delivery.advance(2, 20), 9);
        assert_eq!(delivery.advance(3, 20), 13);
        assert_eq!(delivery.advance(9, 20), 20);
        assert!(delivery.delivered.load(Ordering::Relaxed));
    }

    #[test]
    fn a_task_done_queued_out_of_seq_order_holds_the_watermark_below_it() {
        let delivery = Delivery::new(Some(0));
        // A catch-up queued seq 10 after the live router queued seq 14.
        delivery.lock().pending.extend([(3, 14), (5, 10)]);
        assert_eq!(delivery.advance(3, 20), 9);
        assert_eq!(delivery.advance(5, 20), 20);
    }

    #[test]
    fn a_move_here_takes_the_stored_watermark_and_holds_it_until_caught_up() {
        let delivery = Delivery::new(Some(5));
        assert_eq!(delivery.advance(0, 40), 40);
        delivery.lock().pending.push_back((2, 41));
        // The previous home stored 12: the catch-up starts there, and no
        // checkpoint moves past it while the catch-up runs.
        assert_eq!(delivery.rewind(Some(12)), 12);
        assert_eq!(delivery.through(), 12);
        assert_eq!(delivery.advance(9, 60), 12);
        delivery.lock().pending.push_back((10, 30));
        delivery.caught_up();
        assert_eq!(delivery.advance(9, 60), 29);
        assert_eq!(delivery.advance(10, 60), 60);
        // A record without a watermark: the catch-up starts from this
        // node's own.
        assert_eq!(delivery.rewind(None), 60);
        delivery.caught_up();
    }

    #[test]
    fn the_watermark_never_moves_back() {
        let delivery = Delivery::new(Some(30));
        assert_eq!(delivery.advance(0, 12), 30);
        assert!(delivery.delivered_before_restart(30));
        assert!(!delivery.delivered_before_restart(31));
    }
}
