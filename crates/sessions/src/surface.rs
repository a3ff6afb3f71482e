//! A session as the surfaces that carry its frames see it: a socket's
//! client frame read in the session's dialect, with a reply to the daemon's
//! request handed to its waiter here (`Session::answer`, which MCP's
//! `reply` and mail from another node's socket take too); and the queued
//! frames delivered to whatever sink the surface writes to (a socket, MCP's
//! `pop`), then acknowledged. The outbox's delivery rule lives here once:
//! a report of dropped frames first, every frame in queue order, a parked
//! `spawn` as `Session::prepare_spawn` writes it, and the acknowledgement
//! only after the sink took the whole batch and flushed, so a batch the
//! sink refused stays queued for the next deliverer (at least once).

use axum::extract::ws::Utf8Bytes;
use futures_util::{Sink, SinkExt};
use swarmd_engine::{Engine, EngineError, ErrorCode};

use crate::dialect::{Dialect, UpstreamAttempts};
use crate::frames::{self, ClientFrame, Reply, ServerFrame, decode, encode, into_reply};
use crate::outbox::{Batch, Outgoing, ParkedSpawn};
use crate::pending::ReplyError;
use crate::session::Session;

/// A parked `spawn` whose token expires sooner than this is re-minted.
const REMINT_WITHIN_SECS: u64 = 60;

impl Session {
    /// Reads a client frame's text from this session: its step ids taken
    /// as task ids (an upstream session's), decoded under the daemon's
    /// depth bound. A reply to a server request completes its waiter and
    /// reads as `None`; anything else the surface acts on. `Err` is the
    /// `error` frame to answer the client with.
    pub fn read(&self, text: &str) -> Result<Option<ClientFrame>, Box<ServerFrame>> {
        let frame = decode(&self.dialect.inbound(text)).map_err(|e| {
            Box::new(ServerFrame::error(
                e.req_id,
                ErrorCode::BadRequest,
                e.message,
            ))
        })?;
        let (req_id, reply) = match into_reply(frame) {
            Ok(reply) => reply,
            Err(frame) => return Ok(Some(*frame)),
        };
        match self.answer(req_id.as_str(), reply) {
            Ok(_) => Ok(None),
            Err(error) => Err(Box::new(ServerFrame::error(
                Some(req_id),
                error.code(),
                error.to_string(),
            ))),
        }
    }

    /// Completes the request `req_id` with a client's reply. `Ok(false)` is
    /// a spawn reply that came after its attempt ended (its Final was
    /// posted, or it was cancelled or timed out): normal, since nothing
    /// waits for it any more.
    pub fn answer(&self, req_id: &str, reply: Reply) -> Result<bool, ReplyError> {
        let spawn_reply = matches!(reply, Reply::Spawn(_));
        match self.pending.complete(req_id, reply) {
            Ok(()) => Ok(true),
            Err(ReplyError::Unknown(_)) if spawn_reply => {
                tracing::debug!(req_id, "late spawn reply ignored");
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Delivers `batch` (taken by `outbox.next_batch`) to `sink` as the
    /// texts of its frames, each made the sink's item by `item`, by the
    /// rule above, and acknowledges it once the sink flushed. On the sink's
    /// error nothing is acknowledged.
    pub async fn deliver<S, M>(
        &self,
        engine: &Engine,
        upstream: &UpstreamAttempts,
        batch: Batch,
        sink: &mut S,
        item: fn(Utf8Bytes) -> M,
    ) -> Result<(), S::Error>
    where
        S: Sink<M> + Unpin,
    {
        let mut last = None;
        if batch.dropped > 0 {
            sink.feed(item(encode(&ServerFrame::frames_dropped(batch.dropped))))
                .await?;
        }
        for (id, frame) in batch.frames {
            let text = match frame {
                Outgoing::Text { text, .. } => Some(text),
                Outgoing::Spawn(spawn) => self.prepare_spawn(engine, upstream, id, *spawn).await,
            };
            if let Some(text) = text {
                sink.feed(item(text)).await?;
            }
            last = Some(id);
        }
        sink.flush().await?;
        self.outbox.ack(last, batch.dropped);
        Ok(())
    }

    /// The text of a parked `spawn` (outbox id `id`) as it leaves the
    /// outbox, for whichever deliverer takes it (the socket's writer,
    /// MCP's `pop`; docs/protocol.md, Disconnects and parking). A token
    /// expiring within `REMINT_WITHIN_SECS` is re-minted first (and the
    /// queued copy updated); a spawn whose attempt is over is dropped with
    /// its waiter. A spawn to an upstream session is recorded in
    /// `upstream`.
    pub async fn prepare_spawn(
        &self,
        engine: &Engine,
        upstream: &UpstreamAttempts,
        id: u64,
        parked: ParkedSpawn,
    ) -> Option<Utf8Bytes> {
        let ParkedSpawn { req_id, mut frame } = parked;
        let now = engine.clock().now_secs();
        if frame.credential.expires_secs() <= now + REMINT_WITHIN_SECS {
            match engine
                .refresh_credential(frame.attempt, &frame.credential)
                .await
            {
                Ok(fresh) => {
                    self.outbox.update_credential(id, &fresh);
                    frame.credential = fresh;
                }
                Err(
                    EngineError::TaskTerminal
                    | EngineError::AttemptSuperseded { .. }
                    | EngineError::HandleExpired
                    | EngineError::NotFound(_),
                ) => {
                    tracing::debug!(attempt = %frame.attempt, "attempt over; parked spawn dropped");
                    self.pending.remove(&req_id);
                    return None;
                }
                Err(error) => {
                    tracing::warn!(attempt = %frame.attempt, %error, "cannot re-mint a parked spawn's token");
                }
            }
        }
        if self.dialect == Dialect::Upstream {
            upstream.record(frame.attempt);
        }
        Some(self.dialect.encode(&frames::spawn(&req_id, &frame)))
    }
}

impl ReplyError {
    /// The error code a client is told for this refusal (docs/protocol.md,
    /// Errors).
    pub fn code(&self) -> ErrorCode {
        match self {
            ReplyError::Unknown(_) => ErrorCode::UnknownRequest,
            ReplyError::WrongKind { .. } => ErrorCode::BadRequest,
        }
    }
}

#[cfg(test)]
#[path = "surface_tests.rs"]
mod tests;
