//! Role names across nodes (docs/decisions.md, Cluster): a login sees the
//! holders of its roles on every node, and takes a role over from a holder
//! homed on another node only when that home, asked through the mailbox,
//! finds it stale by `auth.role_takeover_secs` and ends it. A login holds
//! its role names' locks in the database from before it reads their
//! holders until its session is stored, so logins of one name on two nodes
//! are judged one after the other.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_engine::ids::SessionId;
use swarmd_types::cluster::{NewMail, NodeId};

use super::mail;
use super::peers::RoleHold;
use super::postbox::SessionCluster;
use crate::outbox::CloseReason;
use crate::session::Session;
use crate::{SessionError, SessionRegistry};

/// How long a login waits for another node to release a stale holder.
const RELEASE_WAIT: Duration = Duration::from_secs(2);
const RELEASE_POLL: Duration = Duration::from_millis(50);

impl SessionRegistry {
    /// On a cluster, locks `roles` across nodes for one login (none for a
    /// login without roles).
    pub(crate) async fn lock_roles(
        &self,
        roles: &[String],
    ) -> Result<Option<Box<dyn RoleHold>>, SessionError> {
        let Some(cluster) = self.cluster().filter(|_| !roles.is_empty()) else {
            return Ok(None);
        };
        let lock = cluster
            .peers
            .lock_roles(roles)
            .await
            .map_err(|e| SessionError::Engine(e.into()))?;
        Ok(Some(lock))
    }

    /// On a cluster, keeps in memory the stored sessions holding any of
    /// `roles`, so a login sees holders on every node, and asks the home
    /// of each one homed elsewhere to end it if it is stale by
    /// `auth.role_takeover_secs` (only its home knows): a holder its home
    /// ended is forgotten here, and the login takes the role.
    pub(crate) async fn load_role_holders(&self, roles: &[String]) -> Result<(), SessionError> {
        let Some(cluster) = self.cluster().filter(|_| !roles.is_empty()) else {
            return Ok(());
        };
        let holders = cluster
            .peers
            .sessions_with_roles(roles)
            .await
            .map_err(|e| SessionError::Engine(e.into()))?;
        for holder in holders {
            let sid = holder.record.sid;
            let Some(copy) = self.get(&sid).or_else(|| self.adopt_copy(holder)) else {
                continue;
            };
            let Some(home) = copy.elsewhere() else {
                continue;
            };
            if self.release_elsewhere(cluster, sid, home).await {
                self.forget(sid);
                copy.outbox.close(CloseReason::Expired);
                copy.pending.clear();
            }
        }
        Ok(())
    }

    /// Asks `home` to end its session `sid` if stale; whether its record
    /// went within `RELEASE_WAIT`. A home that keeps the session says so
    /// (`KEPT`), which ends the wait at once.
    async fn release_elsewhere(
        &self,
        cluster: &SessionCluster,
        sid: SessionId,
        home: NodeId,
    ) -> bool {
        let kept = cluster.await_release(sid);
        let answered = kept.notified();
        tokio::pin!(answered);
        // Listening before the ask goes, so an answer cannot come first.
        answered.as_mut().enable();
        let ask = NewMail {
            sid,
            to_node: Some(home),
            reply_to: Some(cluster.node),
            kind: mail::RELEASE.to_owned(),
            req_id: None,
            body: "{}".to_owned(),
        };
        let released = async {
            if cluster.peers.send_mail(&[ask]).await.unwrap_or(0) == 0 {
                return false;
            }
            let until = tokio::time::Instant::now() + RELEASE_WAIT;
            while tokio::time::Instant::now() < until {
                tokio::select! {
                    () = &mut answered => return false,
                    () = tokio::time::sleep(RELEASE_POLL) => {}
                }
                if let Ok(None) = cluster.peers.session_by_sid(sid).await {
                    return true;
                }
            }
            false
        }
        .await;
        cluster.release_done(sid);
        released
    }

    /// The home's side of `release_elsewhere`: ends the session if it has
    /// had no socket and no activity for `auth.role_takeover_secs`, and
    /// otherwise tells `asked_by` that it keeps it.
    pub(super) async fn release_if_stale(
        &self,
        engine: &Engine,
        session: &Arc<Session>,
        asked_by: Option<NodeId>,
    ) {
        if !session.is_home() {
            return;
        }
        if !session.idle_at(self.clock.now_ms(), self.settings.takeover) {
            if let (Some(cluster), Some(asker)) = (self.cluster(), asked_by) {
                cluster.post.send(NewMail {
                    sid: session.sid,
                    to_node: Some(asker),
                    reply_to: None,
                    kind: mail::KEPT.to_owned(),
                    req_id: None,
                    body: "{}".to_owned(),
                });
            }
            return;
        }
        if self.forget(session.sid).is_some() {
            tracing::info!(sid = %session.sid, "a stale session's roles were taken over on another node");
            if let Err(error) = session.end(engine, CloseReason::Expired).await {
                tracing::warn!(sid = %session.sid, %error, "cannot delete a taken-over session");
            }
        }
    }
}
