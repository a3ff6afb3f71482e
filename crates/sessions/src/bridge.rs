//! The engine's operator traits on a session (docs/tasks.md, Layers; Operator agents; Senior):
//! `SpawnHook` (`hook_before` → `hook_ack`, `hook_after`), `SeniorBridge`
//! (`ask` → `answer`) and `SpawnChannel` (`spawn` → `spawn_ack` /
//! `spawn_halt`, `cancel`), and `notify`, which queues a frame that needs
//! no reply. Each request registers its waiter first, then queues its
//! frame in the outbox, so a reply can never overtake its waiter;
//! a frame queued while no socket is attached is parked and delivered on
//! reconnect. Callers bound their waits; a session that ends drops every
//! waiter, which its callers see as `SessionGone`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_engine::SpawnError;
use swarmd_engine::ids::AttemptId;
use swarmd_spawner::operator::{
    BridgeError, HookAck, HookRequest, SeniorBridge, SpawnChannel, SpawnFrame, SpawnHook,
    SpawnReceipt,
};
use tokio::sync::oneshot;

use super::outbox::{FrameClass, OutboxFull, Outgoing, ParkedSpawn};
use super::pending::Waiter;
use super::session::Session;
use crate::frames::ServerFrame;

/// A fresh server-side `req_id`: `<kind>-` + 32 hex.
pub(super) fn req_id(kind: &str) -> String {
    format!("{kind}-{}", uuid::Uuid::new_v4().simple())
}

impl Session {
    /// Queues `frame` in `to`, the session that took this one over, and
    /// remembers its `req_id` here so the attempt's cancel follows it.
    async fn forward_spawn(
        &self,
        to: &Arc<Session>,
        frame: SpawnFrame,
    ) -> Result<SpawnReceipt, SpawnError> {
        tracing::debug!(sid = %self.sid, by = %to.sid, attempt = %frame.attempt, "spawn follows a takeover");
        let receipt = Box::pin(to.spawn(frame)).await?;
        self.note_moved(receipt.req_id.clone());
        Ok(receipt)
    }

    /// Registers a waiter under a new `req_id`, then queues the frame built
    /// for that id. On a full outbox the waiter is withdrawn again.
    fn request<T>(
        &self,
        kind: &str,
        waiter: impl FnOnce(oneshot::Sender<T>) -> Waiter,
        frame: impl FnOnce(String) -> Outgoing,
    ) -> Result<(String, oneshot::Receiver<T>), BridgeError> {
        if self.is_closed() {
            return Err(BridgeError::SessionGone);
        }
        let id = req_id(kind);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id.clone(), waiter(tx));
        if let Err(full) = self.outbox.push(frame(id.clone())) {
            self.pending.remove(&id);
            return Err(BridgeError::Failed(full.to_string()));
        }
        Ok((id, rx))
    }

    /// Queues a frame that needs no reply; returns its outbox id.
    pub(crate) fn notify(&self, frame: &ServerFrame) -> Result<u64, OutboxFull> {
        let class = match frame {
            ServerFrame::TaskEvent { .. } => FrameClass::Resumable,
            ServerFrame::Ask { .. }
            | ServerFrame::HookBefore { .. }
            | ServerFrame::Spawn { .. } => FrameClass::Request,
            _ => FrameClass::Notice,
        };
        self.outbox.push(Outgoing::Text {
            class,
            text: self.dialect.encode(frame),
        })
    }

    pub(super) fn request_text(&self, frame: &ServerFrame) -> Outgoing {
        Outgoing::Text {
            class: FrameClass::Request,
            text: self.dialect.encode(frame),
        }
    }
}

#[async_trait]
impl SpawnHook for Session {
    async fn before(&self, req: HookRequest) -> Result<HookAck, BridgeError> {
        let (_, rx) = self.request("hook", Waiter::Hook, |req_id| {
            self.request_text(&ServerFrame::HookBefore {
                req_id,
                task_id: req.task_id,
                agent: req.agent.clone(),
                attempt: req.attempt,
            })
        })?;
        rx.await.map_err(|_| BridgeError::SessionGone)
    }

    fn after(&self, req: HookRequest, result: Value) {
        if self.is_closed() {
            return;
        }
        let frame = ServerFrame::HookAfter {
            req_id: req_id("hook"),
            task_id: req.task_id,
            agent: req.agent,
            attempt: req.attempt,
            result,
        };
        if let Err(error) = self.notify(&frame) {
            tracing::warn!(sid = %self.sid, task_id = %req.task_id, %error, "hook_after dropped");
        }
    }
}

#[async_trait]
impl SeniorBridge for Session {
    async fn ask(&self, attempt: AttemptId, question: Value) -> Result<Value, BridgeError> {
        let (_, rx) = self.request("ask", Waiter::Ask, |req_id| {
            self.request_text(&ServerFrame::Ask {
                req_id,
                task_id: attempt.task,
                question,
            })
        })?;
        tracing::debug!(sid = %self.sid, %attempt, "senior question sent");
        rx.await.map_err(|_| BridgeError::SessionGone)
    }
}

#[async_trait]
impl SpawnChannel for Session {
    /// Queues the spawn here, or in the session that took this one's roles
    /// over: a dispatch that found this session just before a takeover
    /// (while it read the task or opened a worktree) would otherwise leave
    /// its spawn in a session nobody will attach to again.
    async fn spawn(&self, frame: SpawnFrame) -> Result<SpawnReceipt, SpawnError> {
        if let Some(to) = self.taken_over_by() {
            return self.forward_spawn(&to, frame).await;
        }
        let attempt = frame.attempt;
        let queued = self.request("spawn", Waiter::Spawn, |req_id| {
            Outgoing::Spawn(Box::new(ParkedSpawn {
                req_id,
                frame: frame.clone(),
            }))
        });
        let (req_id, reply) = match queued {
            Ok(queued) => queued,
            Err(BridgeError::SessionGone) => match self.taken_over_by() {
                Some(to) => return self.forward_spawn(&to, frame).await,
                None => return Err(SpawnError::NoOperator(self.sid.to_string())),
            },
            Err(other) => return Err(SpawnError::Failed(other.to_string())),
        };
        // Taken over between the check and the push, after the takeover
        // emptied the outbox: the spawn follows the roles.
        if let Some(to) = self.taken_over_by()
            && self.outbox.withdraw_spawn(&req_id)
        {
            self.pending.remove(&req_id);
            return self.forward_spawn(&to, frame).await;
        }
        tracing::debug!(sid = %self.sid, %attempt, %req_id, parked = !self.connected(), "spawn queued");
        Ok(SpawnReceipt { req_id, reply })
    }

    fn cancel(&self, req_id: &str, attempt: AttemptId, reason: &str) {
        // A spawn handed over to the session that took this one's roles is
        // cancelled there.
        if let Some(to) = self.moved_spawn(req_id) {
            return to.cancel(req_id, attempt, reason);
        }
        self.pending.remove(req_id);
        // A spawn never delivered needs no SubAgent stopped; the cancel still
        // goes out in case a writer is sending the spawn right now.
        self.outbox.withdraw_spawn(req_id);
        if self.is_closed() {
            return;
        }
        let frame = ServerFrame::Cancel {
            req_id: req_id.to_owned(),
            task_id: attempt.task,
            attempt: attempt.n,
            reason: reason.to_owned(),
        };
        if let Err(error) = self.notify(&frame) {
            tracing::warn!(sid = %self.sid, %attempt, %error, "cancel frame dropped");
        }
    }
}
