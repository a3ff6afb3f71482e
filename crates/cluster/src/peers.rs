//! The sessions' interface to the other nodes (`SessionPeers`) on this
//! database's coordination rows: stored sessions and their homes, the
//! session mailbox and its `NOTIFY` wake-ups, and role locks, each the
//! `PgCluster` call of the same name.

use std::sync::Arc;

use async_trait::async_trait;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::HomedSession;
use swarmd_output_store::StoreError;
use swarmd_postgres::{EventWake, Homed, Mail, NewMail, NodeId, PgCluster, PgDb, RoleLock};
use swarmd_sessions::{MailWake, RoleHold, SessionPeers};

/// What `SessionRegistry::in_cluster` is given on a node of `db`.
pub fn session_peers(db: &PgDb) -> Arc<dyn SessionPeers> {
    Arc::new(PgPeers(db.cluster()))
}

#[derive(Debug)]
struct PgPeers(PgCluster);

#[async_trait]
impl SessionPeers for PgPeers {
    async fn session_by_sid(&self, sid: SessionId) -> Result<Option<HomedSession>, StoreError> {
        self.0.session_by_sid(sid).await
    }

    async fn session_by_digest(&self, digest: &str) -> Result<Option<HomedSession>, StoreError> {
        self.0.session_by_digest(digest).await
    }

    async fn sessions_created_after(&self, after_ms: i64) -> Result<Vec<HomedSession>, StoreError> {
        self.0.sessions_created_after(after_ms).await
    }

    async fn sessions_with_roles(&self, roles: &[String]) -> Result<Vec<HomedSession>, StoreError> {
        self.0.sessions_with_roles(roles).await
    }

    async fn session_homes(&self) -> Result<Vec<(SessionId, Option<NodeId>)>, StoreError> {
        self.0.session_homes().await
    }

    async fn adopt_orphan_sessions(&self, node: NodeId) -> Result<Vec<Homed>, StoreError> {
        self.0.adopt_orphan_sessions(node).await
    }

    async fn move_session_home(
        &self,
        sid: SessionId,
        node: NodeId,
    ) -> Result<Option<Homed>, StoreError> {
        self.0.move_session_home(sid, node).await
    }

    async fn send_mail(&self, mail: &[NewMail]) -> Result<u64, StoreError> {
        self.0.send_mail(mail).await
    }

    async fn mail_for(
        &self,
        node: NodeId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Mail>, StoreError> {
        self.0.mail_for(node, after, limit).await
    }

    async fn delete_mail(&self, ids: &[i64]) -> Result<(), StoreError> {
        self.0.delete_mail(ids).await
    }

    async fn withdraw_mail(&self, sid: SessionId, req_id: &str) -> Result<bool, StoreError> {
        self.0.withdraw_mail(sid, req_id).await
    }

    async fn listen_mail(&self) -> Result<Box<dyn MailWake>, StoreError> {
        Ok(Box::new(Wake(self.0.listen_mail().await?)))
    }

    async fn lock_roles(&self, roles: &[String]) -> Result<Box<dyn RoleHold>, StoreError> {
        Ok(Box::new(Hold(self.0.lock_roles(roles).await?)))
    }
}

struct Wake(EventWake);

#[async_trait]
impl MailWake for Wake {
    async fn recv(&mut self) -> Option<()> {
        self.0.recv().await
    }
}

struct Hold(RoleLock);

#[async_trait]
impl RoleHold for Hold {
    async fn release(self: Box<Self>) {
        self.0.release().await;
    }
}
