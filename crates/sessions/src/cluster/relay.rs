//! A session homed on another node, as this node's layers see it: its
//! `SpawnChannel`, `SpawnHook` and `SeniorBridge` write each request to
//! the mailbox with this node as `reply_to` and wait for the reply mail,
//! which the mail pump hands to the waiter in this node's copy of the
//! session. The waits, their bounds and `SessionGone` are the local
//! session's; a cancel goes as mail behind its spawn.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_engine::SpawnError;
use swarmd_engine::ids::AttemptId;
use swarmd_spawner::operator::{
    BridgeError, HookAck, HookRequest, LiveSession, SeniorBridge, SpawnChannel, SpawnFrame,
    SpawnHook, SpawnReceipt,
};
use swarmd_types::cluster::NewMail;
use tokio::sync::oneshot;

use super::mail;
use super::postbox::SessionCluster;
use crate::bridge::req_id;
use crate::pending::Waiter;
use crate::session::Session;

/// Requests to a session homed elsewhere, through the mailbox.
#[derive(Debug)]
pub(crate) struct Relay {
    pub(crate) session: Arc<Session>,
    pub(crate) cluster: Arc<SessionCluster>,
}

impl Relay {
    fn mail(&self, kind: &str, req_id: Option<String>, body: String) -> NewMail {
        NewMail {
            sid: self.session.sid,
            to_node: None,
            reply_to: Some(self.cluster.node),
            kind: kind.to_owned(),
            req_id,
            body,
        }
    }

    /// Registers the waiter, then writes the request; a failed write
    /// withdraws the waiter again.
    async fn request<T>(
        &self,
        kind: &str,
        waiter: impl FnOnce(oneshot::Sender<T>) -> Waiter,
        body: String,
    ) -> Result<(String, oneshot::Receiver<T>), BridgeError> {
        if self.session.is_closed() {
            return Err(BridgeError::SessionGone);
        }
        let id = req_id(kind);
        let (tx, rx) = oneshot::channel();
        self.session.pending.insert(id.clone(), waiter(tx));
        let sent = self
            .cluster
            .peers
            .send_mail(&[self.mail(kind, Some(id.clone()), body)])
            .await;
        match sent {
            Ok(0) => {
                // Its record is gone: the session ended on its home.
                self.session.pending.remove(&id);
                return Err(BridgeError::SessionGone);
            }
            Ok(_) => {}
            Err(error) => {
                self.session.pending.remove(&id);
                return Err(BridgeError::Failed(format!(
                    "cannot reach the session's node: {error}"
                )));
            }
        }
        tracing::debug!(sid = %self.session.sid, kind, req_id = %id, "request relayed to the session's node");
        Ok((id, rx))
    }
}

#[async_trait]
impl SpawnChannel for Relay {
    async fn spawn(&self, frame: SpawnFrame) -> Result<SpawnReceipt, SpawnError> {
        let (req_id, reply) = self
            .request(mail::SPAWN, Waiter::Spawn, mail::encode_spawn(&frame))
            .await
            .map_err(|error| match error {
                BridgeError::SessionGone => SpawnError::NoOperator(self.session.sid.to_string()),
                other => SpawnError::Failed(other.to_string()),
            })?;
        Ok(SpawnReceipt { req_id, reply })
    }

    fn cancel(&self, req_id: &str, attempt: AttemptId, reason: &str) {
        self.session.pending.remove(req_id);
        let body = mail::encode(&mail::CancelBody {
            task_id: attempt.task,
            attempt: attempt.n,
            reason: reason.to_owned(),
        });
        self.cluster
            .post
            .send(self.mail(mail::CANCEL, Some(req_id.to_owned()), body));
    }
}

#[async_trait]
impl SpawnHook for Relay {
    async fn before(&self, req: HookRequest) -> Result<HookAck, BridgeError> {
        let (_, rx) = self
            .request(mail::HOOK_BEFORE, Waiter::Hook, mail::encode_hook(&req))
            .await?;
        rx.await.map_err(|_| BridgeError::SessionGone)
    }

    fn after(&self, req: HookRequest, result: Value) {
        let body = mail::encode(&mail::HookAfterBody { req, result });
        self.cluster
            .post
            .send(self.mail(mail::HOOK_AFTER, None, body));
    }
}

#[async_trait]
impl SeniorBridge for Relay {
    async fn ask(&self, attempt: AttemptId, question: Value) -> Result<Value, BridgeError> {
        let body = mail::encode(&mail::AskBody {
            task_id: attempt.task,
            question,
        });
        let (_, rx) = self.request(mail::ASK, Waiter::Ask, body).await?;
        rx.await.map_err(|_| BridgeError::SessionGone)
    }
}

/// What a layer sees of a session homed on another node of `cluster`:
/// the relay as its spawn channel, its hooks (for kinds that take them)
/// and its senior bridge, connected or not (its home knows).
pub(crate) fn relayed(cluster: &Arc<SessionCluster>, session: &Arc<Session>) -> LiveSession {
    let relay = Arc::new(Relay {
        session: session.clone(),
        cluster: cluster.clone(),
    });
    LiveSession {
        sid: session.sid,
        kind: session.kind,
        hooks: session
            .kind
            .takes_hooks()
            .then(|| relay.clone() as Arc<dyn SpawnHook>),
        senior: Some(relay.clone()),
        spawn_channel: Some(relay),
    }
}
