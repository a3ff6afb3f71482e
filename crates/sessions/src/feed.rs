//! A gap-free, duplicate-free stream of engine events: replay from the
//! durable log, then live from the bus, resuming from the log whenever the
//! bus receiver lags (docs/protocol.md, Events; Liveness).
//!
//! The bus is subscribed when the feed is built, before the log is read, so
//! every event is either in the log read or in the receiver; records at or
//! below the last delivered `seq` are skipped. A client's feed holds a
//! `Follower` (a cluster's pump then reads every event whole) and reads
//! the log when the live seqs jump (an event stepped past before it
//! followed); the event router's feed (`acted_on`) needs only the kinds
//! the pump always reads whole, and takes the bus as it comes.

use std::collections::VecDeque;
use std::sync::Arc;

use swarmd_engine::event::EventRecord;
use swarmd_engine::{Engine, EngineError, Follower};
use tokio::sync::broadcast::{self, error::RecvError};

/// Log records read per store call while replaying.
const REPLAY_BATCH: usize = 512;

/// One reader's stream of events: from the log, then live (see the
/// module's head for the rule that makes it gap-free).
#[derive(Debug)]
pub struct EventFeed {
    engine: Engine,
    rx: broadcast::Receiver<Arc<EventRecord>>,
    last_seq: Option<u64>,
    backlog: VecDeque<Arc<EventRecord>>,
    /// The log still has records after `last_seq` to read.
    replay: bool,
    /// Whether to go on with live events once the log is read.
    live: bool,
    /// A lag reported before any record arrived: resume once one does.
    lag_before_first: Option<u64>,
    /// Held by a client's feed, which needs every event: a jump in the
    /// live seqs makes it read the log.
    follower: Option<Follower>,
}

impl EventFeed {
    /// Live events from now on.
    pub fn live(engine: &Engine) -> EventFeed {
        Self::build(engine, None, true, Some(engine.follow()))
    }

    /// Live events from now on, for the event router: every event of the
    /// kinds the node acts on (`Event::ACTED_ON`), others as the bus
    /// happens to carry them.
    pub(crate) fn acted_on(engine: &Engine) -> EventFeed {
        Self::build(engine, None, true, None)
    }

    /// Every event after `seq`, then live events.
    pub fn after(engine: &Engine, seq: u64) -> EventFeed {
        Self::build(engine, Some(seq), true, Some(engine.follow()))
    }

    /// Every event after `seq` in the log, then the end.
    pub fn logged(engine: &Engine, seq: u64) -> EventFeed {
        Self::build(engine, Some(seq), false, None)
    }

    /// Restarts the feed from the log after `seq` (before it delivered
    /// anything: the bus receiver it holds still covers every later event).
    pub(crate) fn replay_from(&mut self, seq: u64) {
        self.last_seq = Some(seq);
        self.replay = true;
        self.backlog.clear();
    }

    fn build(
        engine: &Engine,
        after: Option<u64>,
        live: bool,
        follower: Option<Follower>,
    ) -> EventFeed {
        EventFeed {
            follower,
            engine: engine.clone(),
            rx: engine.subscribe(),
            last_seq: after,
            backlog: VecDeque::new(),
            replay: after.is_some(),
            live,
            lag_before_first: None,
        }
    }

    /// The next event; `None` at the end of a logged feed or when the bus
    /// is gone. A store error leaves the feed where it was: calling again
    /// retries the read.
    pub async fn next(&mut self) -> Result<Option<Arc<EventRecord>>, EngineError> {
        loop {
            if let Some(record) = self.backlog.pop_front() {
                self.last_seq = Some(record.seq);
                return Ok(Some(record));
            }
            if self.replay {
                let after = self.last_seq.unwrap_or(0);
                let batch = self.engine.events_after(after, REPLAY_BATCH).await?;
                self.replay = batch.len() == REPLAY_BATCH;
                self.backlog
                    .extend(batch.into_iter().filter(|r| r.seq > after).map(Arc::new));
                continue;
            }
            if !self.live {
                return Ok(None);
            }
            match self.rx.recv().await {
                Ok(record) => {
                    if let Some(missed) = self.lag_before_first.take() {
                        // The `missed` records just before this one are in the log.
                        self.last_seq = Some(record.seq.saturating_sub(missed + 1));
                        self.replay = true;
                        continue;
                    }
                    if self.last_seq.is_some_and(|last| record.seq <= last) {
                        continue;
                    }
                    if self.follower.is_some()
                        && self.last_seq.is_some_and(|last| record.seq > last + 1)
                    {
                        // Stepped past on the bus: the log has it, and this one.
                        self.replay = true;
                        continue;
                    }
                    self.last_seq = Some(record.seq);
                    return Ok(Some(record));
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "event feed lagged; resuming from the log");
                    if self.last_seq.is_some() {
                        self.replay = true;
                    } else {
                        self.lag_before_first = Some(missed);
                    }
                }
                Err(RecvError::Closed) => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use swarmd_engine::event::Event;
    use swarmd_engine::ids::SessionId;

    use super::*;
    use crate::testing::Harness;

    fn attached(sid: SessionId) -> Event {
        Event::SessionAttached { sid }
    }

    /// Publishes `n` session events and waits until the last is durable.
    async fn publish(engine: &Engine, n: usize) -> Vec<SessionId> {
        let mut live = engine.subscribe();
        let sids: Vec<SessionId> = (0..n).map(|_| SessionId::new()).collect();
        for sid in &sids {
            engine.publish_for_session(*sid, attached(*sid));
        }
        let last = *sids.last().unwrap();
        loop {
            match live.recv().await {
                Ok(record) if record.event == attached(last) => return sids,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => panic!("the bus closed"),
            }
        }
    }

    async fn collect(feed: &mut EventFeed, n: usize) -> Vec<u64> {
        let mut seqs = Vec::new();
        while seqs.len() < n {
            let record = tokio::time::timeout(Duration::from_secs(5), feed.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            seqs.push(record.seq);
        }
        seqs
    }

    #[tokio::test]
    async fn replays_the_log_then_goes_live_without_gaps_or_repeats() {
        let harness = Harness::new().await;
        let engine = &harness.engine;
        publish(engine, 3).await;
        let mut feed = EventFeed::after(engine, 0);
        publish(engine, 2).await;
        let seqs = collect(&mut feed, 5).await;
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        publish(engine, 1).await;
        assert_eq!(collect(&mut feed, 1).await, [6]);
    }

    #[tokio::test]
    async fn a_logged_feed_ends_with_the_log_and_a_live_feed_starts_now() {
        let harness = Harness::new().await;
        let engine = &harness.engine;
        publish(engine, 3).await;
        let mut logged = EventFeed::logged(engine, 1);
        let mut live = EventFeed::live(engine);
        assert_eq!(collect(&mut logged, 2).await, [2, 3]);
        assert!(logged.next().await.unwrap().is_none());
        publish(engine, 1).await;
        assert_eq!(collect(&mut live, 1).await, [4]);
    }

    #[tokio::test]
    async fn a_lagging_receiver_resumes_from_the_log() {
        let harness = Harness::new().await;
        let engine = &harness.engine;
        let mut feed = EventFeed::live(engine);
        let mut known = EventFeed::after(engine, 0);
        // More than the bus keeps (8192) for a receiver that does not read.
        let n = 8192 + 10;
        publish(engine, n).await;
        let seqs = collect(&mut feed, n).await;
        assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>());
        let seqs = collect(&mut known, n).await;
        assert_eq!(seqs.len(), n);
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
