//! One socket's life: attach to the session (closing any older socket),
//! publish `session_attached` and persist the session, run the reader and
//! writer halves until either ends — the other is then dropped, which
//! aborts it — and detach, publishing `session_detached`.
//!
//! Both halves run inside this one task (`select!`), so neither outlives the
//! other. The ops worker and subscription streams are separate: the former
//! finishes its queue on its own, the latter stop with the reader.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocket;
use futures_util::StreamExt;
use swarmd_engine::event::Event;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::ops;
use super::reader::{Reader, ReaderEnd};
use super::writer::{Direct, Liveness, Writer};
use crate::app::AppState;
use swarmd_sessions::{CloseReason, Session};

/// Replies queued for the writer before the reader waits.
const DIRECT_CAPACITY: usize = 256;
/// How long a close the reader asked for may take to go out.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// A silent peer is dropped after this many ping intervals.
const DEAD_AFTER_PINGS: u32 = 3;

/// Serves an upgraded socket for `session` until it closes.
pub async fn serve_socket(state: AppState, session: Arc<Session>, socket: WebSocket) {
    let _open = state.sessions.socket_token();
    let attachment = session.outbox.attach();
    if session.is_closed() {
        // Deleted between the upgrade and the attach: close at once.
        session.outbox.close(CloseReason::Deleted);
    }
    let span = tracing::info_span!("ws", sid = %session.sid, conn = attachment.conn);
    async move {
        let engine = &state.engine;
        session.touch(engine.clock().now_ms());
        engine.publish_for_session(session.sid, Event::SessionAttached { sid: session.sid });
        if let Err(error) = session.persist(engine).await {
            tracing::warn!(%error, "cannot persist the session on attach");
        }
        tracing::info!(parked = session.parked(), "socket attached");
        engine.wake_waiting();

        let ping_every = Duration::from_secs(state.config.ws.ping_secs.max(1));
        let liveness = Liveness::new(ping_every * DEAD_AFTER_PINGS);
        let (direct_tx, direct_rx) = mpsc::channel(DIRECT_CAPACITY);
        let ops = ops::spawn_worker(
            engine.clone(),
            state.sessions.clone(),
            session.clone(),
            direct_tx.clone(),
            &state.tasks,
        );
        let (sink, stream) = socket.split();
        let reader = Reader {
            engine,
            guards: &state.guards,
            session: &session,
            liveness: &liveness,
            direct: direct_tx.clone(),
            ops,
        };
        let writer = Writer {
            engine,
            session: &session,
            upstream: &state.upstream_attempts,
            liveness: &liveness,
            ping_every,
        };
        let reading = reader.run(stream);
        let writing = writer.run(sink, direct_rx, attachment.close);
        tokio::pin!(reading, writing);
        tokio::select! {
            end = &mut reading => {
                tracing::debug!(?end, "reader ended");
                if let ReaderEnd::Close(code, reason) = end {
                    let close = async {
                        let _ = direct_tx.send(Direct::Close(code, reason)).await;
                        (&mut writing).await
                    };
                    let _ = tokio::time::timeout(CLOSE_GRACE, close).await;
                }
            }
            end = &mut writing => tracing::debug!(?end, "writer ended"),
        }

        if session.outbox.detach(attachment.conn) {
            session.touch(engine.clock().now_ms());
            if !session.is_closed() {
                engine
                    .publish_for_session(session.sid, Event::SessionDetached { sid: session.sid });
            }
            if let Err(error) = session.persist(engine).await {
                tracing::warn!(%error, "cannot persist the session on detach");
            }
        }
        tracing::info!(parked = session.parked(), "socket detached");
    }
    .instrument(span)
    .await;
}
