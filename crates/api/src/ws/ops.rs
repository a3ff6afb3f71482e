//! The connection's ops worker: runs `spawn_task` and `cancel_task`, up to
//! [`OPS_IN_FLIGHT`] at once. It is its own task, not part of the socket's
//! halves, so a socket that drops mid-operation never cuts an engine call
//! half-way; it ends once the connection's sender is gone and every started
//! operation has finished.
//!
//! Operations start in the order the client sent them, and each `spawn_task`
//! reserves its slot in the session's outbox when it starts, before it calls
//! the engine: `task_accepted` frames leave in request order, and each one
//! before any frame about its task (its delegated `spawn`, its `task_done`),
//! however the engine calls interleave. A `cancel_task` names a task the
//! client learned from a `task_accepted`, so its spawn has already finished.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use swarmd_engine::ErrorCode;
use swarmd_engine::ids::{ReqId, TaskId};
use swarmd_engine::{Engine, EngineError};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::writer::Direct;
use crate::http::error::describe;
use crate::new_task::{NewTask, Origin};
use swarmd_sessions::frames::{ServerFrame, SpawnTaskFrame};
use swarmd_sessions::{
    CancelError, Canceller, FrameClass, Outgoing, Reservation, Session, SessionRegistry, cancel_as,
};

/// Operations queued per connection before the reader waits.
const OPS_CAPACITY: usize = 64;

/// Operations one connection runs at once; past that the queue fills and
/// the reader waits, which is the connection's backpressure.
const OPS_IN_FLIGHT: usize = 64;

#[derive(Debug)]
pub(super) enum Op {
    Spawn(Box<SpawnTaskFrame>),
    Cancel { req_id: ReqId, task_id: TaskId },
}

/// Starts the worker on `tasks`; it stops when the returned sender is
/// dropped and its started operations have finished.
pub(super) fn spawn_worker(
    engine: Engine,
    sessions: Arc<SessionRegistry>,
    session: Arc<Session>,
    direct: mpsc::Sender<Direct>,
    tasks: &TaskTracker,
) -> mpsc::Sender<Op> {
    let (tx, mut rx) = mpsc::channel(OPS_CAPACITY);
    let span = tracing::debug_span!("ws_ops", sid = %session.sid);
    let worker = async move {
        let (engine, sessions, session) = (&engine, &*sessions, &session);
        let origin = &Origin::socket(session.sid);
        let mut running = FuturesUnordered::new();
        loop {
            tokio::select! {
                op = rx.recv(), if running.len() < OPS_IN_FLIGHT => {
                    let Some(op) = op else { break };
                    let run: BoxFuture<'_, Option<ServerFrame>> = match op {
                        Op::Spawn(frame) => {
                            let slot = session.outbox.reserve();
                            Box::pin(spawn_task(engine, sessions, session, origin, *frame, slot))
                        }
                        Op::Cancel { req_id, task_id } => {
                            Box::pin(cancel_task(engine, session, req_id, task_id))
                        }
                    };
                    running.push(run);
                }
                Some(refused) = running.next(), if !running.is_empty() => {
                    if let Some(frame) = refused {
                        let _ = direct.send(Direct::Frame(session.dialect.encode(&frame))).await;
                    }
                }
            }
        }
        while let Some(refused) = running.next().await {
            if let Some(frame) = refused {
                let _ = direct
                    .send(Direct::Frame(session.dialect.encode(&frame)))
                    .await;
            }
        }
    };
    tasks.spawn(worker.instrument(span));
    tx
}

/// Creates the task for the session (`origin`, made once per connection),
/// answering in `slot`, a refusal too; returns the error frame only when
/// the outbox could not take it. A session that moved to another node
/// meanwhile has the answer handed over to it there.
async fn spawn_task(
    engine: &Engine,
    sessions: &SessionRegistry,
    session: &Session,
    origin: &Origin,
    frame: SpawnTaskFrame,
    slot: Reservation<'_>,
) -> Option<ServerFrame> {
    let (req_id, request) = NewTask::from_frame(frame);
    match request.create(engine, origin, Some(req_id.as_str())).await {
        Ok(task) => {
            let accepted = ServerFrame::TaskAccepted {
                req_id,
                task_id: task.id,
            };
            let queued = slot.fill(Outgoing::Text {
                class: FrameClass::Notice,
                text: session.dialect.encode(&accepted),
            });
            if let Err(error) = queued {
                tracing::warn!(task_id = %task.id, %error, "task_accepted dropped");
            }
            sessions.hand_over_stranded(session).await;
            None
        }
        // A refusal takes the slot too: like `task_accepted` it waits in
        // the session's outbox, so a client whose socket was replaced
        // meanwhile still learns what became of its request.
        Err(error) => {
            let refused = engine_error(req_id, &error);
            let queued = slot.fill(Outgoing::Text {
                class: FrameClass::Notice,
                text: session.dialect.encode(&refused),
            });
            sessions.hand_over_stranded(session).await;
            // The outbox refused it (full): the socket, if any, is told.
            queued.err().map(|_| refused)
        }
    }
}

/// Cancels a task this session owns (`sessions::cancel_as`); returns the
/// error frame when refused, another session's task answered as an unknown
/// one (`http::views::Reader`). Success has no reply: the task's
/// `task_done` follows.
async fn cancel_task(
    engine: &Engine,
    session: &Session,
    req_id: ReqId,
    task_id: TaskId,
) -> Option<ServerFrame> {
    match cancel_as(engine, Canceller::Session(session.sid), task_id, None).await {
        Ok(_) => None,
        Err(CancelError::NotOwner) => Some(ServerFrame::error(
            Some(req_id),
            ErrorCode::NotFound,
            format!("task {task_id} not found"),
        )),
        Err(CancelError::Engine(error)) => Some(engine_error(req_id, &error)),
    }
}

/// An engine refusal as an `error` frame, described as HTTP describes it
/// (`http::error::describe`: the code of docs/protocol.md, Errors; internal failures are
/// logged there and not described to the client).
pub(super) fn engine_error(req_id: ReqId, error: &EngineError) -> ServerFrame {
    let (code, message) = describe(error);
    ServerFrame::error(Some(req_id), code, message)
}
