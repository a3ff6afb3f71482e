//! This node's plumbing for the sessions of a cluster: what it knows as a
//! node (`SessionCluster`: its id, the mail it pushed into outboxes and
//! waits to see sent, the homes read at start) and the queue its
//! fire-and-forget mail leaves through (`Postbox`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use swarmd_engine::ids::SessionId;
use swarmd_postgres::{NewMail, NodeId, PgDb};
use tokio::sync::{Notify, mpsc};

use super::SessionRegistry;
use super::mail::{self, REPLY};
use super::pending::{Relayed, Reply};

/// The first and the longest wait before a failed mail write is tried
/// again; it is tried until it goes.
const SEND_RETRY: Duration = Duration::from_millis(100);
const SEND_RETRY_MAX: Duration = Duration::from_secs(5);

/// This node's part in the sessions of a cluster.
#[derive(Debug)]
pub(crate) struct SessionCluster {
    pub(crate) db: PgDb,
    pub(crate) node: NodeId,
    pub(crate) post: Postbox,
    /// Session mail pushed into an outbox here and not yet sent: mail id →
    /// (session, outbox id). The row goes once the outbox acknowledged it.
    pub(super) inflight: Mutex<BTreeMap<i64, (SessionId, u64)>>,
    /// The homes read at start, for `restore`.
    pub(super) homes: Mutex<HashMap<SessionId, Option<NodeId>>>,
    /// Wakes the mail pump (a session just moved here).
    pub(crate) wake: Notify,
    /// Sessions that just moved here, with the event seq their `task_done`s
    /// were delivered through: the event router routes their events after
    /// it again (`catch_ups`).
    pub(super) catch_ups: Mutex<Vec<(SessionId, u64)>>,
    pub(super) catch_up_wake: Notify,
    /// Sessions created after this (unix ms, less a margin for the nodes'
    /// clocks) are looked for at every `SESSION_SYNC`.
    pub(super) synced_ms: std::sync::atomic::AtomicU64,
}

impl SessionCluster {
    fn lock_inflight(&self) -> MutexGuard<'_, BTreeMap<i64, (SessionId, u64)>> {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_inflight(&self, id: i64) -> bool {
        self.lock_inflight().contains_key(&id)
    }

    pub(crate) fn track(&self, id: i64, sid: SessionId, outbox_id: u64) {
        self.lock_inflight().insert(id, (sid, outbox_id));
    }

    /// Stops tracking `sid`'s mail (it moved away); the outbox ids of the
    /// frames that came as mail.
    pub(crate) fn untrack(&self, sid: SessionId) -> Vec<u64> {
        let mut inflight = self.lock_inflight();
        let ids: Vec<i64> = inflight
            .iter()
            .filter(|(_, (s, _))| *s == sid)
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| inflight.remove(id))
            .map(|(_, outbox_id)| outbox_id)
            .collect()
    }

    /// The tracked mail whose frame went out (or whose session is gone
    /// from this node); no longer tracked.
    pub(crate) fn settled(&self, registry: &SessionRegistry) -> Vec<i64> {
        let mut inflight = self.lock_inflight();
        let done: Vec<i64> = inflight
            .iter()
            .filter(|(_, (sid, outbox_id))| {
                registry
                    .get(sid)
                    .is_none_or(|s| s.outbox.acked_through() >= *outbox_id)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &done {
            inflight.remove(id);
        }
        done
    }
}

/// The queue of mail this node sends without waiting (replies, cancels,
/// hand-overs), written in order by one task.
#[derive(Debug, Clone)]
pub(crate) struct Postbox {
    tx: mpsc::UnboundedSender<NewMail>,
}

impl Postbox {
    pub(super) fn start(db: PgDb) -> Postbox {
        let (tx, mut rx) = mpsc::unbounded_channel::<NewMail>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while let Ok(next) = rx.try_recv() {
                    batch.push(next);
                }
                // Sent again until it goes: a reply or a hand-over dropped
                // here would leave its attempt waiting out its lease.
                let mut wait = SEND_RETRY;
                while let Err(error) = db.send_mail(&batch).await {
                    if error.is_fenced() {
                        // Declared dead: nothing this node sends counts
                        // any more, and it is on its way out.
                        tracing::warn!(
                            mails = batch.len(),
                            "this node is fenced: session mail dropped"
                        );
                        break;
                    }
                    tracing::warn!(
                        %error,
                        mails = batch.len(),
                        retry_in_ms = wait.as_millis() as u64,
                        "cannot send session mail; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(SEND_RETRY_MAX);
                }
            }
        });
        Postbox { tx }
    }

    /// A postbox whose mail is read from the receiver (tests).
    #[cfg(test)]
    pub(crate) fn channel() -> (Postbox, mpsc::UnboundedReceiver<NewMail>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Postbox { tx }, rx)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    pub(crate) fn send(&self, mail: NewMail) {
        if self.tx.send(mail).is_err() {
            tracing::warn!("the session mail queue is closed; mail dropped");
        }
    }

    /// Sends a client's reply to a relayed request back to its node.
    pub(crate) fn reply(&self, relayed: &Relayed, req_id: &str, reply: &Reply) {
        self.send(NewMail {
            sid: relayed.sid,
            to_node: Some(relayed.reply_to),
            reply_to: None,
            kind: REPLY.to_owned(),
            req_id: Some(req_id.to_owned()),
            body: mail::encode_reply(reply),
        });
    }
}
