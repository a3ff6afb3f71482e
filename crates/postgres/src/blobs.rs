//! Spilled output values in PostgreSQL: the `blobs` table, keyed by the
//! SHA-256 of the bytes, so every node reads what any node spilled.
//!
//! A value is made durable (its own autocommit statement on a pooled
//! connection) before the output row that names it is queued on the
//! writer, so a committed output row never names a missing blob. Storing
//! a value *claims* its blob: `claimed_at` becomes the database's `now()`,
//! whether the row is new or was there. The sweep is the SQLite one's mark
//! and sweep with a grace (`swarmd-output-store`'s `sweep`), in the
//! database: list the blobs claimed before a cutoff, collect the blobs the
//! `outputs` rows reference (key-ordered pages, each its own short read),
//! then delete the listed, unreferenced ones in chunks, each `DELETE`
//! re-checking `claimed_at < cutoff` on the row itself: a blob claimed
//! after the listing survives, and a claim that finds its row deleted
//! inserts it again.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use swarmd_output_store::{
    BlobSweep, CreatedBlob, EncodedEvent, OutputEvent, REFERENCE_MARK, SpilledValue, StoreError,
    blob_name, encode_events, is_blob_name, referenced_blob, spill_values,
};
use uuid::Uuid;

use crate::PgDb;
use crate::connect::db_error;

/// Rows of `outputs` one mark-phase read takes.
const MARK_PAGE: i64 = 4096;
/// Blobs one sweep `DELETE` names.
const DELETE_CHUNK: usize = 512;

/// Spills values over the limit into `blobs` and sweeps them.
#[derive(Debug, Clone)]
pub(crate) struct PgBlobs {
    db: PgDb,
    inline_max_bytes: usize,
}

impl PgBlobs {
    pub(crate) fn new(db: PgDb, inline_max_bytes: usize) -> PgBlobs {
        PgBlobs {
            db,
            inline_max_bytes,
        }
    }

    /// Serializes `events`; values over the limit become `file_ref`s to
    /// blobs that are durable when this returns.
    pub(crate) async fn encode(
        &self,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<EncodedEvent>, StoreError> {
        let (encoded, values) = self.encode_pending(events).await?;
        self.store(values).await?;
        Ok(encoded)
    }

    /// Serializes `events`; values over the limit become `file_ref`s to
    /// blobs, whose bytes come back to be stored (`store`), nothing stored
    /// yet. Hashing runs on the blocking pool, and only for events whose
    /// whole JSON is over the limit.
    pub(crate) async fn encode_pending(
        &self,
        events: Vec<OutputEvent>,
    ) -> Result<(Vec<EncodedEvent>, Vec<SpilledValue>), StoreError> {
        let (encoded, oversized) = encode_events(events, self.inline_max_bytes)?;
        if !oversized {
            return Ok((encoded, Vec::new()));
        }
        let limit = self.inline_max_bytes;
        tokio::task::spawn_blocking(move || {
            let mut encoded = encoded;
            spill_values(&mut encoded, limit).map(|values| (encoded, values))
        })
        .await
        .map_err(|_| StoreError::Panicked)?
    }

    /// Stores `values` (claims, see `claim`); returns the blobs this call
    /// inserted. On an error, those are deleted again.
    pub(crate) async fn store(
        &self,
        values: Vec<SpilledValue>,
    ) -> Result<Vec<CreatedBlob>, StoreError> {
        let mut created = Vec::new();
        for value in &values {
            match self.claim(value).await {
                Ok(blob) => created.extend(blob),
                Err(error) => {
                    // Best effort: what is left is the sweep's.
                    let _ = self.discard(created).await;
                    return Err(error);
                }
            }
        }
        Ok(created)
    }

    /// Deletes each of `blobs` whose row is still the version its write
    /// inserted: any claim since (an `UPDATE` of `claimed_at`, here or on
    /// another node) made a new row version, and keeps it. Returns how
    /// many it deleted.
    pub(crate) async fn discard(&self, blobs: Vec<CreatedBlob>) -> Result<u64, StoreError> {
        if blobs.is_empty() {
            return Ok(0);
        }
        let client = self.db.reader().await?;
        let mut removed = 0;
        for blob in &blobs {
            let mark = i64::try_from(blob.mark).unwrap_or(i64::MAX);
            removed += client
                .execute(
                    "DELETE FROM blobs WHERE sha256 = $1 AND xmin::text::bigint = $2",
                    &[&blob.sha256, &mark],
                )
                .await
                .map_err(db_error)?;
        }
        Ok(removed)
    }

    /// Makes `value` durable under its name and renews its claim; the blob
    /// when this call inserted its row (marked with the row version's
    /// `xmin`). A blob that is there is only touched; its bytes are sent
    /// when it is not.
    async fn claim(&self, value: &SpilledValue) -> Result<Option<CreatedBlob>, StoreError> {
        let client = self.db.reader().await?;
        let touched = client
            .execute(
                "UPDATE blobs SET claimed_at = now() WHERE sha256 = $1",
                &[&value.sha256],
            )
            .await
            .map_err(db_error)?;
        if touched == 1 {
            return Ok(None);
        }
        let size = i64::try_from(value.bytes.len()).unwrap_or(i64::MAX);
        let row = client
            .query_one(
                "INSERT INTO blobs (sha256, bytes, size) VALUES ($1, $2, $3)
                 ON CONFLICT (sha256) DO UPDATE SET claimed_at = now()
                 RETURNING xmax::text = '0', xmin::text::bigint",
                &[&value.sha256, &value.bytes, &size],
            )
            .await
            .map_err(db_error)?;
        let inserted: bool = row.get(0);
        let mark: i64 = row.get(1);
        Ok(inserted.then(|| CreatedBlob::new(value.sha256.clone(), mark.unsigned_abs())))
    }

    /// Moves the blob files an earlier swarmd spilled to `dir` (a node's
    /// `<state_dir>/blobs`) into the table: each file whose bytes match its
    /// name is stored (a claim, as a spill is) and then deleted; any other
    /// file is left. Returns how many moved.
    pub(crate) async fn import_dir(&self, dir: &Path) -> Result<u64, StoreError> {
        let mut entries = match tokio::fs::read_dir(dir).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error.into()),
        };
        let mut moved = 0;
        while let Some(entry) = entries.next_entry().await? {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !is_blob_name(&name) {
                continue;
            }
            let bytes = tokio::fs::read(entry.path()).await?;
            let (sha256, bytes) = tokio::task::spawn_blocking(move || (blob_name(&bytes), bytes))
                .await
                .map_err(|_| StoreError::Panicked)?;
            if sha256 != name {
                tracing::warn!(blob = %name, "a blob file's bytes do not match its name; left where it is");
                continue;
            }
            self.claim(&SpilledValue { sha256, bytes }).await?;
            tokio::fs::remove_file(entry.path()).await?;
            moved += 1;
        }
        if moved > 0 {
            tracing::info!(moved, dir = %dir.display(), "moved spilled blobs from the state directory into PostgreSQL");
        }
        Ok(moved)
    }

    /// The bytes of blob `sha256`, `None` when there is none.
    pub(crate) async fn read(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if !is_blob_name(sha256) {
            return Ok(None);
        }
        let client = self.db.reader().await?;
        let row = client
            .query_opt("SELECT bytes FROM blobs WHERE sha256 = $1", &[&sha256])
            .await
            .map_err(db_error)?;
        Ok(row.map(|row| row.get(0)))
    }

    /// Deletes the blobs no output references and nothing claimed within
    /// `grace`, by the database's clock.
    pub(crate) async fn sweep(&self, grace: Duration) -> Result<BlobSweep, StoreError> {
        let client = self.db.reader().await?;
        let grace_secs = grace.as_secs_f64();
        let cutoff: SystemTime = client
            .query_one(
                "SELECT now() - make_interval(secs => $1::float8)",
                &[&grace_secs],
            )
            .await
            .map_err(db_error)?
            .get(0);
        let stale: Vec<String> = client
            .query("SELECT sha256 FROM blobs WHERE claimed_at < $1", &[&cutoff])
            .await
            .map_err(db_error)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        drop(client);
        if stale.is_empty() {
            return Ok(BlobSweep::default());
        }
        let referenced = self.referenced().await?;
        let (kept, garbage): (Vec<String>, Vec<String>) = stale
            .into_iter()
            .partition(|name| referenced.contains(name));
        let mut sweep = BlobSweep {
            kept: kept.len() as u64,
            ..BlobSweep::default()
        };
        for chunk in garbage.chunks(DELETE_CHUNK) {
            let client = self.db.reader().await?;
            let rows = client
                .query(
                    "DELETE FROM blobs WHERE sha256 = ANY($1) AND claimed_at < $2 RETURNING size",
                    &[&chunk, &cutoff],
                )
                .await
                .map_err(db_error)?;
            sweep.removed += rows.len() as u64;
            sweep.removed_bytes += rows
                .iter()
                .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
                .sum::<u64>();
        }
        Ok(sweep)
    }

    /// The blobs that rows of `outputs` reference, read in key-ordered
    /// pages of `MARK_PAGE` rows; only the text of rows carrying the mark
    /// is fetched.
    async fn referenced(&self) -> Result<HashSet<String>, StoreError> {
        let mut referenced = HashSet::new();
        let mut after = (Uuid::nil(), -1i64, -1i64);
        loop {
            let client = self.db.reader().await?;
            let rows = client
                .query(
                    "SELECT task, attempt, seq,
                            CASE WHEN strpos(event, $4) > 0 THEN event END
                     FROM outputs WHERE (task, attempt, seq) > ($1, $2, $3)
                     ORDER BY task, attempt, seq LIMIT $5",
                    &[&after.0, &after.1, &after.2, &REFERENCE_MARK, &MARK_PAGE],
                )
                .await
                .map_err(db_error)?;
            drop(client);
            for row in &rows {
                let Some(text) = row.get::<_, Option<&str>>(3) else {
                    continue;
                };
                if let Ok(event) = serde_json::from_str::<OutputEvent>(text)
                    && let Some(name) = referenced_blob(&event)
                {
                    referenced.insert(name.to_owned());
                }
            }
            match rows.last() {
                Some(last) if rows.len() as i64 == MARK_PAGE => {
                    after = (last.get(0), last.get(1), last.get(2));
                }
                _ => return Ok(referenced),
            }
        }
    }
}
