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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use swarmd_engine::Engine;

use super::outbox::OutboxFull;
use super::{Session, SessionRegistry};
use crate::ws::frames::ServerFrame;

/// How often sessions that delivered a `task_done` write their watermark.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// A session's `task_done` bookkeeping.
#[derive(Debug)]
pub struct Delivery {
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
    /// (outbox queue id, event seq) of each `task_done` not yet acknowledged.
    pending: VecDeque<(u64, u64)>,
    through: u64,
}

impl Delivery {
    pub(super) fn new(restored: Option<u64>) -> Delivery {
        let through = restored.unwrap_or(0);
        Delivery {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                through,
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
        let now = match state.pending.front() {
            Some((_, seq)) => seq.saturating_sub(1),
            None => routed,
        };
        state.through = state.through.max(now);
        state.through
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

    /// Moves every session's watermark; writes those that delivered a
    /// `task_done` since their last write, or all that moved when `all`.
    pub(super) async fn checkpoint_delivery(&self, engine: &Engine, all: bool) {
        let routed = self.routed_through();
        for session in self.all() {
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
    fn the_watermark_never_moves_back() {
        let delivery = Delivery::new(Some(30));
        assert_eq!(delivery.advance(0, 12), 30);
        assert!(delivery.delivered_before_restart(30));
        assert!(!delivery.delivered_before_restart(31));
    }
}
