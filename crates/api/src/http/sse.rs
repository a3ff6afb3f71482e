//! Shared pieces of the Server-Sent Event routes (task output, event log):
//! content negotiation, `Last-Event-ID`, keep-alive, and the stream driver.
//!
//! A stream is a `Follow` implementation: it is subscribed to the engine's
//! broadcast before it first reads the store, so nothing published in
//! between is missed, and it reads the store again whenever the broadcast
//! says it is behind (a gap, a lag, a jump in the seqs it receives: an
//! event a cluster's pump stepped past before the stream held its
//! `Follower`). The store is the truth; the broadcast only says when to
//! look. Reads are paged, so a long backlog never sits in
//! memory at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::ACCEPT;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use swarmd_engine::event::EventRecord;
use swarmd_engine::{EngineError, Follower};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::http::auth::Caller;
use crate::http::guard::StreamSlot;
use swarmd_sessions::Session;

/// When a stream ends with its credential: an operator session's stream
/// when the session ends (deleted, expired, taken over), a role token's
/// when the token stops verifying; the admin's never.
#[derive(Debug, Default)]
pub struct StreamEnd {
    session: Option<Arc<Session>>,
    expires: Option<u64>,
}

impl StreamEnd {
    /// The end of a stream `caller` opens.
    pub fn of(caller: &Caller) -> StreamEnd {
        StreamEnd {
            session: caller.session().cloned(),
            expires: caller.expires_secs(),
        }
    }

    /// Whether the stream may end by itself (`Follow::may_end`).
    pub fn may_end(&self) -> bool {
        self.session.is_some() || self.expires.is_some()
    }

    /// Whether it has (`Follow::ended`).
    pub fn ended(&self) -> bool {
        let expired = self.expires.is_some_and(|exp| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            now >= exp
        });
        expired || self.session.as_ref().is_some_and(|s| s.is_closed())
    }
}

/// Records read from the store per page.
pub const PAGE: usize = 256;
/// Live events taken from the broadcast in one go before the store is read.
const DRAIN_MAX: usize = 1024;
/// A comment line is sent this often on an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A stream that steps over records it does not send says how far it got
/// (an `id:`-only event) at most this often, so a client resumes from there
/// and not from the last record it was sent.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// A stream that may end on its own (`Follow::may_end`) checks this often.
pub const END_CHECK: Duration = Duration::from_millis(500);

/// Whether the client asked for `text/event-stream`.
pub fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

/// The `Last-Event-ID` header, if any.
pub fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// What one live event means to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Not for this stream.
    Ignore,
    /// The store has something new for this stream.
    Behind,
    /// Nothing more will come after what the store holds now.
    Finished,
}

/// What a stream does with a live event that is exactly its next record.
#[derive(Debug)]
pub enum Live<T> {
    /// Send it, no store read needed.
    Send(T),
    /// Step past it: it is not for this stream (the cursor moved).
    Skip,
    /// Read the store instead.
    Read,
}

/// A resumable stream over stored records.
pub trait Follow: Send + 'static {
    /// What the stream sends per record.
    type Item: Send;

    /// Reads the next page after the cursor into `out`, advancing the
    /// cursor; returns whether more may be waiting.
    fn fill(
        &mut self,
        out: &mut VecDeque<Self::Item>,
    ) -> impl Future<Output = Result<bool, EngineError>> + Send;

    /// Classifies a live event.
    fn wake(&self, record: &EventRecord) -> Wake;

    /// Takes a live event directly when it is exactly the next record (no
    /// store read needed); `Live::Read` makes the driver read the store.
    fn take_live(&mut self, _record: &EventRecord) -> Live<Self::Item> {
        Live::Read
    }

    /// The SSE event for one item.
    fn render(&self, item: Self::Item) -> SseEvent;

    /// The `Last-Event-ID` that resumes right after the cursor, when the
    /// cursor has moved past the last id the client got (a stream that
    /// steps over records it does not send); `None` otherwise, and always
    /// for a stream that sends every record (the default).
    fn progress_id(&mut self) -> Option<String> {
        None
    }

    /// How often the stream may send its coalesced summary frame, if it
    /// has one (the event log's `tick` of new tasks).
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Whether the summary has something to say.
    fn tick_pending(&self) -> bool {
        false
    }

    /// The summary frame, resetting what it summarises; `None` when there
    /// is nothing to say. It carries the id that resumes after the cursor.
    fn tick(&mut self) -> Option<SseEvent> {
        None
    }

    /// Whether the stream may end on its own before its source does (the
    /// event log of an operator session that can be deleted); such a
    /// stream asks `ended` every `END_CHECK`.
    fn may_end(&self) -> bool {
        false
    }

    /// Whether the stream is over now (its session was deleted or
    /// expired): it ends without sending anything more.
    fn ended(&self) -> bool {
        false
    }
}

struct Driver<F: Follow> {
    follow: F,
    rx: broadcast::Receiver<Arc<EventRecord>>,
    shutdown: CancellationToken,
    pending: VecDeque<F::Item>,
    behind: bool,
    finishing: bool,
    /// When the client last got an id.
    progress_at: tokio::time::Instant,
    /// When the last summary frame went out (the stream's start at first).
    tick_at: tokio::time::Instant,
    /// Wakes a stream that may end on its own to ask whether it has.
    end_check: Option<tokio::time::Interval>,
    /// The last seq received from the bus: a jump past it means the store
    /// holds events the bus stepped past.
    bus_seq: Option<u64>,
    /// Keeps a cluster's pump reading every event whole while the stream lives.
    _follower: Option<Follower>,
    /// The stream's place under `limits.streams_per_caller` and
    /// `limits.max_streams`, held while the response body lives.
    _slot: Option<StreamSlot>,
}

impl<F: Follow> Driver<F> {
    fn new(
        follow: F,
        (follower, rx): (Option<Follower>, broadcast::Receiver<Arc<EventRecord>>),
        shutdown: CancellationToken,
        finished: bool,
    ) -> Self {
        let end_check = follow.may_end().then(|| {
            let mut check = tokio::time::interval(END_CHECK);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            check
        });
        Driver {
            end_check,
            follow,
            rx,
            shutdown,
            pending: VecDeque::new(),
            behind: true,
            finishing: finished,
            progress_at: tokio::time::Instant::now(),
            tick_at: tokio::time::Instant::now(),
            bus_seq: None,
            _follower: follower,
            _slot: None,
        }
    }

    /// An `id:`-only event when records were stepped over since the last
    /// id the client got, and that went out `PROGRESS_EVERY` ago or more.
    fn progress(&mut self) -> Option<SseEvent> {
        if self.progress_at.elapsed() < PROGRESS_EVERY {
            return None;
        }
        let id = self.follow.progress_id()?;
        self.progress_at = tokio::time::Instant::now();
        Some(SseEvent::default().id(id))
    }

    /// When a pending summary frame is due, if one is pending.
    fn tick_due(&self) -> Option<tokio::time::Instant> {
        let every = self.follow.tick_every()?;
        self.follow.tick_pending().then_some(self.tick_at + every)
    }

    /// The summary frame, when one is pending and its interval has passed.
    fn tick(&mut self) -> Option<SseEvent> {
        let now = tokio::time::Instant::now();
        if self.tick_due()? > now {
            return None;
        }
        let tick = self.follow.tick()?;
        self.tick_at = now;
        self.progress_at = now;
        Some(tick)
    }

    /// The next event to send, or `None` when the stream is over.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if self.follow.ended() {
                return None;
            }
            if let Some(item) = self.pending.pop_front() {
                self.progress_at = tokio::time::Instant::now();
                return Some(self.follow.render(item));
            }
            if let Some(tick) = self.tick() {
                return Some(tick);
            }
            if let Some(progress) = self.progress() {
                return Some(progress);
            }
            if self.behind {
                match self.follow.fill(&mut self.pending).await {
                    Ok(more) => self.behind = more,
                    Err(error) => {
                        tracing::warn!(%error, "event stream ended: store read failed");
                        return None;
                    }
                }
                continue;
            }
            if self.finishing {
                return None;
            }
            // A pending summary wakes the stream when it falls due.
            let due = self.tick_due();
            let received = tokio::select! {
                () = self.shutdown.cancelled() => return None,
                () = sleep_until_some(due) => continue,
                () = tick_some(self.end_check.as_mut()) => continue,
                received = self.rx.recv() => received,
            };
            self.absorb(received);
            // Take whatever else is already queued before touching the store.
            for _ in 0..DRAIN_MAX {
                if self.behind && self.finishing {
                    break;
                }
                match self.rx.try_recv() {
                    Ok(record) => self.absorb(Ok(record)),
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        self.absorb(Err(RecvError::Lagged(n)))
                    }
                    Err(broadcast::error::TryRecvError::Closed) => {
                        self.absorb(Err(RecvError::Closed))
                    }
                }
            }
        }
    }

    fn absorb(&mut self, received: Result<Arc<EventRecord>, RecvError>) {
        if let Ok(record) = &received {
            if self.bus_seq.is_some_and(|last| record.seq > last + 1) {
                self.behind = true;
            }
            self.bus_seq = Some(record.seq);
        }
        match received {
            Ok(record) => match self.follow.wake(&record) {
                Wake::Ignore => {}
                Wake::Behind if !self.behind => match self.follow.take_live(&record) {
                    Live::Send(item) => self.pending.push_back(item),
                    Live::Skip => {}
                    Live::Read => self.behind = true,
                },
                Wake::Behind => {}
                Wake::Finished => {
                    self.behind = true;
                    self.finishing = true;
                }
            },
            Err(RecvError::Lagged(_)) => self.behind = true,
            Err(RecvError::Closed) => {
                self.behind = true;
                self.finishing = true;
            }
        }
    }
}

/// Serves `follow` as an SSE response: the store from its cursor, then live
/// records, until `follow` reports the end, the client leaves or the daemon
/// drains. `finished` marks a stream whose source is already complete: it
/// sends what the store holds and ends.
pub fn stream<F: Follow>(
    follow: F,
    (follower, rx): (Follower, broadcast::Receiver<Arc<EventRecord>>),
    (shutdown, slot): (CancellationToken, StreamSlot),
    finished: bool,
) -> Response {
    let mut driver = Driver::new(follow, (Some(follower), rx), shutdown, finished);
    driver._slot = Some(slot);
    Sse::new(events(driver))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Waits for the interval's next tick, or forever without one.
async fn tick_some(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn events<F: Follow>(driver: Driver<F>) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send {
    futures_util::stream::unfold(driver, |mut driver| async move {
        let event = driver.next().await?;
        Some((Ok(event), driver))
    })
}

#[cfg(test)]
mod driver_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_and_last_event_id() {
        let mut headers = HeaderMap::new();
        assert!(!wants_sse(&headers));
        headers.insert(
            ACCEPT,
            "application/json, Text/Event-Stream".parse().unwrap(),
        );
        assert!(wants_sse(&headers));
        assert_eq!(last_event_id(&headers), None);
        headers.insert("last-event-id", " 2:7 ".parse().unwrap());
        assert_eq!(last_event_id(&headers), Some("2:7"));
    }
}
