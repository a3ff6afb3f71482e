//! Idempotency key claims across nodes (docs/decisions.md, Cluster): a
//! key is claimed in its own statement, before the task's record is
//! queued, so two nodes given one key at once create one task.
//!
//! A claim row names its task and the claiming node's incarnation. A
//! claim whose task is recorded is taken for good; one whose task is not
//! recorded yet is being recorded by its claimant, waited for while that
//! claimant is alive, and taken over once it is not (its late writes are
//! fenced, so the task it was recording never appears).
//!
//! Claims go over one connection of their own, pipelined, with
//! `synchronous_commit = off`: a claim is visible to every node as soon as
//! it commits, and losing one in a crash of the server loses nothing,
//! since the task's record writes its key again in the same transaction.
//! So a claim costs a round trip, not a WAL flush.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarmd_engine::ids::TaskId;
use swarmd_engine::store::KeyClaim;
use swarmd_output_store::StoreError;
use tokio_postgres::{Client, Statement};
use uuid::Uuid;

use crate::PgDb;
use crate::connect::{self, db_error};

/// How long a claim whose task a live node is still recording is waited
/// for: recording takes one group commit, so this is only reached when
/// that node is stuck. An unrecorded claim 30 s old (`HOLDER`) is taken
/// over whoever made it.
const RECORDING_PATIENCE: Duration = Duration::from_secs(10);
/// How often such a claim is looked at again, at first; the wait doubles
/// up to `RECHECK_MAX`.
const RECHECK: Duration = Duration::from_millis(10);
const RECHECK_MAX: Duration = Duration::from_millis(200);

const CLAIM: &str = "
INSERT INTO idem_keys (key, task, node, epoch) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO NOTHING";

/// The holder of a key: its task, whether that task is recorded, and
/// whether its claimant may still record it: alive with the claim's epoch
/// and claimed less than 30 s ago (recording takes one group
/// commit; a claim that old was given up, its creation dropped before it
/// recorded anything or its release lost), or a claim written with its
/// task in one group, without a node.
const HOLDER: &str = "
SELECT k.task,
       EXISTS (SELECT 1 FROM tasks t WHERE t.id = k.task),
       k.node IS NULL OR (k.claimed_at > now() - interval '30 seconds' AND EXISTS (
           SELECT 1 FROM nodes n
           WHERE n.id = k.node AND n.epoch = k.epoch AND n.state = 'alive'))
FROM idem_keys k WHERE k.key = $1";

const STEAL: &str = "
UPDATE idem_keys SET task = $2, node = $3, epoch = $4, claimed_at = now()
WHERE key = $1 AND task = $5";

const RELEASE: &str = "
DELETE FROM idem_keys k WHERE k.key = $1 AND k.task = $2
    AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = k.task)";

/// The claims connection and its prepared statements.
pub(crate) struct Claims {
    client: Client,
    claim: Statement,
    holder: Statement,
    steal: Statement,
    release: Statement,
}

/// The claims connection of a handle, opened on first use and again when
/// it closed. Racing openers each connect; the last one's is kept.
#[derive(Default)]
pub(crate) struct ClaimsSlot(Mutex<Option<Arc<Claims>>>);

impl ClaimsSlot {
    async fn get(&self, db: &PgDb) -> Result<Arc<Claims>, StoreError> {
        if let Some(claims) = self.current() {
            return Ok(claims);
        }
        let (client, connection) = connect::connect(db.config()).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "the idempotency key claims connection closed; reopened at the next claim");
            }
        });
        client
            .batch_execute("SET synchronous_commit = off")
            .await
            .map_err(db_error)?;
        let claims = Arc::new(Claims {
            claim: client.prepare(CLAIM).await.map_err(db_error)?,
            holder: client.prepare(HOLDER).await.map_err(db_error)?,
            steal: client.prepare(STEAL).await.map_err(db_error)?,
            release: client.prepare(RELEASE).await.map_err(db_error)?,
            client,
        });
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&claims));
        Ok(claims)
    }

    fn current(&self) -> Option<Arc<Claims>> {
        let slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref()
            .filter(|claims| !claims.client.is_closed())
            .map(Arc::clone)
    }
}

/// Claims `key` for `task`, or names the recorded task holding it.
pub(crate) async fn claim(db: &PgDb, key: &str, task: TaskId) -> Result<KeyClaim, StoreError> {
    let (node, epoch) = match db.fence().node() {
        Some((node, epoch)) => (Some(node), Some(epoch)),
        None => (None, None),
    };
    let claims = db.claims().get(db).await?;
    let client = &claims.client;
    let task = task.as_uuid();
    let deadline = tokio::time::Instant::now() + RECORDING_PATIENCE;
    let mut recheck = RECHECK;
    loop {
        if client
            .execute(&claims.claim, &[&key, &task, &node, &epoch])
            .await
            .map_err(db_error)?
            == 1
        {
            return Ok(KeyClaim::Claimed);
        }
        let Some(row) = client
            .query_opt(&claims.holder, &[&key])
            .await
            .map_err(db_error)?
        else {
            // Released between the two statements: claim again.
            continue;
        };
        let (holder, recorded, claimant_alive): (Uuid, bool, bool) =
            (row.get(0), row.get(1), row.get(2));
        if recorded {
            return Ok(KeyClaim::Taken(TaskId::from_uuid(holder)));
        }
        if !claimant_alive {
            let stolen = client
                .execute(&claims.steal, &[&key, &task, &node, &epoch, &holder])
                .await
                .map_err(db_error)?;
            if stolen == 1 {
                return Ok(KeyClaim::Claimed);
            }
            continue;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Busy(
                "another node is still recording the task of this idempotency key".into(),
            ));
        }
        tokio::time::sleep(recheck).await;
        recheck = (recheck * 2).min(RECHECK_MAX);
    }
}

/// Deletes `task`'s claim of `key` unless its task got recorded after all.
pub(crate) async fn release(db: &PgDb, key: &str, task: TaskId) -> Result<(), StoreError> {
    let claims = db.claims().get(db).await?;
    claims
        .client
        .execute(&claims.release, &[&key, &task.as_uuid()])
        .await
        .map_err(db_error)?;
    Ok(())
}
