//! The event router: one task subscribed to the engine's bus that hands the
//! events a session must hear about the tasks it owns (`EventRecord.session`)
//! to that session's outbox: `task_finished` as `task_done`,
//! `long_hold_warn` as a `task_event`, and the `run_changed` that ends a
//! flow run as `run_done` (docs/protocol.md, Frames: all go to the owning
//! session). A session without a socket gets them parked. Every other event
//! reaches a client only through `subscribe`, so a MainAI pays for the
//! streams it asks for and nothing else.
//!
//! Every `task_done` and `run_done` reaches its session at least once
//! across restarts: sessions keep a delivery watermark (`Delivery`, in
//! `delivery`) and the router starts by replaying the durable log from
//! the lowest restored one. On a cluster it routes only to sessions homed
//! on this node, and a session that moves here has its events after its
//! watermark routed again.
//!
//! `run_done` reads the run's result and error from its stored record: the
//! event is published once the record that ended the run is durable, and
//! the router takes no lock of the runner's.
//!
//! `task_done` takes its attempt from `task_finished`. Only an event with
//! attempt 0 makes the router read the task: it is either a task that ended
//! before any attempt (whose attempt is 0 anyway) or an event logged before
//! `task_finished` carried the attempt, replayed once after an upgrade.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use swarmd_engine::event::{Event, EventRecord};
use swarmd_engine::ids::TaskId;
use swarmd_engine::{Engine, RunId, RunStatus};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::SessionRegistry;
use crate::feed::EventFeed;
use crate::frames::ServerFrame;

/// How long the router waits before retrying after a failed log read.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Events read per page, and at most, when a session moves to this node.
const CATCH_UP_PAGE: usize = 1024;
const CATCH_UP_MAX: usize = 65_536;

/// Routes engine events to the sessions that own their tasks.
#[derive(Debug)]
pub struct EventRouter {
    feed: EventFeed,
    engine: Engine,
    registry: Arc<SessionRegistry>,
}

impl EventRouter {
    /// Subscribes to the engine's bus now. Build it before
    /// `Engine::recover`, so the events recovery publishes reach their
    /// sessions once routing starts.
    pub fn subscribe(engine: &Engine, registry: Arc<SessionRegistry>) -> EventRouter {
        EventRouter {
            feed: EventFeed::acted_on(engine),
            engine: engine.clone(),
            registry,
        }
    }

    /// Starts routing on `tasks` until `shutdown` fires or the bus closes.
    /// Start it after `SessionRegistry::restore`: events for sessions not
    /// known yet are dropped.
    pub fn start(mut self, shutdown: CancellationToken, tasks: &TaskTracker) -> JoinHandle<()> {
        // Restored sessions may have missed `task_done`s when the daemon
        // died: replay the log from the lowest of their watermarks.
        if let Some(seq) = self.registry.replay_from() {
            tracing::debug!(after_seq = seq, "replaying task_done from the event log");
            self.feed.replay_from(seq);
        }
        // Outside a cluster no session ever moves here: the branch is off.
        let clustered = self.registry.clustered();
        let run = async move {
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = self.registry.catch_up_wanted(), if clustered => {
                        self.catch_up().await;
                        continue;
                    }
                    next = self.feed.next() => next,
                };
                match next {
                    Ok(Some(record)) => {
                        self.route(&record).await;
                        self.registry.routed(record.seq);
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(%error, "cannot read the event log; retrying");
                        tokio::select! {
                            () = shutdown.cancelled() => break,
                            () = tokio::time::sleep(RETRY_AFTER) => {}
                        }
                    }
                }
            }
            tracing::debug!("event router stopped");
        };
        tasks.spawn(run.instrument(tracing::info_span!("event_router")))
    }

    /// Routes again, for each session that just moved to this node, its
    /// events after its watermark up to what was routed already (at most
    /// `CATCH_UP_MAX` events read): the previous home may have stopped
    /// routing them before this node started. A repeat is dropped by the
    /// client, as after a restart.
    async fn catch_up(&self) {
        for (sid, from) in self.registry.take_catch_ups() {
            let through = self.registry.routed_through();
            let mut after = from;
            let mut read = 0;
            while after < through && read < CATCH_UP_MAX {
                let batch = match self.engine.events_after(after, CATCH_UP_PAGE).await {
                    Ok(batch) => batch,
                    Err(error) => {
                        tracing::warn!(%sid, %error, "cannot read the log for a moved session");
                        break;
                    }
                };
                let Some(last) = batch.last() else { break };
                after = last.seq;
                read += batch.len();
                for record in batch.iter().filter(|r| r.seq <= through) {
                    if record.session == Some(sid) {
                        self.route(record).await;
                    }
                }
            }
        }
    }

    async fn route(&self, record: &EventRecord) {
        if let Event::RunChanged {
            run_id,
            flow,
            status,
            ..
        } = &record.event
        {
            if status.is_terminal() {
                self.route_run_done(record, *run_id, flow, *status).await;
            }
            return;
        }
        let (Some(sid), Some(task_id)) = (record.session, record.event.task_id()) else {
            return;
        };
        if !matches!(
            record.event,
            Event::TaskFinished { .. } | Event::LongHoldWarn { .. }
        ) {
            return;
        }
        // Only the session's home delivers its frames; a move hands over
        // what it had not delivered.
        let Some(session) = self.registry.get(&sid).filter(|s| s.is_home()) else {
            return;
        };
        if session.delivery.delivered_before_restart(record.seq) {
            return;
        }
        let frame = match &record.event {
            Event::TaskFinished {
                attempt,
                status,
                result,
                ..
            } => ServerFrame::TaskDone {
                task_id,
                attempt: match *attempt {
                    0 => self.attempt_without_event(task_id).await,
                    attempt => attempt,
                },
                status: *status,
                ok: result.as_ref().is_some_and(|r| r.ok),
                value: result.as_ref().map_or(Value::Null, |r| r.value.clone()),
            },
            Event::LongHoldWarn { .. } => match ServerFrame::task_event(record) {
                Some(frame) => frame,
                None => return,
            },
            _ => return,
        };
        let queued = match frame {
            ServerFrame::TaskDone { .. } => session.notify_done(&frame, record.seq),
            _ => session.notify(&frame).map(|_| ()),
        };
        if let Err(error) = queued {
            tracing::debug!(%sid, %task_id, %error, "routed frame dropped");
        }
    }

    /// The `run_done` of a run's terminal `run_changed`, to the session
    /// that owns the run, tracked for delivery as a `task_done` is.
    async fn route_run_done(
        &self,
        record: &EventRecord,
        run_id: RunId,
        flow: &str,
        status: RunStatus,
    ) {
        let Some(sid) = record.session else {
            return;
        };
        let Some(session) = self.registry.get(&sid).filter(|s| s.is_home()) else {
            return;
        };
        if session.delivery.delivered_before_restart(record.seq) {
            return;
        }
        let (result, error) = match self.engine.get_run(run_id).await {
            Ok(Some(run)) => (run.result, run.error),
            Ok(None) => (None, None),
            Err(error) => {
                tracing::warn!(%run_id, %error, "cannot read an ended run's result");
                (None, None)
            }
        };
        let frame = ServerFrame::RunDone {
            run_id,
            flow: flow.to_owned(),
            status,
            result,
            error,
        };
        if let Err(error) = session.notify_done(&frame, record.seq) {
            tracing::debug!(%sid, %run_id, %error, "run_done dropped");
        }
    }

    /// The attempt of a task whose `task_finished` says 0: the task's own
    /// (0 for a task that never started; the real one for an event logged
    /// before `task_finished` carried it).
    async fn attempt_without_event(&self, task_id: TaskId) -> u32 {
        match self.engine.get_task(task_id).await {
            Ok(Some(task)) => task.attempt,
            Ok(None) => 0,
            Err(error) => {
                tracing::warn!(%task_id, %error, "cannot read a finished task's attempt");
                0
            }
        }
    }
}
