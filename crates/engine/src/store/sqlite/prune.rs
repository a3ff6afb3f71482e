//! Retention for the SQLite `TaskStore`: deletes old terminal tasks with
//! everything keyed by them, and old events, in bounded writer jobs.
//!
//! Each chunk is its own writer job, so a large backlog never holds the
//! writer (and every write queued behind it) for more than one chunk.

use std::sync::LazyLock;

use rusqlite::{Transaction, params};
use swarmd_output_store::{SqliteDb, StoreError};

use super::keys::KeyIndex;
use super::read::{sql_limit, status_list, task_id};
use super::schema::PRUNED_EVENT_SEQ;
use crate::ids::TaskId;

/// Tasks deleted per writer job.
const TASK_CHUNK: usize = 256;
/// Events deleted per writer job.
const EVENT_CHUNK: usize = 4096;

/// Walks the partial `finished_ms` index; the status test keeps the store's
/// rule ("terminal and finished before") even for a hand-edited row.
static PRUNABLE_TASKS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM tasks WHERE finished_ms < ?1 AND status IN ({}) LIMIT ?2",
        status_list(true)
    )
});

/// Deletes terminal tasks finished before `cutoff_ms` (with their attempts,
/// handles, posted-Final fingerprints and idempotency keys) and events stamped before it; returns the
/// deleted task ids in ascending (creation) order.
/// The deleted keys leave `keys` once their chunk has committed.
pub(super) async fn prune(
    db: &SqliteDb,
    keys: &KeyIndex,
    cutoff_ms: u64,
) -> Result<Vec<TaskId>, StoreError> {
    // Nothing is stamped at or beyond i64::MAX ms, so the cutoff saturates.
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    let mut gone = Vec::new();
    loop {
        let (chunk, deleted_keys) = db.write(move |tx| prune_tasks(tx, cutoff)).await?;
        keys.remove(deleted_keys.iter().map(String::as_str));
        let last = chunk.len() < TASK_CHUNK;
        gone.extend(chunk);
        if last {
            break;
        }
    }
    while db.write(move |tx| prune_events(tx, cutoff)).await? == EVENT_CHUNK {}
    gone.sort_unstable();
    Ok(gone)
}

/// One chunk of old tasks: their ids, and the idempotency keys deleted with them.
fn prune_tasks(
    tx: &Transaction<'_>,
    cutoff: i64,
) -> Result<(Vec<TaskId>, Vec<String>), StoreError> {
    let ids: Vec<[u8; 16]> = tx
        .prepare_cached(&PRUNABLE_TASKS)?
        .query_map(params![cutoff, sql_limit(TASK_CHUNK)], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut keys = Vec::new();
    for id in &ids {
        let mut select = tx.prepare_cached("SELECT key FROM idem_keys WHERE task = ?1")?;
        for key in select.query_map(params![id], |row| row.get(0))? {
            keys.push(key?);
        }
        tx.prepare_cached("DELETE FROM tasks WHERE id = ?1")?
            .execute(params![id])?;
        tx.prepare_cached("DELETE FROM attempts WHERE task = ?1")?
            .execute(params![id])?;
        tx.prepare_cached("DELETE FROM handles WHERE task = ?1")?
            .execute(params![id])?;
        tx.prepare_cached("DELETE FROM posted_finals WHERE task = ?1")?
            .execute(params![id])?;
        tx.prepare_cached("DELETE FROM idem_keys WHERE task = ?1")?
            .execute(params![id])?;
    }
    Ok((ids.into_iter().map(task_id).collect(), keys))
}

/// Deletes one chunk of old events, first raising the pruned-seq mark to the
/// highest seq stored so `load_live` never hands out a used seq again.
/// Events are appended in seq order with nondecreasing stamps, so the old
/// ones are the leading run of the seq order: the chunk is that run's first
/// `EVENT_CHUNK`, found without a time index.
fn prune_events(tx: &Transaction<'_>, cutoff: i64) -> Result<usize, StoreError> {
    let mut last_old = None;
    {
        let mut select =
            tx.prepare_cached("SELECT seq, ts_ms FROM events ORDER BY seq LIMIT ?1")?;
        let mut rows = select.query(params![sql_limit(EVENT_CHUNK)])?;
        while let Some(row) = rows.next()? {
            let (seq, ts_ms): (i64, i64) = (row.get(0)?, row.get(1)?);
            if ts_ms >= cutoff {
                break;
            }
            last_old = Some(seq);
        }
    }
    let Some(last_old) = last_old else {
        return Ok(0);
    };
    tx.prepare_cached(
        "INSERT INTO task_store_meta (name, value)
         SELECT ?1, MAX(seq) FROM events WHERE true
         ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
    )?
    .execute(params![PRUNED_EVENT_SEQ])?;
    let deleted = tx
        .prepare_cached("DELETE FROM events WHERE seq <= ?1")?
        .execute(params![last_old])?;
    Ok(deleted)
}
