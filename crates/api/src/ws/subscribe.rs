//! `subscribe {req_id, task_id, after_seq?}`: streams `task_event`s for one
//! task to this connection — the log after `after_seq`, then live events,
//! without gaps or repeats — until the task's `task_finished`. Without
//! `after_seq` the stream starts now (pass `0` for the whole history; that
//! reads the whole event log). A task already terminal gets its logged
//! events after `after_seq` and the stream ends. Another session's task is
//! answered as an unknown one (`http::views::Reader`).
//!
//! Streams belong to the connection: they stop with it, and the client
//! resumes on its next socket with the last `seq` it saw. A task's events
//! that are also routed to its owning session arrive on both paths; their
//! `seq` tells them apart.

use std::collections::HashMap;

use swarmd_engine::Engine;
use swarmd_engine::ErrorCode;
use swarmd_engine::event::Event;
use swarmd_engine::ids::{ReqId, TaskId};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::ops::engine_error;
use super::writer::Direct;
use crate::http::views::Reader;
use swarmd_sessions::EventFeed;
use swarmd_sessions::Session;
use swarmd_sessions::dialect::Dialect;
use swarmd_sessions::frames::ServerFrame;

/// Streams one connection may run at once.
pub(super) const MAX_SUBSCRIPTIONS: usize = 64;

/// The connection's streams; dropping this stops them all.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    tasks: JoinSet<()>,
    by_task: HashMap<TaskId, AbortHandle>,
}

impl Subscriptions {
    /// Starts a stream for `task_id` on `session`'s connection, replacing
    /// an earlier one for the same task. Refuses past [`MAX_SUBSCRIPTIONS`].
    pub(super) fn start(
        &mut self,
        engine: &Engine,
        direct: &mpsc::Sender<Direct>,
        session: &Session,
        req_id: ReqId,
        task_id: TaskId,
        after_seq: Option<u64>,
    ) -> Result<(), String> {
        while self.tasks.try_join_next().is_some() {}
        self.by_task.retain(|_, handle| !handle.is_finished());
        if let Some(previous) = self.by_task.remove(&task_id) {
            previous.abort();
        }
        if self.by_task.len() >= MAX_SUBSCRIPTIONS {
            return Err(format!(
                "at most {MAX_SUBSCRIPTIONS} subscriptions per connection"
            ));
        }
        // The bus is subscribed here, before the task is read: nothing
        // published in between is missed.
        let feed = match after_seq {
            Some(seq) => EventFeed::after(engine, seq),
            None => EventFeed::live(engine),
        };
        let stream = Stream {
            engine: engine.clone(),
            direct: direct.clone(),
            dialect: session.dialect,
            reader: Reader::session(session.sid),
            req_id,
            task_id,
            after_seq,
        };
        let handle = self.tasks.spawn(stream.run(feed));
        self.by_task.insert(task_id, handle);
        Ok(())
    }
}

struct Stream {
    engine: Engine,
    direct: mpsc::Sender<Direct>,
    dialect: Dialect,
    reader: Reader,
    req_id: ReqId,
    task_id: TaskId,
    after_seq: Option<u64>,
}

impl Stream {
    async fn run(self, live: EventFeed) {
        let task = match self.reader.read(&self.engine, self.task_id).await {
            Ok(Some(task)) => task,
            Ok(None) => {
                let message = format!("task {} not found", self.task_id);
                self.send(&ServerFrame::error(
                    Some(self.req_id.clone()),
                    ErrorCode::NotFound,
                    message,
                ))
                .await;
                return;
            }
            Err(error) => {
                self.send(&engine_error(self.req_id.clone(), &error)).await;
                return;
            }
        };
        let mut feed = if task.status().is_terminal() {
            match self.after_seq {
                // A terminal task's events are all in the log.
                Some(seq) => EventFeed::logged(&self.engine, seq),
                None => return,
            }
        } else {
            live
        };
        loop {
            let record = match feed.next().await {
                Ok(Some(record)) => record,
                Ok(None) => return,
                Err(error) => {
                    self.send(&engine_error(self.req_id.clone(), &error)).await;
                    return;
                }
            };
            if record.event.task_id() != Some(self.task_id) {
                continue;
            }
            let Some(frame) = ServerFrame::task_event(&record) else {
                continue;
            };
            if !self.send(&frame).await {
                return;
            }
            if matches!(record.event, Event::TaskFinished { .. }) {
                return;
            }
        }
    }

    async fn send(&self, frame: &ServerFrame) -> bool {
        let text = self.dialect.encode(frame);
        self.direct.send(Direct::Frame(text)).await.is_ok()
    }
}
