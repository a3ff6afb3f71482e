//! The reader half of a session's socket: decodes client frames and acts on
//! them. Replies to server requests complete their waiters at once;
//! `spawn_task` and `cancel_task` go to the connection's ops worker (in
//! order, and never cut off half-way); `subscribe` starts a stream owned by
//! this reader. A frame that cannot be used is answered with an `error`
//! frame and the connection stays up; a frame over the size limit closes it
//! with a policy-violation code. A session of the upstream dialect may name
//! a task by its step id (`dialect`). The writes (`spawn_task`,
//! `cancel_task`) count against the session's write rate
//! (`limits.write_rate_per_sec`): one past it is answered with a
//! `rate_limited` error frame naming its `req_id` and not acted on.
//! Replies to the daemon's own requests and subscriptions are bounded by
//! those requests and by the subscription cap instead.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, close_code};
use futures_util::StreamExt;
use futures_util::stream::SplitStream;
use swarmd_engine::Engine;
use swarmd_engine::ErrorCode;
use swarmd_engine::ids::ReqId;
use tokio::sync::mpsc;

use super::MAX_FRAME_BYTES;
use super::ops::Op;
use super::subscribe::Subscriptions;
use super::writer::{Direct, Liveness};
use crate::http::guard::{Guards, RateKey};
use swarmd_sessions::Session;
use swarmd_sessions::frames::{ClientFrame, ServerFrame};

/// Why the reader stopped.
#[derive(Debug)]
pub(super) enum ReaderEnd {
    /// The peer closed or the stream failed.
    Gone,
    /// The server closes the socket with this code and reason.
    Close(u16, &'static str),
}

pub(super) struct Reader<'a> {
    pub engine: &'a Engine,
    pub guards: &'a Guards,
    pub session: &'a Arc<Session>,
    pub liveness: &'a Liveness,
    pub direct: mpsc::Sender<Direct>,
    pub ops: mpsc::Sender<Op>,
}

impl Reader<'_> {
    pub(super) async fn run(&self, mut stream: SplitStream<WebSocket>) -> ReaderEnd {
        let mut subscriptions = Subscriptions::default();
        while let Some(message) = stream.next().await {
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    // An oversized or malformed frame, or a dead connection; a
                    // live peer gets told why (the writer tries briefly).
                    tracing::debug!(%error, "socket read failed");
                    let (code, reason) = read_failure(&error);
                    return ReaderEnd::Close(code, reason);
                }
            };
            self.liveness.heard();
            match message {
                Message::Text(text) => {
                    if text.len() > MAX_FRAME_BYTES {
                        return ReaderEnd::Close(close_code::POLICY, "frame larger than 1 MiB");
                    }
                    self.session.touch(self.engine.clock().now_ms());
                    self.handle(&mut subscriptions, text.as_str()).await;
                }
                Message::Binary(data) => {
                    if data.len() > MAX_FRAME_BYTES {
                        return ReaderEnd::Close(close_code::POLICY, "frame larger than 1 MiB");
                    }
                    let error = ServerFrame::error(
                        None,
                        ErrorCode::BadRequest,
                        "binary frames are not supported; send JSON text frames",
                    );
                    self.reply(&error).await;
                }
                // After a close, the next read sends the automatic close reply
                // and then ends the stream.
                Message::Ping(_) | Message::Pong(_) | Message::Close(_) => {}
            }
        }
        ReaderEnd::Gone
    }

    /// Hands a write to the ops worker once it has a place in the
    /// session's write rate; when there is none, answers it with a
    /// `rate_limited` error frame instead (the write is not acted on).
    async fn forward(&self, op: Op) {
        let req_id = match &op {
            Op::Spawn(spawn) => &spawn.req_id,
            Op::Cancel { req_id, .. } => req_id,
        };
        if self.limited(req_id).await {
            return;
        }
        // The ops worker lives as long as this connection's senders.
        if self.ops.send(op).await.is_err() {
            tracing::warn!("the ops worker is gone");
        }
    }

    /// Whether the session's write rate has no place for this frame; then
    /// it was answered with a `rate_limited` error frame (and is not acted
    /// on). Spawns, cancels and subscribes count: a subscribe can make the
    /// store read the log from its start.
    async fn limited(&self, req_id: &ReqId) -> bool {
        let key = RateKey::session(&self.session.sid);
        let Err(wait) = self.guards.rates().check_write(&key) else {
            return false;
        };
        self.guards.count_limited("ws");
        let error = ServerFrame::error(
            Some(req_id.clone()),
            ErrorCode::RateLimited,
            format!(
                "too many writes for this session (limits.write_rate_per_sec); \
                 this one was dropped, retry in {} ms",
                wait.as_millis().max(1)
            ),
        );
        self.reply(&error).await;
        true
    }

    async fn handle(&self, subscriptions: &mut Subscriptions, text: &str) {
        // A reply to the daemon's request is taken by the session.
        let frame = match self.session.read(text) {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(error) => {
                self.reply(&error).await;
                return;
            }
        };
        match frame {
            ClientFrame::SpawnTask(spawn) => self.forward(Op::Spawn(spawn)).await,
            ClientFrame::CancelTask { req_id, task_id } => {
                self.forward(Op::Cancel { req_id, task_id }).await;
            }
            ClientFrame::Subscribe {
                req_id,
                task_id,
                after_seq,
            } => {
                if self.limited(&req_id).await {
                    return;
                }
                let started = subscriptions.start(
                    self.engine,
                    &self.direct,
                    self.session,
                    req_id.clone(),
                    task_id,
                    after_seq,
                );
                if let Err(message) = started {
                    let frame = ServerFrame::error(Some(req_id), ErrorCode::BadRequest, message);
                    self.reply(&frame).await;
                }
            }
            // Replies were taken above.
            ClientFrame::SpawnAck { .. }
            | ClientFrame::SpawnHalt { .. }
            | ClientFrame::Answer { .. }
            | ClientFrame::HookAck { .. } => {}
        }
    }

    /// Sends a frame to this connection only (never parked).
    async fn reply(&self, frame: &ServerFrame) {
        let text = self.session.dialect.encode(frame);
        let _ = self.direct.send(Direct::Frame(text)).await;
    }
}

/// The close code and reason for a frame the socket could not read: 1007
/// for a text frame that is not UTF-8, 1008 for one over the size limit
/// (as for a whole message over 1 MiB), 1002 for any other malformed frame.
fn read_failure(error: &axum::Error) -> (u16, &'static str) {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let cause = std::error::Error::source(error).and_then(|e| e.downcast_ref::<WsError>());
    match cause {
        Some(WsError::Utf8(_)) => (close_code::INVALID, "text frame is not valid UTF-8"),
        Some(WsError::Capacity(_)) => (close_code::POLICY, "frame larger than 1 MiB"),
        _ => (close_code::PROTOCOL, "malformed frame"),
    }
}
