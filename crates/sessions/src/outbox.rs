//! A session's outbox (docs/protocol.md, Disconnects and parking): the ordered queue of
//! server-originated frames. While a socket is attached its writer drains the queue; while not,
//! frames wait here ("parked") and are delivered in order on reconnect.
//!
//! A frame leaves the queue only when a writer acknowledges it after sending,
//! so a socket that dies mid-batch loses nothing: the next socket gets the
//! unacknowledged frames again (delivery is at least once; frames with a
//! `seq` or a `req_id` let the client drop repeats).
//!
//! Bound: at most `park_max` frames. A full outbox evicts the oldest
//! `task_event` first (resumable with `subscribe … after_seq`), then the
//! oldest other notice (`task_done`, `hook_after`, `cancel`, …). Requests
//! (`spawn`, `ask`, `hook_before`) are never evicted: when the queue holds
//! nothing else, a new frame is refused (`OutboxFull`) and a request's caller
//! gets the error. Every evicted or refused frame is counted and reported to
//! the client by one `error` frame (`frames_dropped`) before the next batch.
//!
//! A reservation holds a slot in the order for a frame not known yet (a
//! `task_accepted` while `spawn_task` runs), and nothing after the slot is
//! delivered until it is filled or dropped.
//!
//! Concurrency: one std `Mutex` over the queue, never held across an
//! `.await`; writers wait on a `Notify` with the enable-then-check pattern so
//! a push between the check and the wait is never missed.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use axum::extract::ws::Utf8Bytes;
use swarmd_engine::WorkerCredential;
use swarmd_spawner::operator::SpawnFrame;
use tokio::sync::{Notify, watch};

/// How a queued frame may be treated when the outbox is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// `spawn`, `ask`, `hook_before`: someone waits for the reply; never evicted.
    Request,
    /// `task_event`: evicted first, the client can resume it by `seq`.
    Resumable,
    /// Everything else.
    Notice,
}

/// A frame waiting for delivery.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// Encoded when queued.
    Text { class: FrameClass, text: Utf8Bytes },
    /// A `spawn`: encoded at delivery, after re-minting a token near expiry.
    Spawn(Box<ParkedSpawn>),
}

/// A `spawn` frame and the `req_id` its reply will carry.
#[derive(Debug, Clone)]
pub struct ParkedSpawn {
    pub req_id: String,
    pub frame: SpawnFrame,
}

impl Outgoing {
    pub fn class(&self) -> FrameClass {
        match self {
            Outgoing::Text { class, .. } => *class,
            Outgoing::Spawn(_) => FrameClass::Request,
        }
    }
}

/// The outbox refused a frame: it is full of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the session's outbox is full ({0} frames)")]
pub struct OutboxFull(pub usize);

/// Why the server closes a session's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// A newer socket attached to the same session.
    Replaced,
    /// The session was deleted.
    Deleted,
    /// The session expired after being idle.
    Expired,
    /// The daemon is stopping.
    ShuttingDown,
}

/// What a writer takes: frames in order, each with its queue id.
#[derive(Debug, Default)]
pub struct Batch {
    pub frames: Vec<(u64, Outgoing)>,
    /// Frames dropped since the last report.
    pub dropped: u64,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.dropped == 0
    }
}

/// The socket attached right now: its connection id and its close signal.
#[derive(Debug)]
pub struct Attachment {
    pub conn: u64,
    pub close: watch::Receiver<Option<CloseReason>>,
}

#[derive(Debug)]
pub struct Outbox {
    /// A leaf lock: nothing else is taken under it (a session's delivery
    /// state is taken before it, `Delivery`).
    state: Mutex<State>,
    notify: Notify,
    limit: usize,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<(u64, Outgoing)>,
    /// The highest id acknowledged by a writer.
    acked: u64,
    next_id: u64,
    reserved: BTreeSet<u64>,
    dropped: u64,
    attached: Option<(u64, watch::Sender<Option<CloseReason>>)>,
    next_conn: u64,
}

impl Outbox {
    /// An outbox holding at most `limit` frames (at least one).
    pub fn new(limit: usize) -> Outbox {
        Outbox {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            limit: limit.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a frame at the end, making room by the eviction order above.
    /// Returns the frame's queue id.
    pub fn push(&self, frame: Outgoing) -> Result<u64, OutboxFull> {
        let id = {
            let mut state = self.lock();
            if state.queue.len() >= self.limit && !state.evict_one() {
                state.dropped += 1;
                return Err(OutboxFull(self.limit));
            }
            let id = state.take_id();
            state.queue.push_back((id, frame));
            id
        };
        self.notify.notify_waiters();
        Ok(id)
    }

    /// Holds the next slot in the order for a frame to come.
    pub fn reserve(&self) -> Reservation<'_> {
        let mut state = self.lock();
        let id = state.take_id();
        state.reserved.insert(id);
        Reservation {
            outbox: self,
            id: Some(id),
        }
    }

    /// Up to `max` frames from the front, stopping at the first reserved slot.
    pub fn peek(&self, max: usize) -> Batch {
        let state = self.lock();
        let barrier = state.reserved.first().copied().unwrap_or(u64::MAX);
        let frames = state
            .queue
            .iter()
            .take_while(|(id, _)| *id < barrier)
            .take(max)
            .cloned()
            .collect();
        Batch {
            frames,
            dropped: state.dropped,
        }
    }

    /// Waits until `peek` has something, then returns it.
    pub async fn next_batch(&self, max: usize) -> Batch {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let batch = self.peek(max);
            if !batch.is_empty() {
                return batch;
            }
            notified.await;
        }
    }

    /// Removes every frame up to and including `through` (they were sent),
    /// and forgets `reported` dropped frames (the client was told).
    pub fn ack(&self, through: Option<u64>, reported: u64) {
        let mut state = self.lock();
        if let Some(through) = through {
            while state.queue.front().is_some_and(|(id, _)| *id <= through) {
                state.queue.pop_front();
            }
            state.acked = state.acked.max(through);
        }
        state.dropped = state.dropped.saturating_sub(reported);
    }

    /// The highest queue id a writer acknowledged: every frame up to it was
    /// sent or evicted.
    pub fn acked_through(&self) -> u64 {
        self.lock().acked
    }

    /// Replaces the credential of a queued `spawn` (re-minted at delivery).
    pub(crate) fn update_credential(&self, id: u64, credential: &WorkerCredential) {
        let mut state = self.lock();
        if let Some((_, Outgoing::Spawn(spawn))) = state.queue.iter_mut().find(|(i, _)| *i == id) {
            spawn.frame.credential = credential.clone();
        }
    }

    /// Takes every queued `spawn` that has not been delivered yet, in order.
    pub fn take_spawns(&self) -> Vec<ParkedSpawn> {
        let mut state = self.lock();
        let mut spawns = Vec::new();
        state.queue.retain(|(_, frame)| match frame {
            Outgoing::Spawn(spawn) => {
                spawns.push((**spawn).clone());
                false
            }
            Outgoing::Text { .. } => true,
        });
        spawns
    }

    /// Takes every queued frame, in order (the session moved to another
    /// node, which delivers them).
    pub fn take_all(&self) -> Vec<(u64, Outgoing)> {
        std::mem::take(&mut self.lock().queue).into_iter().collect()
    }

    /// Takes the queued frames before the first reserved slot, in order,
    /// leaving the slot's place and what follows it: handed over to another
    /// node, they keep the order a reservation holds here.
    pub fn take_until_reserved(&self) -> Vec<(u64, Outgoing)> {
        let mut state = self.lock();
        let barrier = state.reserved.first().copied().unwrap_or(u64::MAX);
        let cut = state.queue.partition_point(|(id, _)| *id < barrier);
        state.queue.drain(..cut).collect()
    }

    /// Drops a queued `spawn` that has not been delivered yet.
    pub fn withdraw_spawn(&self, req_id: &str) -> bool {
        let mut state = self.lock();
        let before = state.queue.len();
        state
            .queue
            .retain(|(_, f)| !matches!(f, Outgoing::Spawn(s) if s.req_id == req_id));
        state.queue.len() != before
    }

    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Attaches a new socket; a socket attached before is told to close.
    pub fn attach(&self) -> Attachment {
        let (tx, rx) = watch::channel(None);
        let conn = {
            let mut state = self.lock();
            state.next_conn += 1;
            let conn = state.next_conn;
            if let Some((_, old)) = state.attached.replace((conn, tx)) {
                old.send_replace(Some(CloseReason::Replaced));
            }
            conn
        };
        self.notify.notify_waiters();
        Attachment { conn, close: rx }
    }

    /// Detaches socket `conn` if it is still the attached one; says whether it was.
    pub fn detach(&self, conn: u64) -> bool {
        let mut state = self.lock();
        if state.attached.as_ref().is_some_and(|(c, _)| *c == conn) {
            state.attached = None;
            true
        } else {
            false
        }
    }

    /// Tells the attached socket, if any, to close.
    pub fn close(&self, reason: CloseReason) {
        if let Some((_, tx)) = self.lock().attached.as_ref() {
            tx.send_replace(Some(reason));
        }
    }

    pub fn is_attached(&self) -> bool {
        self.lock().attached.is_some()
    }
}

impl State {
    /// Ids start at 1, so `acked == 0` means nothing was acknowledged.
    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Evicts the oldest `task_event`, else the oldest notice; counts it.
    fn evict_one(&mut self) -> bool {
        let position = [FrameClass::Resumable, FrameClass::Notice]
            .into_iter()
            .find_map(|class| self.queue.iter().position(|(_, f)| f.class() == class));
        match position {
            Some(index) => {
                self.queue.remove(index);
                self.dropped += 1;
                true
            }
            None => false,
        }
    }
}

/// A slot in the outbox order; dropping it unfilled releases the slot.
#[derive(Debug)]
pub struct Reservation<'a> {
    outbox: &'a Outbox,
    id: Option<u64>,
}

impl Reservation<'_> {
    /// Puts `frame` in the reserved slot, before everything queued since.
    pub fn fill(mut self, frame: Outgoing) -> Result<(), OutboxFull> {
        let Some(id) = self.id.take() else {
            return Ok(());
        };
        let result = {
            let mut state = self.outbox.lock();
            state.reserved.remove(&id);
            if state.queue.len() >= self.outbox.limit && !state.evict_one() {
                state.dropped += 1;
                Err(OutboxFull(self.outbox.limit))
            } else {
                let index = state.queue.partition_point(|(i, _)| *i < id);
                state.queue.insert(index, (id, frame));
                Ok(())
            }
        };
        self.outbox.notify.notify_waiters();
        result
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.outbox.lock().reserved.remove(&id);
            self.outbox.notify.notify_waiters();
        }
    }
}

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod tests;
