//! Sessions across cluster nodes (docs/decisions.md, Cluster): every
//! session has a home, the node it logged in on, moved to the node its
//! socket attaches to (or an MCP pop arrives at). Only the home delivers
//! its frames, expires it and writes its record; another node holds a copy
//! found in PostgreSQL by sid or token digest, and reaches the session
//! through the mailbox (`relay`, `mail_pump`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use swarmd_engine::auth::SessionSecret;
use swarmd_engine::ids::SessionId;
use swarmd_output_store::StoreError;
use swarmd_postgres::{HomedSession, NewMail, NodeId, PgDb};
use tokio::sync::{Notify, mpsc};

use super::SessionRegistry;
use super::mail::{self, REPLY};
use super::outbox::{CloseReason, Outgoing};
use super::pending::{Relayed, Reply};
use super::session::{self, Session};

/// How many times a queued mail write is tried before it is dropped.
const SEND_TRIES: u32 = 3;
const SEND_RETRY: Duration = Duration::from_millis(200);

/// This node's part in the sessions of a cluster.
#[derive(Debug)]
pub(crate) struct SessionCluster {
    pub(crate) db: PgDb,
    pub(crate) node: NodeId,
    pub(crate) post: Postbox,
    /// Session mail pushed into an outbox here and not yet sent: mail id →
    /// (session, outbox id). The row goes once the outbox acknowledged it.
    inflight: Mutex<BTreeMap<i64, (SessionId, u64)>>,
    /// The homes read at start, for `restore`.
    homes: Mutex<HashMap<SessionId, Option<NodeId>>>,
    /// Wakes the mail pump (a session just moved here).
    pub(crate) wake: Notify,
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
    fn start(db: PgDb) -> Postbox {
        let (tx, mut rx) = mpsc::unbounded_channel::<NewMail>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while let Ok(next) = rx.try_recv() {
                    batch.push(next);
                }
                for attempt in 1..=SEND_TRIES {
                    match db.send_mail(&batch).await {
                        Ok(()) => break,
                        Err(error) if attempt == SEND_TRIES => {
                            tracing::warn!(%error, dropped = batch.len(), "cannot send session mail");
                        }
                        Err(_) => tokio::time::sleep(SEND_RETRY).await,
                    }
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

impl SessionRegistry {
    pub(crate) fn cluster(&self) -> Option<&Arc<SessionCluster>> {
        self.cluster.get()
    }

    /// Joins the cluster as `node`, before `restore`: homes here the
    /// sessions with no live home, and reads every session's home.
    pub async fn join_cluster(&self, db: PgDb, node: NodeId) -> Result<(), StoreError> {
        let adopted = db.adopt_orphan_sessions(node).await?;
        if !adopted.is_empty() {
            tracing::info!(
                sessions = adopted.len(),
                "homed sessions whose node is gone"
            );
        }
        let homes = db.session_homes().await?.into_iter().collect();
        let cluster = SessionCluster {
            post: Postbox::start(db.clone()),
            db,
            node,
            inflight: Mutex::default(),
            homes: Mutex::new(homes),
            wake: Notify::new(),
        };
        let _ = self.cluster.set(Arc::new(cluster));
        Ok(())
    }

    /// The other node a restored session is homed on (read at `join_cluster`).
    pub(super) fn restored_home(&self, sid: &SessionId) -> Option<NodeId> {
        let cluster = self.cluster()?;
        let home = cluster
            .homes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(sid)
            .flatten()?;
        (home != cluster.node).then_some(home)
    }

    /// The session `sid`, from this node's memory or, on a cluster, from
    /// PostgreSQL (kept here as a copy).
    pub async fn find(&self, sid: &SessionId) -> Option<Arc<Session>> {
        if let Some(session) = self.get(sid) {
            return Some(session);
        }
        let cluster = self.cluster()?;
        match cluster.db.session_by_sid(*sid).await {
            Ok(found) => found.and_then(|homed| self.adopt_copy(homed)),
            Err(error) => {
                tracing::warn!(%sid, %error, "cannot look a session up");
                None
            }
        }
    }

    /// Makes sure the session a bearer secret belongs to is in memory when
    /// it is stored (on a cluster), so `authenticate` finds it.
    pub async fn load_bearer(&self, bearer: &str) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let Ok(secret) = SessionSecret::parse(bearer) else {
            return;
        };
        let digest = secret.digest();
        if self.maps().by_digest.contains_key(&digest) {
            return;
        }
        match cluster.db.session_by_digest(&session::hex(&digest)).await {
            Ok(Some(homed)) => {
                self.adopt_copy(homed);
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cannot look a session token up"),
        }
    }

    /// Keeps a stored session in memory; its roles only where nobody here
    /// holds them.
    fn adopt_copy(&self, homed: HomedSession) -> Option<Arc<Session>> {
        let cluster = self.cluster()?;
        let digest = session::unhex(&homed.record.token_digest)?;
        let mut record = homed.record;
        let mut maps = self.maps();
        if let Some(session) = maps.by_sid.get(&record.sid) {
            return Some(session.clone());
        }
        record.roles.retain(|role| !maps.roles.contains_key(role));
        let session = Session::new(&record, digest, self.settings.park_max);
        session.set_elsewhere(homed.home.filter(|home| *home != cluster.node));
        for role in &session.roles {
            maps.roles.insert(role.clone(), session.sid);
        }
        maps.by_digest.insert(digest, session.sid);
        maps.by_sid.insert(session.sid, session.clone());
        Some(session)
    }

    /// Makes this node the session's home (a socket attaches, an MCP pop
    /// arrives): the previous home is told, closes its socket and hands
    /// over what it had not delivered.
    pub async fn claim_home(&self, session: &Arc<Session>) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        if session.is_home() {
            return;
        }
        match cluster
            .db
            .move_session_home(session.sid, cluster.node)
            .await
        {
            Ok(Some(previous)) => {
                session.set_elsewhere(None);
                tracing::info!(sid = %session.sid, "session moved to this node");
                if let Some(previous) = previous.filter(|p| *p != cluster.node) {
                    cluster.post.send(NewMail {
                        sid: session.sid,
                        to_node: Some(previous),
                        reply_to: Some(cluster.node),
                        kind: mail::MOVED.to_owned(),
                        req_id: None,
                        body: "{}".to_owned(),
                    });
                }
                cluster.wake.notify_one();
            }
            Ok(None) => tracing::debug!(sid = %session.sid, "a session to move is gone"),
            Err(error) => tracing::warn!(sid = %session.sid, %error, "cannot move a session here"),
        }
    }

    /// The session moved to `to`: its socket here closes, the frames that
    /// came as mail stay in the mailbox for the new home, and the others
    /// are handed over as mail, in order (replies to the spawns among them
    /// come back here, where their waiters stay).
    pub(super) fn moved_away(&self, session: &Session, to: NodeId) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        if session.elsewhere() == Some(to) {
            return;
        }
        session.set_elsewhere(Some(to));
        session.outbox.close(CloseReason::Replaced);
        let from_mail = cluster.untrack(session.sid);
        let mut moved = 0;
        for (id, frame) in session.outbox.take_all() {
            if from_mail.contains(&id) {
                continue;
            }
            let (kind, req_id, body) = match frame {
                Outgoing::Spawn(spawn) => (
                    mail::SPAWN,
                    Some(spawn.req_id.clone()),
                    mail::encode_spawn(&spawn.frame),
                ),
                Outgoing::Text { class, text } => (
                    mail::TEXT,
                    None,
                    mail::encode(&mail::TextBody {
                        class: class.into(),
                        text: text.as_str().to_owned(),
                    }),
                ),
            };
            cluster.post.send(NewMail {
                sid: session.sid,
                to_node: None,
                reply_to: Some(cluster.node),
                kind: kind.to_owned(),
                req_id,
                body,
            });
            moved += 1;
        }
        tracing::info!(sid = %session.sid, moved, "session moved to another node");
    }

    /// Tells the home of a session deleted here (a copy) to end it and
    /// delete its record: its socket is there, and a record deleted here
    /// would be written again by it. Whether the home was told.
    pub(super) async fn tell_home_ended(&self, session: &Session) -> bool {
        let (Some(cluster), Some(home)) = (self.cluster(), session.elsewhere()) else {
            return false;
        };
        let ended = NewMail {
            sid: session.sid,
            to_node: Some(home),
            reply_to: None,
            kind: mail::ENDED.to_owned(),
            req_id: None,
            body: "{}".to_owned(),
        };
        match cluster.db.send_mail(&[ended]).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(sid = %session.sid, %error, "cannot tell a session's home it was deleted");
                false
            }
        }
    }

    /// On a cluster, one sweep step for the copies of sessions homed
    /// elsewhere: a copy whose record is gone (its home expired or deleted
    /// it) is dropped; sessions whose home is no longer alive are homed
    /// here.
    pub(super) async fn sweep_copies(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        match cluster.db.adopt_orphan_sessions(cluster.node).await {
            Ok(adopted) => {
                for sid in adopted {
                    if let Some(session) = self.get(&sid) {
                        tracing::info!(%sid, "homed a session whose node is gone");
                        session.set_elsewhere(None);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot adopt orphan sessions"),
        }
        for session in self.all() {
            if session.is_home() {
                continue;
            }
            match cluster.db.session_by_sid(session.sid).await {
                Ok(Some(homed)) => {
                    let home = homed.home.filter(|h| *h != cluster.node);
                    if home.is_some() {
                        session.set_elsewhere(home);
                    }
                }
                Ok(None) => {
                    if self.forget(session.sid).is_some() {
                        tracing::debug!(sid = %session.sid, "dropped the copy of an ended session");
                        session.outbox.close(CloseReason::Expired);
                        session.pending.clear();
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot check a session copy"),
            }
        }
    }
}
