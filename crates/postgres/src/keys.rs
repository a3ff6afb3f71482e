//! Idempotency key claims across nodes (docs/decisions.md, Cluster): a
//! key is claimed in its own statement, before the task's record is
//! queued, so two nodes given one key at once create one task.
//!
//! A claim row names its task and the claiming node's incarnation. A
//! claim whose task is recorded is taken for good; one whose task is not
//! recorded yet is being recorded by its claimant, waited for while that
//! claimant is alive, and taken over once it is not (its late writes are
//! fenced, so the task it was recording never appears).

use std::time::Duration;

use swarmd_engine::ids::TaskId;
use swarmd_engine::store::KeyClaim;
use swarmd_output_store::StoreError;
use uuid::Uuid;

use crate::PgDb;
use crate::connect::db_error;

/// How long a claim whose task a live node is still recording is waited
/// for: recording takes one group commit, so this is only reached when
/// that node is stuck.
const RECORDING_PATIENCE: Duration = Duration::from_secs(10);
/// How often such a claim is looked at again.
const RECHECK: Duration = Duration::from_millis(10);

const CLAIM: &str = "
INSERT INTO idem_keys (key, task, node, epoch) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO NOTHING";

/// The holder of a key: its task, whether that task is recorded, and
/// whether its claimant may still record it (alive with the claim's
/// epoch, or a claim written with its task in one group, without a node).
const HOLDER: &str = "
SELECT k.task,
       EXISTS (SELECT 1 FROM tasks t WHERE t.id = k.task),
       k.node IS NULL OR EXISTS (
           SELECT 1 FROM nodes n
           WHERE n.id = k.node AND n.epoch = k.epoch AND n.state = 'alive')
FROM idem_keys k WHERE k.key = $1";

const STEAL: &str = "
UPDATE idem_keys SET task = $2, node = $3, epoch = $4
WHERE key = $1 AND task = $5";

const RELEASE: &str = "
DELETE FROM idem_keys k WHERE k.key = $1 AND k.task = $2
    AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = k.task)";

/// Claims `key` for `task`, or names the recorded task holding it.
pub(crate) async fn claim(db: &PgDb, key: &str, task: TaskId) -> Result<KeyClaim, StoreError> {
    let (node, epoch) = match db.fence().node() {
        Some((node, epoch)) => (Some(node), Some(epoch)),
        None => (None, None),
    };
    let client = db.reader().await?;
    let claim = client.prepare_cached(CLAIM).await.map_err(db_error)?;
    let holder = client.prepare_cached(HOLDER).await.map_err(db_error)?;
    let steal = client.prepare_cached(STEAL).await.map_err(db_error)?;
    let task = task.as_uuid();
    let deadline = tokio::time::Instant::now() + RECORDING_PATIENCE;
    loop {
        if client
            .execute(&claim, &[&key, &task, &node, &epoch])
            .await
            .map_err(db_error)?
            == 1
        {
            return Ok(KeyClaim::Claimed);
        }
        let Some(row) = client.query_opt(&holder, &[&key]).await.map_err(db_error)? else {
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
                .execute(&steal, &[&key, &task, &node, &epoch, &holder])
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
        tokio::time::sleep(RECHECK).await;
    }
}

/// Deletes `task`'s claim of `key` unless its task got recorded after all.
pub(crate) async fn release(db: &PgDb, key: &str, task: TaskId) -> Result<(), StoreError> {
    let client = db.reader().await?;
    let release = client.prepare_cached(RELEASE).await.map_err(db_error)?;
    client
        .execute(&release, &[&key, &task.as_uuid()])
        .await
        .map_err(db_error)?;
    Ok(())
}
