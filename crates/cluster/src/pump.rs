//! The event pump: follows the committed event log of the shared database
//! and offers what it reads to the engine's bus, so this node's
//! subscribers (`/v1/events`, WebSocket feeds, the dashboard) see every
//! node's events, in seq order, without gaps.
//!
//! It reads other nodes' event bodies only while something on this node
//! follows the whole log (`Engine::follow`); otherwise only the kinds the
//! node acts on (`Event::ACTED_ON`: the router's, the waits', the flow
//! runner's) come whole and every other event as its seq, which steps the
//! sequencer past it. So a node's CPU per task does not grow with the
//! events of the other nodes' tasks.
//!
//! Most of the time it reads nothing: another node's group comes in its
//! `NOTIFY`, whose payload carries the group's seqs and its acted-on
//! events whole (`swarmd_postgres`'s `notice`), and the listener offers
//! it to the bus as the log would. The pump reads the log after the last
//! seq broadcast when a notification does not carry its group (too large,
//! unreadable, another build's) or the bus refuses it (something follows
//! the log), when this node's events still wait behind a gap `GAP_GRACE`
//! after it opened (the notification that fills it is usually on its way:
//! the group behind the gap committed first), and at least every `POLL`
//! (a notification sent while the listening connection was down is lost).
//! A lost listening connection is opened again before the pump waits
//! again; while it cannot be, the pump polls.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_postgres::{EventWake, OfferEntries, PgDb};
use tokio_util::sync::CancellationToken;

/// The longest the pump goes without reading the log.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// How long this node's events may wait behind a gap for the notification
/// that fills it before the pump reads the log.
const GAP_GRACE: Duration = Duration::from_millis(2);
/// Events read per query; a full page is followed by the next at once.
const PAGE: usize = 1024;

/// Runs until `stop`.
pub(crate) async fn run(engine: Engine, db: PgDb, stop: CancellationToken) {
    let mut wake: Option<EventWake> = None;
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let offer: OfferEntries = {
        let engine = engine.clone();
        Arc::new(move |entries| engine.offer_notified(entries))
    };
    loop {
        if wake.is_none() {
            match db.cluster().listen_events(Arc::clone(&offer)).await {
                Ok(listening) => wake = Some(listening),
                Err(error) => tracing::warn!(%error, "cannot listen for events; polling"),
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            woken = async {
                match wake.as_mut() {
                    Some(wake) => wake.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if woken.is_none() {
                    tracing::warn!("the event listener connection closed; polling until it is back");
                    wake = None;
                }
            }
            () = engine.event_gap() => {
                tokio::time::sleep(GAP_GRACE).await;
                if !engine.event_gapped() {
                    continue;
                }
            }
            _ = poll.tick() => {}
        }
        catch_up(&engine).await;
    }
}

/// Reads the log after the last broadcast seq until a page is not full.
async fn catch_up(engine: &Engine) {
    loop {
        let after = engine.last_event_seq();
        match engine.log_after(after, PAGE).await {
            Ok(records) => {
                // The log is gapless at commit: a seq missing right after
                // `after` is unreadable or was pruned, and never comes.
                if let Some(first) = records.first()
                    && first.seq() > after + 1
                {
                    tracing::warn!(
                        after,
                        next = first.seq(),
                        "events missing from the log (unreadable or pruned); going on after them"
                    );
                    engine.skip_events_before(first.seq());
                }
                let full = records.len() == PAGE;
                engine.offer_log(records);
                if !full || engine.last_event_seq() == after {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the event pump cannot read the log");
                return;
            }
        }
    }
}
