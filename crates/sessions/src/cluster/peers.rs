//! What the sessions of a cluster need from the other nodes, as one
//! interface the registry is given at construction
//! (`SessionRegistry::in_cluster`): the stored sessions and their homes,
//! the session mailbox, and role locks across nodes. `swarmd-cluster`
//! implements it on the coordination rows in PostgreSQL; this crate names
//! no database.

use std::fmt::Debug;

use async_trait::async_trait;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::HomedSession;
use swarmd_output_store::StoreError;
use swarmd_types::cluster::{Homed, Mail, NewMail, NodeId};

/// The rows a cluster's nodes share about sessions. Every write a node
/// declared dead attempts fails with `StoreError::Fenced`.
#[async_trait]
pub trait SessionPeers: Send + Sync + Debug {
    /// The stored session `sid` and its home.
    async fn session_by_sid(&self, sid: SessionId) -> Result<Option<HomedSession>, StoreError>;

    /// The stored session whose token has the hex SHA-256 `digest`.
    async fn session_by_digest(&self, digest: &str) -> Result<Option<HomedSession>, StoreError>;

    /// The stored sessions created after `after_ms` (unix ms).
    async fn sessions_created_after(&self, after_ms: i64) -> Result<Vec<HomedSession>, StoreError>;

    /// The stored sessions holding any of `roles`.
    async fn sessions_with_roles(&self, roles: &[String]) -> Result<Vec<HomedSession>, StoreError>;

    /// Every stored session's home.
    async fn session_homes(&self) -> Result<Vec<(SessionId, Option<NodeId>)>, StoreError>;

    /// Homes on `node` every session with no home or a home that is not
    /// alive (dropping the mail addressed to a dead node); returns them,
    /// each with the `task_done` watermark its record holds.
    async fn adopt_orphan_sessions(&self, node: NodeId) -> Result<Vec<Homed>, StoreError>;

    /// Makes `node` the home of `sid`; `None` when no such session is stored.
    async fn move_session_home(
        &self,
        sid: SessionId,
        node: NodeId,
    ) -> Result<Option<Homed>, StoreError>;

    /// Sends `mail` in order and wakes every node's mail pump; how many
    /// were sent (mail for a session no longer stored is dropped).
    async fn send_mail(&self, mail: &[NewMail]) -> Result<u64, StoreError>;

    /// Up to `limit` pieces of mail for `node` after id `after` (its own
    /// and that of the sessions homed on it), in id order.
    async fn mail_for(&self, node: NodeId, after: i64, limit: i64)
    -> Result<Vec<Mail>, StoreError>;

    /// Deletes mail that was delivered.
    async fn delete_mail(&self, ids: &[i64]) -> Result<(), StoreError>;

    /// Deletes a request's mail that was not delivered yet (its caller
    /// cancelled it); whether there was one.
    async fn withdraw_mail(&self, sid: SessionId, req_id: &str) -> Result<bool, StoreError>;

    /// Wakes the receiver whenever mail is sent.
    async fn listen_mail(&self) -> Result<Box<dyn MailWake>, StoreError>;

    /// Locks every role name of `roles` for one login, waiting for a login
    /// of the same names on any node to end.
    async fn lock_roles(&self, roles: &[String]) -> Result<Box<dyn RoleHold>, StoreError>;
}

/// The wake-ups of `SessionPeers::listen_mail`.
#[async_trait]
pub trait MailWake: Send {
    /// The next wake-up; `None` once the listening is lost.
    async fn recv(&mut self) -> Option<()>;
}

/// Role locks held for one login, until released or dropped (a dropped
/// hold releases its locks too, later).
#[async_trait]
pub trait RoleHold: Send {
    async fn release(self: Box<Self>);
}
