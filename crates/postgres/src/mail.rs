//! Operator sessions across nodes (docs/decisions.md, Cluster): a
//! session's home node (`sessions.home_node`), a session found from any
//! node by sid or token digest, and the session mailbox (`session_mail`)
//! that carries frames to whichever node is a session's home and replies
//! to the node waiting for them, with `NOTIFY swarmd_mail` as the wake-up.
//!
//! Mail rows are written on a pooled connection, not through the ordered
//! writer: they are not the engine's state, and one node's mail keeps its
//! order because the server sends it from one queue. Bodies may carry a
//! worker credential; they are never logged. What a node writes here on
//! behalf of the cluster (mail, a session's home) is fenced as its write
//! groups are: a node declared dead writes none of it.

use swarmd_engine::ids::SessionId;
use swarmd_engine::store::HomedSession;
use swarmd_output_store::StoreError;
use swarmd_types::cluster::{Homed, Mail, NewMail, NodeId};
use uuid::Uuid;

use crate::PgCluster;
use crate::connect::db_error;
use crate::nodes::EventWake;
use crate::tasks_read::decode;

/// The `NOTIFY` channel of new mail; the payload is the node it is for,
/// or empty for a session's home.
const MAIL_CHANNEL: &str = "swarmd_mail";

/// A stored watermark (never negative when swarmd wrote it).
fn watermark(stored: Option<i64>) -> Option<u64> {
    stored.and_then(|seq| u64::try_from(seq).ok())
}

fn homed(row: &tokio_postgres::Row) -> Result<HomedSession, StoreError> {
    Ok(HomedSession {
        record: decode("sessions", "session", row.get(0))?,
        home: row.get(1),
    })
}

impl PgCluster {
    /// The stored session `sid`, with its home.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn session_by_sid(&self, sid: SessionId) -> Result<Option<HomedSession>, StoreError> {
        let client = self.db.reader().await?;
        let row = client
            .query_opt(
                "SELECT body, home_node FROM sessions WHERE sid = $1",
                &[&sid.as_uuid()],
            )
            .await
            .map_err(db_error)?;
        row.as_ref().map(homed).transpose()
    }

    /// The stored session whose token has the hex SHA-256 `digest`.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn session_by_digest(
        &self,
        digest: &str,
    ) -> Result<Option<HomedSession>, StoreError> {
        let client = self.db.reader().await?;
        let row = client
            .query_opt(
                "SELECT body, home_node FROM sessions
                 WHERE ((body::jsonb) ->> 'token_digest') = $1",
                &[&digest],
            )
            .await
            .map_err(db_error)?;
        row.as_ref().map(homed).transpose()
    }

    /// The stored sessions created (by their record's `created_ms`) after
    /// `after_ms`, so a node learns of logins on the others.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn sessions_created_after(
        &self,
        after_ms: i64,
    ) -> Result<Vec<HomedSession>, StoreError> {
        let client = self.db.reader().await?;
        let rows = client
            .query(
                "SELECT body, home_node FROM sessions
                 WHERE ((body::jsonb) ->> 'created_ms')::bigint > $1",
                &[&after_ms],
            )
            .await
            .map_err(db_error)?;
        rows.iter().map(homed).collect()
    }

    /// The stored sessions holding any of `roles`.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn sessions_with_roles(
        &self,
        roles: &[String],
    ) -> Result<Vec<HomedSession>, StoreError> {
        if roles.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.db.reader().await?;
        let rows = client
            .query(
                "SELECT body, home_node FROM sessions WHERE ((body::jsonb) -> 'roles') ?| $1::text[]",
                &[&roles],
            )
            .await
            .map_err(db_error)?;
        rows.iter().map(homed).collect()
    }

    /// Every stored session's home (at start).
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn session_homes(&self) -> Result<Vec<(SessionId, Option<NodeId>)>, StoreError> {
        let client = self.db.reader().await?;
        let rows = client
            .query("SELECT sid, home_node FROM sessions", &[])
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|row| (SessionId::from_uuid(row.get(0)), row.get(1)))
            .collect())
    }

    /// Homes on `node` every session with no home or a home that is not
    /// alive, and drops the mail addressed to a node that is not alive
    /// (its waiters died with it); returns the sessions, each with the
    /// `task_done` watermark its record holds (the one its dead home
    /// stored).
    ///
    /// # Errors
    ///
    /// `StoreError::Fenced` when this node is fenced; `StoreError::Database`
    /// when the write fails.
    pub async fn adopt_orphan_sessions(&self, node: NodeId) -> Result<Vec<Homed>, StoreError> {
        let mut client = self.db.reader().await?;
        let tx = self.fenced(&mut client).await?;
        tx.execute(
            "DELETE FROM session_mail WHERE to_node IN
                 (SELECT id FROM nodes WHERE state <> 'alive' AND id <> $1)",
            &[&node],
        )
        .await
        .map_err(db_error)?;
        let rows = tx
            .query(
                "UPDATE sessions s SET home_node = $1
                 FROM (SELECT sid, home_node AS old FROM sessions
                       WHERE home_node IS NULL OR home_node IN
                           (SELECT id FROM nodes WHERE state <> 'alive' AND id <> $1)
                       FOR UPDATE) o
                 WHERE s.sid = o.sid
                 RETURNING s.sid, o.old, ((s.body::jsonb) ->> 'done_through')::bigint",
                &[&node],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|row| Homed {
                sid: SessionId::from_uuid(row.get(0)),
                previous: row.get(1),
                done_through: watermark(row.get(2)),
            })
            .collect())
    }

    /// Homes session `sid` on `node`. `Ok(None)`: no such session;
    /// otherwise its previous home and the `task_done` watermark its record
    /// holds (the one its previous home stored).
    ///
    /// # Errors
    ///
    /// `StoreError::Fenced` when this node is fenced; `StoreError::Database`
    /// when the write fails.
    pub async fn move_session_home(
        &self,
        sid: SessionId,
        node: NodeId,
    ) -> Result<Option<Homed>, StoreError> {
        let mut client = self.db.reader().await?;
        let tx = self.fenced(&mut client).await?;
        let row = tx
            .query_opt(
                "UPDATE sessions s SET home_node = $2
                 FROM (SELECT sid, home_node AS old FROM sessions WHERE sid = $1 FOR UPDATE) o
                 WHERE s.sid = o.sid
                 RETURNING o.old, ((s.body::jsonb) ->> 'done_through')::bigint",
                &[&sid.as_uuid(), &node],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(row.map(|row| Homed {
            sid,
            previous: row.get(0),
            done_through: watermark(row.get(1)),
        }))
    }

    /// Sends `mail` in order and wakes every node's mail pump. Mail for a
    /// session that no longer exists is dropped; returns how many were
    /// sent.
    ///
    /// # Errors
    ///
    /// `StoreError::Fenced` when this node is fenced; `StoreError::Database`
    /// when the write fails.
    pub async fn send_mail(&self, mail: &[NewMail]) -> Result<u64, StoreError> {
        if mail.is_empty() {
            return Ok(0);
        }
        let sids: Vec<Uuid> = mail.iter().map(|m| m.sid.as_uuid()).collect();
        let to: Vec<Option<Uuid>> = mail.iter().map(|m| m.to_node).collect();
        let reply_to: Vec<Option<Uuid>> = mail.iter().map(|m| m.reply_to).collect();
        let kinds: Vec<&str> = mail.iter().map(|m| m.kind.as_str()).collect();
        let req_ids: Vec<Option<&str>> = mail.iter().map(|m| m.req_id.as_deref()).collect();
        let bodies: Vec<&str> = mail.iter().map(|m| m.body.as_str()).collect();
        let mut client = self.db.reader().await?;
        let tx = self.fenced(&mut client).await?;
        let sent = tx
            .query_opt(
                "WITH sent AS (
                     INSERT INTO session_mail (sid, to_node, reply_to, kind, req_id, body)
                     SELECT m.sid, m.to_node, m.reply_to, m.kind, m.req_id, m.body
                     FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[],
                                 $6::text[]) WITH ORDINALITY AS m (sid, to_node, reply_to, kind,
                                                                   req_id, body, n)
                     WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.sid = m.sid)
                     ORDER BY m.n
                     RETURNING 1
                 )
                 SELECT count(*), pg_notify($7, '') FROM sent
                 GROUP BY () HAVING count(*) > 0",
                &[
                    &sids,
                    &to,
                    &reply_to,
                    &kinds,
                    &req_ids,
                    &bodies,
                    &MAIL_CHANNEL,
                ],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(sent.map_or(0, |row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    /// A transaction on `client` that starts with this node's fence once
    /// the node is registered, so what it writes commits only while the
    /// node is alive with its epoch (and a takeover waits for it).
    /// `StoreError::Fenced`, and the node marked fenced, otherwise.
    async fn fenced<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'c>, StoreError> {
        let tx = client.transaction().await.map_err(db_error)?;
        if let Some((node, epoch)) = self.db.fence().node() {
            let fenced = tx
                .execute("SELECT swarmd_fence($1, $2)", &[&node, &epoch])
                .await
                .map_err(db_error);
            if let Err(error) = fenced {
                if error.is_fenced() {
                    self.mark_fenced();
                }
                return Err(error);
            }
        }
        Ok(tx)
    }

    /// Up to `limit` pieces of mail for `node` after `after` (its own and
    /// that of the sessions homed on it), in `id` order.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn mail_for(
        &self,
        node: NodeId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Mail>, StoreError> {
        let client = self.db.reader().await?;
        let rows = client
            .query(
                "SELECT m.id, m.sid, m.to_node, m.reply_to, m.kind, m.req_id, m.body
                 FROM session_mail m LEFT JOIN sessions s ON s.sid = m.sid AND m.to_node IS NULL
                 WHERE m.id > $2 AND (m.to_node = $1 OR s.home_node = $1)
                 ORDER BY m.id LIMIT $3",
                &[&node, &after, &limit],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|row| Mail {
                id: row.get(0),
                sid: SessionId::from_uuid(row.get(1)),
                to_node: row.get(2),
                reply_to: row.get(3),
                kind: row.get(4),
                req_id: row.get(5),
                body: row.get(6),
            })
            .collect())
    }

    /// Deletes mail that was delivered.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the write fails.
    pub async fn delete_mail(&self, ids: &[i64]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let client = self.db.reader().await?;
        client
            .execute("DELETE FROM session_mail WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Deletes a request's mail that was not delivered yet (its caller
    /// cancelled it); says whether there was one.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the write fails.
    pub async fn withdraw_mail(&self, sid: SessionId, req_id: &str) -> Result<bool, StoreError> {
        let client = self.db.reader().await?;
        let deleted = client
            .execute(
                "DELETE FROM session_mail WHERE sid = $1 AND req_id = $2 AND to_node IS NULL",
                &[&sid.as_uuid(), &req_id],
            )
            .await
            .map_err(db_error)?;
        Ok(deleted > 0)
    }

    /// A connection of its own that `LISTEN`s for new mail (the wake-up
    /// of the mail pump, which polls too: a notification is lossy).
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the connection or the `LISTEN` fails.
    pub async fn listen_mail(&self) -> Result<EventWake, StoreError> {
        self.listen(MAIL_CHANNEL, None).await
    }
}
