//! Sessions across cluster nodes (docs/decisions.md, Cluster): every
//! session has a home, the node it logged in on, moved to the node its
//! socket attaches to (or an MCP pop arrives at). Only the home delivers
//! its frames, expires it and writes its record; another node holds a copy
//! found in PostgreSQL by sid or token digest, and reaches the session
//! through the mailbox (`relay`, `mail_pump`).

use std::sync::Arc;

use swarmd_engine::auth::SessionSecret;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::HomedSession;
use swarmd_output_store::StoreError;
use swarmd_types::cluster::{NewMail, NodeId};

use super::mail;
use super::postbox::SessionCluster;
use crate::SessionRegistry;
use crate::outbox::{CloseReason, Outgoing};
use crate::session::{self, Session};

/// How far apart the nodes' clocks may be when they stamp `created_ms`.
const CLOCK_MARGIN_MS: u64 = 60_000;

impl SessionRegistry {
    pub(crate) fn cluster(&self) -> Option<&Arc<SessionCluster>> {
        self.cluster.as_ref()
    }

    /// Joins the cluster, before `restore`: homes here the sessions with no
    /// live home, and reads every session's home. Nothing outside a cluster.
    pub async fn join_cluster(&self) -> Result<(), StoreError> {
        let Some(cluster) = self.cluster() else {
            return Ok(());
        };
        let adopted = cluster.peers.adopt_orphan_sessions(cluster.node).await?;
        if !adopted.is_empty() {
            tracing::info!(
                sessions = adopted.len(),
                "homed sessions whose node is gone"
            );
        }
        let homes = cluster.peers.session_homes().await?.into_iter().collect();
        *cluster.homes.lock().unwrap_or_else(|e| e.into_inner()) = homes;
        Ok(())
    }

    /// Waits up to `wait` for the mail queued for other nodes (replies,
    /// cancels, hand-overs) to be written; true once it is, and at once
    /// outside a cluster.
    pub async fn flush_mail(&self, wait: std::time::Duration) -> bool {
        match self.cluster() {
            Some(cluster) => cluster.post.flush(wait).await,
            None => true,
        }
    }

    /// Whether this registry is one node's of a cluster.
    pub(crate) fn clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// Waits until a session moved here (never outside a cluster).
    pub(crate) async fn catch_up_wanted(&self) {
        match self.cluster() {
            Some(cluster) => cluster.catch_up_wake.notified().await,
            None => std::future::pending().await,
        }
    }

    /// The sessions that moved here since the last call, each with the
    /// seq after which the router routes their events again. Each one's
    /// watermark stays at that seq until the returned `CatchUps` is
    /// dropped, once the router has queued what it routed again.
    pub(crate) fn take_catch_ups(&self) -> CatchUps {
        let taken = self.cluster().map_or_else(Vec::new, |cluster| {
            std::mem::take(&mut *cluster.catch_ups.lock().unwrap_or_else(|e| e.into_inner()))
        });
        CatchUps {
            pending: taken.iter().map(|(s, from)| (s.sid, *from)).collect(),
            sessions: taken.into_iter().map(|(s, _)| s).collect(),
        }
    }

    /// `session` just became homed here: its watermark becomes `stored`
    /// (what its record holds, written by its previous home; see
    /// `delivery`), and the router routes its events after it again.
    fn catch_up(&self, cluster: &SessionCluster, session: &Arc<Session>, stored: Option<u64>) {
        let from = session.delivery.rewind(stored);
        cluster
            .catch_ups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((session.clone(), from));
        cluster.catch_up_wake.notify_one();
    }

    /// The other node a restored session is homed on (read at `join_cluster`).
    pub(crate) fn restored_home(&self, sid: &SessionId) -> Option<NodeId> {
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
        match cluster.peers.session_by_sid(*sid).await {
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
        // The look-up comes before the token is known to be anyone's:
        // bounded, and not repeated for a token found to be nobody's.
        let Some(_turn) = cluster.lookups.turn(&digest).await else {
            return;
        };
        // While this waited for its turn, another look-up may have found
        // the session, or found it to be nobody's.
        if self.maps().by_digest.contains_key(&digest) || cluster.lookups.recently_missed(&digest) {
            return;
        }
        match cluster
            .peers
            .session_by_digest(&session::hex(&digest))
            .await
        {
            Ok(Some(homed)) => {
                self.adopt_copy(homed);
            }
            Ok(None) => cluster.lookups.missed(digest),
            Err(error) => tracing::warn!(%error, "cannot look a session token up"),
        }
    }

    /// Keeps a stored session in memory; its roles only where nobody here
    /// holds them.
    pub(super) fn adopt_copy(&self, homed: HomedSession) -> Option<Arc<Session>> {
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

    /// Keeps copies of the sessions other nodes logged in since the last
    /// call, so a layer here finds them by role (reads sessions created in
    /// the last `CLOCK_MARGIN_MS` again: the nodes' clocks differ).
    pub(super) async fn sync_new_sessions(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let since = cluster.synced_ms.load(std::sync::atomic::Ordering::Relaxed);
        let after = i64::try_from(since.saturating_sub(CLOCK_MARGIN_MS)).unwrap_or(i64::MAX);
        match cluster.peers.sessions_created_after(after).await {
            Ok(found) => {
                let newest = found.iter().map(|h| h.record.created_ms).max();
                for homed in found {
                    if self.get(&homed.record.sid).is_none() {
                        self.adopt_copy(homed);
                    }
                }
                if let Some(newest) = newest {
                    cluster
                        .synced_ms
                        .fetch_max(newest, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err(error) => tracing::warn!(%error, "cannot read new sessions"),
        }
    }

    /// Makes this node the session's home for an MCP pop: the previous
    /// home is told, closes its socket and hands over what it had not
    /// delivered. A node that believes itself the home asks nothing.
    pub async fn claim_home(&self, session: &Arc<Session>) {
        if session.is_home() {
            return;
        }
        self.attach_home(session).await;
    }

    /// Makes this node the session's home for a socket, asking the
    /// database even when this node believes itself the home: a move to
    /// another node may be on its way here as mail (a reconnect to B and
    /// straight back), and only the database knows.
    pub async fn attach_home(&self, session: &Arc<Session>) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let _home = session.home_lock.lock().await;
        match cluster
            .peers
            .move_session_home(session.sid, cluster.node)
            .await
        {
            // It was home here already.
            Ok(Some(homed)) if homed.previous == Some(cluster.node) => session.set_elsewhere(None),
            Ok(Some(homed)) => {
                session.set_elsewhere(None);
                tracing::info!(sid = %session.sid, "session moved to this node");
                // An event the previous home routed after it stopped being
                // the home, and this node before it became it, reached
                // neither; one the previous home held when it died reached
                // nobody: the router routes the session's events again
                // from the watermark the previous home stored.
                self.catch_up(cluster, session, homed.done_through);
                if let Some(previous) = homed.previous.filter(|p| *p != cluster.node) {
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

    /// Acts on a `moved` mail: the session moved to `to`, unless this node
    /// took it back since (`home_again`). Holds the session's home lock
    /// from the check to the close, so a take-back on this node (which
    /// holds it from the database's move to what this node believes) is
    /// either seen by the check or comes after the close.
    pub(super) async fn moved_mail(&self, session: &Session, to: NodeId) {
        let _home = session.home_lock.lock().await;
        if !self.home_again(session).await {
            self.moved_away(session, to);
        }
    }

    /// Whether a `moved` mail about `session` is stale: this node took the
    /// session back after the move it reports, and the database names this
    /// node its home again.
    async fn home_again(&self, session: &Session) -> bool {
        let Some(cluster) = self.cluster() else {
            return false;
        };
        if !session.is_home() {
            return false;
        }
        match cluster.peers.session_by_sid(session.sid).await {
            Ok(Some(homed)) => homed.home == Some(cluster.node),
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(sid = %session.sid, %error, "cannot read a session's home");
                false
            }
        }
    }

    /// The session moved to `to`: its socket here closes, the frames that
    /// came as mail stay in the mailbox for the new home, and the others
    /// are handed over as mail, in order, then where each pending
    /// request's reply goes (this node's own waiters stay here; relayed
    /// ones go with their node).
    pub(super) fn moved_away(&self, session: &Session, to: NodeId) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        if session.elsewhere() == Some(to) {
            return;
        }
        session.set_elsewhere(Some(to));
        let moved = mail_outbox(cluster, session);
        // Requests already delivered: their replies now come to the new
        // home, which sends each where it is awaited.
        for (req_id, expects, reply_to) in session.pending.hand_over(cluster.node) {
            cluster.post.send(NewMail {
                sid: session.sid,
                to_node: None,
                reply_to: Some(reply_to),
                kind: mail::WAITER.to_owned(),
                req_id: Some(req_id),
                body: mail::encode(&expects),
            });
        }
        session.outbox.close(CloseReason::Replaced);
        tracing::info!(sid = %session.sid, moved, "session moved to another node");
    }

    /// Mails what `session`'s outbox holds to its home once this node is no
    /// longer it. A `spawn_task` that runs through a move fills its slot
    /// after the move handed over the frames before it, and its
    /// `task_accepted` (or refusal), with the frames queued after it, would
    /// wait here for a socket that attaches elsewhere.
    ///
    /// Costs a single node, or a session still homed here, no lock: a move
    /// marks the session elsewhere before it takes the outbox, so a frame
    /// filled while it is still home is taken by that move.
    pub async fn hand_over_stranded(&self, session: &Session) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        if session.is_home() {
            return;
        }
        // A move in progress hands the outbox over itself, in order.
        let _home = session.home_lock.lock().await;
        if session.is_home() {
            return;
        }
        let moved = mail_outbox(cluster, session);
        if moved > 0 {
            tracing::info!(sid = %session.sid, moved, "frames filled after a move handed over");
        }
    }

    /// Tells the home of a session deleted here (a copy) to end it and
    /// delete its record: its socket is there, and a record deleted here
    /// would be written again by it. Whether the home was told.
    pub(crate) async fn tell_home_ended(&self, session: &Session) -> bool {
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
        match cluster.peers.send_mail(&[ended]).await {
            Ok(sent) => sent > 0,
            Err(error) => {
                tracing::warn!(sid = %session.sid, %error, "cannot tell a session's home it was deleted");
                false
            }
        }
    }

    /// On a cluster, one sweep step for the copies of sessions homed
    /// elsewhere: a copy whose record is gone (its home expired or deleted
    /// it) is dropped; sessions whose home is no longer alive are homed
    /// here; a copy used here since the last sweep has its activity mailed
    /// to its home.
    pub(crate) async fn sweep_copies(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        match cluster.peers.adopt_orphan_sessions(cluster.node).await {
            Ok(adopted) => {
                for homed in adopted {
                    if let Some(session) = self.get(&homed.sid) {
                        tracing::info!(sid = %homed.sid, "homed a session whose node is gone");
                        session.set_elsewhere(None);
                        // The dead home may have held `task_done`s in memory:
                        // the router routes the session's events again from
                        // the watermark it stored.
                        self.catch_up(cluster, &session, homed.done_through);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot adopt orphan sessions"),
        }
        let mut seen = Vec::new();
        for session in self.all() {
            if session.is_home() {
                continue;
            }
            // Activity here since the last report goes to the home, which
            // alone expires the session.
            if let Some(home) = session.elsewhere()
                && session.dirty()
            {
                let at = session.last_seen_ms();
                seen.push(NewMail {
                    sid: session.sid,
                    to_node: Some(home),
                    reply_to: None,
                    kind: mail::SEEN.to_owned(),
                    req_id: None,
                    body: at.to_string(),
                });
                session.reported(at);
            }
            match cluster.peers.session_by_sid(session.sid).await {
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
        for mail in seen {
            cluster.post.send(mail);
        }
    }
}

/// The sessions that moved here, as the router takes them: each yields its
/// sid and the seq its catch-up starts after. Dropping it (once the router
/// has queued what it routed again) lets their watermarks move again.
#[derive(Debug)]
pub(crate) struct CatchUps {
    pending: std::collections::VecDeque<(SessionId, u64)>,
    sessions: Vec<Arc<Session>>,
}

impl Iterator for CatchUps {
    type Item = (SessionId, u64);

    fn next(&mut self) -> Option<(SessionId, u64)> {
        self.pending.pop_front()
    }
}

impl Drop for CatchUps {
    fn drop(&mut self) {
        for session in &self.sessions {
            session.delivery.caught_up();
        }
    }
}

/// Mails the frames of `session`'s outbox to the session, in order, up to
/// its first reserved slot (a `spawn_task` still running: what follows
/// waits here until the slot is filled and `hand_over_stranded` mails it
/// in turn), but those that came here as mail (still in the mailbox for
/// the next home); how many went.
fn mail_outbox(cluster: &SessionCluster, session: &Session) -> usize {
    let from_mail = cluster.untrack(session.sid);
    let mut moved = 0;
    for (id, frame) in session.outbox.take_until_reserved() {
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
    moved
}
