//! `PgOutputStore`: the durable `OutputStore` on the `outputs` table.
//!
//! Writes go through the shared writer with the task store's, so
//! `append_at` is queued before it returns and commits in call order with
//! every other write of the daemon. `append` is numbered by the writer:
//! after the stream's last committed seq and any rows of the same stream
//! pending in the group. Values too large to keep inline are spilled to
//! the `blobs` table (`blobs`), durable before the row that names them is
//! queued, so any node reads them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use swarmd_output_store::{
    BlobSweep, Clock, Durable, OutputEvent, OutputRecord, OutputStore, Prepared, StoreError,
    SystemClock, nesting, records_at,
};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::PgDb;
use crate::blobs::PgBlobs;
use crate::connect::db_error;
use crate::rows::int;
use crate::rows::{OutputRow, Row};
use crate::writer::Op;

/// The progress stage of an output read back in place of an unreadable one
/// (the same as SQLite's).
const UNREADABLE_STAGE: &str = "unreadable_output";

/// Output streams in PostgreSQL, with large inline values spilled to the
/// `blobs` table.
#[derive(Debug, Clone)]
pub struct PgOutputStore {
    db: PgDb,
    blobs: PgBlobs,
    clock: Arc<dyn Clock>,
}

impl PgOutputStore {
    /// Values whose JSON exceeds `inline_max_bytes` go to the `blobs` table.
    pub fn open(db: PgDb, inline_max_bytes: usize) -> PgOutputStore {
        PgOutputStore::with_clock(db, inline_max_bytes, Arc::new(SystemClock))
    }

    /// Moves the blob files an earlier swarmd spilled to the node's
    /// `<state_dir>/blobs` into the database, so every node reads them;
    /// returns how many moved.
    ///
    /// # Errors
    /// `StoreError::Io` when the directory or a file cannot be read;
    /// `StoreError::Database` when a blob cannot be stored.
    pub async fn import_blob_files(&self, dir: &std::path::Path) -> Result<u64, StoreError> {
        self.blobs.import_dir(dir).await
    }

    /// Like `open`, stamping records with `clock`.
    pub fn with_clock(db: PgDb, inline_max_bytes: usize, clock: Arc<dyn Clock>) -> PgOutputStore {
        let blobs = PgBlobs::new(db.clone(), inline_max_bytes);
        PgOutputStore { db, blobs, clock }
    }
}

fn is_final(event: &OutputEvent) -> bool {
    matches!(event, OutputEvent::Final { .. })
}

/// The JSON of each prepared event (encoding it when the preparer kept none).
fn jsons(prepared: &Prepared) -> Result<Vec<String>, StoreError> {
    if prepared.encoded().len() == prepared.len() {
        return Ok(prepared.encoded().to_vec());
    }
    prepared
        .events()
        .iter()
        .map(|event| serde_json::to_string(event).map_err(StoreError::from))
        .collect()
}

fn decode_row(task: Uuid, attempt: u32, row: &tokio_postgres::Row) -> OutputRecord {
    let seq: i64 = row.get(0);
    let key = format!("{task}/{attempt}/{seq}");
    let text: &str = row.get(3);
    let event =
        nesting::decode_stored("outputs", &key, text).unwrap_or_else(|_| OutputEvent::Progress {
            stage: UNREADABLE_STAGE.to_owned(),
            note: Some(format!("output {key} is stored but cannot be read")),
        });
    OutputRecord {
        task,
        attempt,
        seq: seq as u64,
        ts_ms: row.get::<_, i64>(1) as u64,
        producer: row.get(2),
        event,
    }
}

#[async_trait]
impl OutputStore for PgOutputStore {
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        Ok(Prepared::new(self.blobs.encode(events).await?))
    }

    async fn encode(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        let (encoded, pending) = self.blobs.encode_pending(events).await?;
        Ok(Prepared::with_pending(encoded, pending))
    }

    async fn store_blobs(&self, mut prepared: Prepared) -> Result<Prepared, StoreError> {
        let created = self.blobs.store(prepared.take_pending()).await?;
        prepared.add_created(created);
        Ok(prepared)
    }

    async fn discard_blobs(&self, mut prepared: Prepared) -> Result<u64, StoreError> {
        self.blobs.discard(prepared.take_created()).await
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
        let (events, encoded) = match jsons(&prepared) {
            Ok(encoded) => (prepared.into_parts().0, encoded),
            Err(error) => return (Vec::new(), Box::pin(async move { Err(error) })),
        };
        let rows = events
            .iter()
            .zip(encoded)
            .zip(first_seq..)
            .map(|((event, json), seq)| {
                Row::Output(OutputRow {
                    task,
                    attempt: i64::from(attempt),
                    seq: int(seq),
                    ts_ms: int(ts_ms),
                    producer: producer.to_owned(),
                    is_final: is_final(event),
                    event: json,
                })
            })
            .collect();
        let (sender, receiver) = oneshot::channel();
        self.db.submit(
            Op::Rows(rows),
            Box::new(move |outcome| {
                let _ = sender.send(outcome.map(drop));
            }),
        );
        let records = records_at(task, attempt, first_seq, ts_ms, producer, events);
        let durable = async move { receiver.await.unwrap_or(Err(StoreError::Closed)) };
        (records, Box::pin(durable))
    }

    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
        let client = self.db.reader().await?;
        let statement = client
            .prepare_cached(crate::rows::LAST_OUTPUT_SEQ)
            .await
            .map_err(db_error)?;
        let row = client
            .query_opt(&statement, &[&task, &i64::from(attempt)])
            .await
            .map_err(db_error)?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0) as u64))
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
        let prepared = self.prepare(events).await?;
        let encoded = jsons(&prepared)?;
        let events = prepared.into_parts().0;
        let ts_ms = self.clock.now_ms();
        let first = self
            .db
            .write(Op::AppendNext {
                task,
                attempt: i64::from(attempt),
                ts_ms: int(ts_ms),
                producer: producer.to_owned(),
                events: events.iter().map(is_final).zip(encoded).collect(),
            })
            .await?;
        Ok(records_at(task, attempt, first, ts_ms, producer, events))
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
        let client = self.db.reader().await?;
        let statement = client
            .prepare_cached(
                "SELECT seq, ts_ms, producer, event FROM outputs
                 WHERE task = $1 AND attempt = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            )
            .await
            .map_err(db_error)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &statement,
                &[&task, &i64::from(attempt), &int(after_seq), &limit],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|row| decode_row(task, attempt, row))
            .collect())
    }

    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError> {
        let client = self.db.reader().await?;
        let statement = client
            .prepare_cached(
                "SELECT seq, ts_ms, producer, event FROM outputs
                 WHERE task = $1 AND attempt = $2 AND is_final ORDER BY seq DESC LIMIT 1",
            )
            .await
            .map_err(db_error)?;
        let row = client
            .query_opt(&statement, &[&task, &i64::from(attempt)])
            .await
            .map_err(db_error)?;
        Ok(row.map(|row| decode_row(task, attempt, &row)))
    }

    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
        let client = self.db.reader().await?;
        let statement = client
            .prepare_cached("SELECT DISTINCT attempt FROM outputs WHERE task = $1 ORDER BY attempt")
            .await
            .map_err(db_error)?;
        let rows = client.query(&statement, &[&task]).await.map_err(db_error)?;
        Ok(rows.iter().map(|row| row.get::<_, i64>(0) as u32).collect())
    }

    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
        let client = self.db.reader().await?;
        client
            .execute(
                "DELETE FROM outputs WHERE task IN
                     (SELECT task FROM outputs GROUP BY task HAVING MAX(ts_ms) < $1)",
                &[&int(before_ms)],
            )
            .await
            .map_err(db_error)
    }

    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
        if tasks.is_empty() {
            return Ok(0);
        }
        let client = self.db.reader().await?;
        client
            .execute("DELETE FROM outputs WHERE task = ANY($1)", &[&tasks])
            .await
            .map_err(db_error)
    }

    async fn sweep_blobs(&self, grace: Duration) -> Result<BlobSweep, StoreError> {
        self.blobs.sweep(grace).await
    }

    async fn read_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.blobs.read(sha256).await
    }
}
