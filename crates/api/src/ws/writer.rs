//! The writer half of a session's socket: it drains the session's outbox in
//! order, sends the connection's own replies (`task_accepted` aside, which
//! is ordered through the outbox), pings every `ws.ping_secs`, and closes the
//! socket when told to. Queued frames go out as `Session::deliver` writes
//! them (a parked `spawn`'s token about to expire re-minted first).
//!
//! Every send is bounded by the dead-peer limit (three ping intervals), so a
//! peer that stops reading cannot hold the writer forever.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use bytes::Bytes;
use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use swarmd_engine::Engine;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use swarmd_sessions::dialect::UpstreamAttempts;
use swarmd_sessions::{CloseReason, Session};

/// Frames taken from the outbox per flush.
const MAX_BATCH: usize = 64;
/// Application close code: a newer socket took over the session.
pub const CLOSE_REPLACED: u16 = 4000;
/// Application close code: the session was deleted or expired.
pub const CLOSE_SESSION_ENDED: u16 = 4001;

/// What the reader and the ops worker hand the writer.
#[derive(Debug)]
pub(super) enum Direct {
    Frame(Utf8Bytes),
    Close(u16, &'static str),
}

/// When the peer was last heard from; the writer drops a silent peer.
#[derive(Debug)]
pub(super) struct Liveness {
    epoch: Instant,
    last_heard_ms: AtomicU64,
    limit: Duration,
}

impl Liveness {
    /// A peer silent for `limit` is dead.
    pub(super) fn new(limit: Duration) -> Liveness {
        Liveness {
            epoch: Instant::now(),
            last_heard_ms: AtomicU64::new(0),
            limit,
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn heard(&self) {
        self.last_heard_ms
            .fetch_max(self.elapsed_ms(), Ordering::Relaxed);
    }

    pub(super) fn is_dead(&self) -> bool {
        let silent = self
            .elapsed_ms()
            .saturating_sub(self.last_heard_ms.load(Ordering::Relaxed));
        u128::from(silent) > self.limit.as_millis()
    }
}

/// Why the writer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriterEnd {
    Closed(CloseReason),
    /// It sent the close the reader asked for.
    CloseSent,
    DeadPeer,
    Broken,
}

pub(super) struct Writer<'a> {
    pub engine: &'a Engine,
    pub session: &'a Session,
    pub upstream: &'a UpstreamAttempts,
    pub liveness: &'a Liveness,
    pub ping_every: Duration,
}

type Sink = SplitSink<WebSocket, Message>;

impl Writer<'_> {
    pub(super) async fn run(
        &self,
        mut sink: Sink,
        mut direct: mpsc::Receiver<Direct>,
        mut close: watch::Receiver<Option<CloseReason>>,
    ) -> WriterEnd {
        let mut ticker =
            tokio::time::interval_at(Instant::now() + self.ping_every, self.ping_every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let sent = tokio::select! {
                biased;
                changed = close.changed() => {
                    let reason = *close.borrow_and_update();
                    match (changed, reason) {
                        (Ok(()), Some(reason)) => {
                            let (code, text) = close_for(reason);
                            self.send(&mut sink, close_message(code, text)).await;
                            return WriterEnd::Closed(reason);
                        }
                        (Ok(()), None) => continue,
                        (Err(_), _) => return WriterEnd::Closed(CloseReason::Replaced),
                    }
                }
                _ = ticker.tick() => {
                    if self.liveness.is_dead() {
                        return WriterEnd::DeadPeer;
                    }
                    self.send(&mut sink, Message::Ping(Bytes::new())).await
                }
                message = direct.recv() => match message {
                    Some(Direct::Frame(text)) => self.send(&mut sink, Message::Text(text)).await,
                    Some(Direct::Close(code, text)) => {
                        self.send(&mut sink, close_message(code, text)).await;
                        return WriterEnd::CloseSent;
                    }
                    None => return WriterEnd::Broken,
                },
                // Delivered within the dead-peer limit and acknowledged
                // once flushed; an unsent batch stays queued for the next
                // socket.
                batch = self.session.outbox.next_batch(MAX_BATCH) => {
                    let delivered = self.session.deliver(
                        self.engine,
                        self.upstream,
                        batch,
                        &mut sink,
                        Message::Text,
                    );
                    matches!(
                        tokio::time::timeout(self.liveness.limit, delivered).await,
                        Ok(Ok(()))
                    )
                }
            };
            if !sent {
                return WriterEnd::Broken;
            }
        }
    }

    /// Sends one message within the dead-peer limit.
    async fn send(&self, sink: &mut Sink, message: Message) -> bool {
        matches!(
            tokio::time::timeout(self.liveness.limit, sink.send(message)).await,
            Ok(Ok(()))
        )
    }
}

fn close_message(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    }))
}

fn close_for(reason: CloseReason) -> (u16, &'static str) {
    match reason {
        CloseReason::Replaced => (CLOSE_REPLACED, "replaced by a newer connection"),
        CloseReason::Deleted => (CLOSE_SESSION_ENDED, "session deleted"),
        CloseReason::Expired => (CLOSE_SESSION_ENDED, "session expired"),
        CloseReason::ShuttingDown => (close_code::AWAY, "server shutting down"),
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
