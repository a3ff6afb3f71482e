//! `SqliteOutputStore`: the durable `OutputStore` on the `outputs` table of `swarmd.db`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use uuid::Uuid;

use super::{SqliteDb, blob_refs};
use crate::spill::BlobSpill;
use crate::{
    BlobSweep, Clock, Durable, OutputEvent, OutputRecord, OutputStore, Prepared, StoreError,
    SystemClock, records_at,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS outputs (
    task     BLOB    NOT NULL,
    attempt  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    ts_ms    INTEGER NOT NULL,
    producer TEXT    NOT NULL,
    event    TEXT    NOT NULL,
    PRIMARY KEY (task, attempt, seq)
) WITHOUT ROWID;
";

/// Tasks deleted per writer job by `prune` and `forget`, so retention never
/// holds the writer (and every append behind it) for long.
const DELETE_CHUNK: usize = 128;

/// Output streams in SQLite, with large inline values spilled to blob files.
///
/// Seq assignment: an append's writer job reads the stream's current last seq
/// (`ORDER BY seq DESC LIMIT 1`, one seek in the primary key the insert then
/// touches) and inserts after it. Jobs run one at a time on the writer thread
/// and see earlier jobs of the same batch, so concurrent appends to one stream
/// get dense, unique seqs. Reading the table, rather than caching next-seqs on
/// the writer, stays correct when a job or a whole batch rolls back and after
/// `prune`/`forget`, and needs no eviction.
///
/// An append is queued on the writer once its events are encoded; dropping
/// the `append` future after that point does not withdraw it.
#[derive(Debug, Clone)]
pub struct SqliteOutputStore {
    db: SqliteDb,
    spill: BlobSpill,
    clock: Arc<dyn Clock>,
}

impl SqliteOutputStore {
    /// Creates the `outputs` table if needed; values whose JSON exceeds
    /// `inline_max_bytes` go to `blob_dir` (expected: `<state_dir>/blobs`).
    pub fn open(
        db: SqliteDb,
        blob_dir: PathBuf,
        inline_max_bytes: usize,
    ) -> Result<Self, StoreError> {
        SqliteOutputStore::with_clock(db, blob_dir, inline_max_bytes, Arc::new(SystemClock))
    }

    /// Like `open`, stamping records with `clock`.
    pub fn with_clock(
        db: SqliteDb,
        blob_dir: PathBuf,
        inline_max_bytes: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        db.migrate(SCHEMA)?;
        let spill = BlobSpill::open(blob_dir, inline_max_bytes)?;
        Ok(SqliteOutputStore { db, spill, clock })
    }

    /// The shared database handle.
    pub fn db(&self) -> &SqliteDb {
        &self.db
    }
}

#[async_trait]
impl OutputStore for SqliteOutputStore {
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        Ok(Prepared::new(self.spill.encode(events).await?))
    }

    async fn encode(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        let (encoded, pending) = self.spill.encode_pending(events).await?;
        Ok(Prepared::with_pending(encoded, pending))
    }

    async fn store_blobs(&self, mut prepared: Prepared) -> Result<Prepared, StoreError> {
        let created = self.spill.store(prepared.take_pending()).await?;
        prepared.add_created(created);
        Ok(prepared)
    }

    async fn discard_blobs(&self, mut prepared: Prepared) -> Result<u64, StoreError> {
        let created = prepared.take_created();
        if created.is_empty() {
            return Ok(0);
        }
        let spill = self.spill.clone();
        tokio::task::spawn_blocking(move || spill.discard(created))
            .await
            .map_err(|_| StoreError::Panicked)
    }

    fn append_at(
        &self,
        task: Uuid,
        attempt: u32,
        first_seq: u64,
        producer: &str,
        prepared: Prepared,
    ) -> (Vec<OutputRecord>, Durable) {
        let ts_ms = self.clock.now_ms();
        // Its blobs are settled here: the rows naming them are queued.
        let (events, jsons) = prepared.into_parts();
        let row_producer = producer.to_owned();
        let ticket = self.db.write(move |tx| {
            insert_rows(tx, task, attempt, first_seq, ts_ms, &row_producer, &jsons)
        });
        let records = records_at(task, attempt, first_seq, ts_ms, producer, events);
        (records, Box::pin(ticket))
    }

    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
        self.db
            .read(move |conn| last_seq(conn, task, attempt))
            .await
    }

    async fn append(
        &self,
        task: Uuid,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (events, jsons) = self.prepare(events).await?.into_parts();
        let clock = Arc::clone(&self.clock);
        let row_producer = producer.to_owned();
        let (first_seq, ts_ms) = self
            .db
            .write(move |tx| insert_stream(tx, task, attempt, &row_producer, &jsons, &*clock))
            .await?;
        Ok(records_at(
            task, attempt, first_seq, ts_ms, producer, events,
        ))
    }

    async fn tail(
        &self,
        task: Uuid,
        attempt: u32,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let after_seq = clamp_i64(after_seq);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT seq, ts_ms, producer, event FROM outputs
                     WHERE task = ?1 AND attempt = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
                )?;
                let rows = stmt.query_map(
                    params![&task.as_bytes()[..], attempt, after_seq, limit],
                    |row| Ok(decode_row(task, attempt, row)),
                )?;
                rows.map(|row| row?).collect()
            })
            .await
    }

    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError> {
        self.db
            .read(move |conn| {
                // Walks the stream backwards; the final is normally its last record.
                let mut stmt = conn.prepare_cached(
                    "SELECT seq, ts_ms, producer, event FROM outputs
                     WHERE task = ?1 AND attempt = ?2 AND json_extract(event, '$.type') = 'final'
                     ORDER BY seq DESC LIMIT 1",
                )?;
                stmt.query_row(params![&task.as_bytes()[..], attempt], |row| {
                    Ok(decode_row(task, attempt, row))
                })
                .optional()?
                .transpose()
            })
            .await
    }

    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
        self.db.read(move |conn| list_attempts(conn, task)).await
    }

    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
        let before_ms = clamp_i64(before_ms);
        // The full scan runs on a reader so appends keep flowing; the delete
        // jobs check the age again because a task may have written since.
        let candidates = self
            .db
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT task FROM outputs GROUP BY task HAVING MAX(ts_ms) < ?1",
                )?;
                let rows = stmt.query_map([before_ms], |row| row.get::<_, [u8; 16]>(0))?;
                rows.map(|task| Ok(Uuid::from_bytes(task?)))
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .await?;
        delete_in_chunks(&self.db, candidates, move |tx, task| {
            let mut stmt = tx.prepare_cached(
                "DELETE FROM outputs WHERE task = ?1
                 AND (SELECT MAX(ts_ms) FROM outputs WHERE task = ?1) < ?2",
            )?;
            Ok(stmt.execute(params![&task.as_bytes()[..], before_ms])? as u64)
        })
        .await
    }

    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
        delete_in_chunks(&self.db, tasks.to_vec(), |tx, task| {
            let mut stmt = tx.prepare_cached("DELETE FROM outputs WHERE task = ?1")?;
            Ok(stmt.execute([&task.as_bytes()[..]])? as u64)
        })
        .await
    }

    async fn read_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.spill.read(sha256).await
    }

    async fn sweep_blobs(&self, grace: Duration) -> Result<BlobSweep, StoreError> {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let spill = self.spill.clone();
        let stale = blocking(move || spill.stale_blobs(cutoff)).await?;
        if stale.is_empty() {
            return Ok(BlobSweep::default());
        }
        let referenced = blob_refs::referenced_blobs(&self.db).await?;
        let spill = self.spill.clone();
        blocking(move || spill.remove_unreferenced(stale, &referenced, cutoff)).await
    }
}

/// The writer job of `append`: numbers the rows after the stream's last seq
/// and inserts them. Returns the first seq and the timestamp used.
fn insert_stream(
    tx: &Transaction<'_>,
    task: Uuid,
    attempt: u32,
    producer: &str,
    jsons: &[String],
    clock: &dyn Clock,
) -> Result<(u64, u64), StoreError> {
    let first = last_seq(tx, task, attempt)? + 1;
    let ts_ms = clock.now_ms();
    insert_rows(tx, task, attempt, first, ts_ms, producer, jsons)?;
    Ok((first, ts_ms))
}

/// The stream's last seq, 0 when empty: one seek at the end of its key range.
fn last_seq(conn: &Connection, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
    let last: Option<u64> = conn
        .prepare_cached(
            "SELECT seq FROM outputs WHERE task = ?1 AND attempt = ?2 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![&task.as_bytes()[..], attempt], |row| row.get(0))
        .optional()?;
    Ok(last.unwrap_or(0))
}

/// Inserts `jsons` as the stream's records `first..`; a seq already taken
/// fails the job (the primary key).
fn insert_rows(
    tx: &Transaction<'_>,
    task: Uuid,
    attempt: u32,
    first: u64,
    ts_ms: u64,
    producer: &str,
    jsons: &[String],
) -> Result<(), StoreError> {
    let task_key = &task.as_bytes()[..];
    let mut insert = tx.prepare_cached(
        "INSERT INTO outputs (task, attempt, seq, ts_ms, producer, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (seq, json) in (first..).zip(jsons) {
        insert.execute(params![task_key, attempt, seq, ts_ms, producer, json])?;
    }
    Ok(())
}

/// Attempts of `task` in ascending order, one index seek per attempt.
fn list_attempts(conn: &Connection, task: Uuid) -> Result<Vec<u32>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT attempt FROM outputs WHERE task = ?1 AND attempt > ?2 ORDER BY attempt LIMIT 1",
    )?;
    let mut attempts = Vec::new();
    let mut after = -1i64;
    while let Some(attempt) = stmt
        .query_row(params![&task.as_bytes()[..], after], |row| {
            row.get::<_, u32>(0)
        })
        .optional()?
    {
        attempts.push(attempt);
        after = i64::from(attempt);
    }
    Ok(attempts)
}

/// Runs file system work on the blocking pool.
async fn blocking<T, F>(work: F) -> Result<T, StoreError>
where
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| StoreError::Panicked)?
        .map_err(StoreError::from)
}

/// Runs `delete` for every task, `DELETE_CHUNK` tasks per writer job, and sums the rows removed.
async fn delete_in_chunks<D>(db: &SqliteDb, tasks: Vec<Uuid>, delete: D) -> Result<u64, StoreError>
where
    D: Fn(&Transaction<'_>, Uuid) -> Result<u64, StoreError> + Clone + Send + 'static,
{
    // Every chunk is queued before the first is awaited, so they share group commits.
    let tickets: Vec<_> = tasks
        .chunks(DELETE_CHUNK)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let delete = delete.clone();
            db.write(move |tx| {
                chunk
                    .iter()
                    .map(|task| delete(tx, *task))
                    .sum::<Result<u64, StoreError>>()
            })
        })
        .collect();
    let mut removed = 0;
    for ticket in tickets {
        removed += ticket.await?;
    }
    Ok(removed)
}

/// A stored output as a record. An event that cannot be decoded at all
/// comes back as a progress note saying so, so one bad row never fails a
/// whole read (see `nesting::decode_stored`).
fn decode_row(task: Uuid, attempt: u32, row: &Row<'_>) -> Result<OutputRecord, StoreError> {
    let text = row.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
    let seq: u64 = row.get(0)?;
    let key = format!("{task}/{attempt}/{seq}");
    let event = crate::nesting::decode_stored("outputs", &key, text).unwrap_or_else(|_| {
        OutputEvent::Progress {
            stage: UNREADABLE_STAGE.to_owned(),
            note: Some(format!("output {key} is stored but cannot be read")),
        }
    });
    Ok(OutputRecord {
        task,
        attempt,
        seq,
        ts_ms: row.get(1)?,
        producer: row.get(2)?,
        event,
    })
}

/// The progress stage of an output read back in place of an unreadable one.
pub(crate) const UNREADABLE_STAGE: &str = "unreadable_output";

/// SQLite integers are signed; larger values mean "no bound" for these filters.
fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
