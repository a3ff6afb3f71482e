//! Durable output events of swarmd attempts: the `OutputStore` trait and
//! its two backends, over `swarmd-types`' `OutputEvent` (re-exported).
//!
//! Every attempt of a task writes an ordered stream of `OutputRecord`s keyed by
//! `(task, attempt, seq)`, where `seq` starts at 1 and grows by one per record.
//! `MemoryOutputStore` keeps streams in a mutex-guarded map for tests and
//! ephemeral mode. `SqliteOutputStore` stores them in the `outputs` table of the
//! shared `swarmd.db`, reached through `SqliteDb`: one writer thread owns the
//! only write connection and folds concurrent writes into group commits, and a
//! small pool of read connections serves queries. The engine's own tables use
//! the same `SqliteDb`, so all durable state shares one commit order. Inline
//! values above `inline_max_bytes` are spilled to content-addressed blob files
//! before the row that names them commits, and swept once no row names them
//! (`OutputStore::sweep_blobs`). This crate never interprets task
//! status or lifecycle: deciding which tasks to `forget` is the engine's job.

mod clock;
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod histogram;
mod memory;
pub mod nesting;
mod spill;
pub mod sqlite;
mod sweep;

use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

pub use clock::{Clock, ManualClock, SystemClock};
pub use nesting::{DepthError, MAX_JSON_DEPTH, check_text_depth, check_value_depth};
pub use spill::{
    BlobSpill, CreatedBlob, EncodedEvent, SpilledValue, blob_name, encode_events, spill_values,
};
pub use swarmd_types::output::{ContentRef, MAX_ARTIFACT_NAME, OutputEvent, OutputRecord};
pub use sweep::{BlobSweep, REFERENCE_MARK, is_blob_name, referenced_blob};

/// The records an `append_at` stores for `events`, numbered from
/// `first_seq`: what every backend hands back before the write is durable.
pub fn records_at(
    task: Uuid,
    attempt: u32,
    first_seq: u64,
    ts_ms: u64,
    producer: &str,
    events: Vec<OutputEvent>,
) -> Vec<OutputRecord> {
    events
        .into_iter()
        .zip(first_seq..)
        .map(|(event, seq)| OutputRecord {
            task,
            attempt,
            seq,
            ts_ms,
            producer: producer.to_owned(),
            event,
        })
        .collect()
}
pub use memory::MemoryOutputStore;
pub use sqlite::{
    SqliteDb, SqliteOptions, SqliteOutputStore, Synchronous, WriteTicket, WriterStats,
};

/// `error` and each of its causes, joined by `: `, each said once: the
/// PostgreSQL driver says only `db error` and keeps the server's reason
/// (`password authentication failed for user …`) as its cause.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// Failures of the output store and of the shared SQLite handle.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error for this operation.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Another database backend (PostgreSQL, in its own crate) reported an
    /// error for this operation; the message never carries a credential.
    #[error("database: {}", with_causes(.0.as_ref()))]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database holds a schema this build cannot use (written by a newer
    /// swarmd, or not swarmd's at all).
    #[error("schema: {0}")]
    Schema(String),
    /// A file system operation failed (database directory, blob files).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// An event could not be encoded, or a stored event could not be decoded.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The writer thread has stopped (after `SqliteDb::close`, or it died);
    /// nothing of this operation was written.
    #[error("the store is closed")]
    Closed,
    /// The group commit holding this write failed, so the write was rolled
    /// back together with the rest of its batch.
    #[error("group commit failed: {0}")]
    Batch(#[source] Arc<StoreError>),
    /// This node of a cluster was declared dead (its lease ran out and
    /// another node took its tasks over): the write was refused, nothing
    /// of it was stored.
    #[error("this node was fenced: another node took its tasks over")]
    Fenced,
    /// What the operation needs is held by another live process for longer
    /// than the store waits (an idempotency key whose task another node is
    /// still recording); retrying later succeeds.
    #[error("busy: {0}")]
    Busy(String),
    /// A job panicked; its writes were rolled back and the store keeps running.
    #[error("a store job panicked")]
    Panicked,
    /// A job written without its own savepoint failed, so its whole batch
    /// was rolled back.
    #[error("a write in the same group commit failed; the batch was rolled back")]
    UnguardedJobFailed,
    /// The database file's file system cannot hold a WAL-mode database
    /// (no shared memory support, e.g. some network file systems).
    #[error("sqlite could not switch {path} to WAL mode (journal mode is {mode})")]
    WalUnsupported {
        path: std::path::PathBuf,
        mode: String,
    },
}

impl StoreError {
    /// Whether the write was refused because this node was fenced (also
    /// when that failed the group commit holding it).
    pub fn is_fenced(&self) -> bool {
        match self {
            StoreError::Fenced => true,
            StoreError::Batch(inner) => inner.is_fenced(),
            _ => false,
        }
    }

    /// Whether the operation may succeed if retried later.
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Busy(_))
    }
}

/// Events made ready for [`OutputStore::append_at`]: in their stored form
/// (large inline values replaced by `file_ref`s to their blobs), each with
/// its encoding where the backend stores one.
///
/// Made by [`OutputStore::prepare`], its blobs are stored. Made by
/// [`OutputStore::encode`], they wait in it (`pending`) until
/// [`OutputStore::store_blobs`], so that what the events take
/// ([`Prepared::stored_bytes`]) is known before anything is stored; the
/// blobs that call created (`created`) are what
/// [`OutputStore::discard_blobs`] deletes when the write is refused after
/// all. Dropped any other way, it leaves its blobs to the sweep.
#[derive(Debug)]
pub struct Prepared {
    events: Vec<OutputEvent>,
    encoded: Vec<String>,
    pending: Vec<SpilledValue>,
    created: Vec<CreatedBlob>,
}

impl Prepared {
    /// Events in stored form with their JSON encodings, one per event (what
    /// [`BlobSpill::encode`] produced), for backends outside this crate.
    pub fn new(encoded: Vec<EncodedEvent>) -> Prepared {
        Prepared::with_pending(encoded, Vec::new())
    }

    /// Like `new`, for events naming the blobs of `pending`, not stored yet.
    pub fn with_pending(encoded: Vec<EncodedEvent>, pending: Vec<SpilledValue>) -> Prepared {
        let (events, encoded) = encoded
            .into_iter()
            .map(|encoded| (encoded.event, encoded.json))
            .unzip();
        Prepared {
            events,
            encoded,
            pending,
            created: Vec::new(),
        }
    }

    /// Whether some blob its events name is not stored yet.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Takes the values of the blobs not stored yet, for the store to store.
    pub fn take_pending(&mut self) -> Vec<SpilledValue> {
        std::mem::take(&mut self.pending)
    }

    /// Records blobs that storing its pending values created.
    pub fn add_created(&mut self, created: impl IntoIterator<Item = CreatedBlob>) {
        self.created.extend(created);
    }

    /// Takes the blobs storing its values created, for the store to discard.
    pub fn take_created(&mut self) -> Vec<CreatedBlob> {
        std::mem::take(&mut self.created)
    }

    /// The JSON encodings of the events, in order (empty where the backend
    /// keeps none).
    pub fn encoded(&self) -> &[String] {
        &self.encoded
    }

    /// Takes the events and their encodings apart.
    pub fn into_parts(self) -> (Vec<OutputEvent>, Vec<String>) {
        (self.events, self.encoded)
    }

    /// The events in stored form.
    pub fn events(&self) -> &[OutputEvent] {
        &self.events
    }

    /// How many events there are.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The bytes these events take when stored: each record's JSON plus the
    /// size of any blob it spilled to. What a per-attempt budget counts.
    pub fn stored_bytes(&self) -> u64 {
        self.events
            .iter()
            .enumerate()
            .map(|(i, event)| {
                let encoded = match self.encoded.get(i) {
                    Some(json) => json.len() as u64,
                    None => json_len(event),
                };
                let spilled = match event.content() {
                    Some(ContentRef::FileRef { size, .. }) => *size,
                    _ => 0,
                };
                encoded.saturating_add(spilled)
            })
            .sum()
    }
}

/// The length of `value`'s JSON as `serde_json` writes it, counted without
/// keeping the text.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a JSON value or an event
    // always serializes.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A lower bound on the bytes storing `events` takes, read without
/// encoding them: the lengths of their inline string values (the large
/// values agents send: partials, artifacts, Finals of text), each stored
/// at least once whether inline or spilled. Other values count nothing
/// here, so it costs a look at each event, never a walk of its value.
pub fn least_text_bytes(events: &[OutputEvent]) -> u64 {
    events
        .iter()
        .filter_map(|event| match event.content() {
            Some(ContentRef::Inline {
                value: serde_json::Value::String(text),
            }) => Some(text.len() as u64),
            _ => None,
        })
        .sum()
}

/// Resolves once the records of an [`OutputStore::append_at`] are durable.
pub type Durable = std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// Ordered, durable output streams, one per `(task, attempt)`.
///
/// Implementations are shared as `Arc<dyn OutputStore>`; every method is safe
/// to call concurrently from many tasks.
#[async_trait]
pub trait OutputStore: Send + Sync + std::fmt::Debug + 'static {
    /// Appends events in order to the (task, attempt) stream; seq starts at 1 per stream and increases by 1.
    /// Resolves only after the records are durable (SQLite: after the group commit holding them).
    ///
    /// Returns the records in their stored form: an inline value spilled to a
    /// blob comes back as `ContentRef::FileRef`. An empty `events` is a no-op.
    async fn append(
        &self,
        task: Uuid,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, StoreError>;

    /// Makes events ready for [`OutputStore::append_at`] (spills large inline
    /// values; may do file I/O).
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError>;

    /// Like `prepare`, but stores nothing: the values to spill wait in the
    /// `Prepared` for [`OutputStore::store_blobs`], so a caller can check
    /// what the events take before anything is stored, and refuse a write
    /// past a budget with nothing left behind. Stores that store nothing
    /// in `prepare` keep this default.
    async fn encode(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        self.prepare(events).await
    }

    /// Stores the blobs an [`OutputStore::encode`] left pending, durable
    /// when this returns, and records in the `Prepared` those this call
    /// created (none that were there or that another write stored at the
    /// same time). On an error, the blobs it created are deleted again.
    async fn store_blobs(&self, prepared: Prepared) -> Result<Prepared, StoreError> {
        Ok(prepared)
    }

    /// Deletes the blobs [`OutputStore::store_blobs`] created for a write
    /// that is refused after all (its attempt closed meanwhile), unless
    /// another write claimed them since: a refused write leaves nothing
    /// behind. Returns how many it deleted.
    async fn discard_blobs(&self, prepared: Prepared) -> Result<u64, StoreError> {
        let _ = prepared;
        Ok(0)
    }

    /// Appends prepared events under seqs `first_seq..` chosen by the caller,
    /// who must own the stream (the engine, for a live attempt) and hand out
    /// each seq once, in order. The write is queued before this returns, so
    /// it commits before any write queued after the call; the records come
    /// back at once, and the returned future resolves when they are durable.
    fn append_at(
        &self,
        task: Uuid,
        attempt: u32,
        first_seq: u64,
        producer: &str,
        prepared: Prepared,
    ) -> (Vec<OutputRecord>, Durable);

    /// The stream's last seq (0 when it is empty).
    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError>;

    /// Returns up to `limit` records of the stream with `seq > after_seq`, in seq order.
    async fn tail(
        &self,
        task: Uuid,
        attempt: u32,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<OutputRecord>, StoreError>;

    /// Returns the record of the stream's last `final` event, if any.
    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError>;

    /// Returns the attempts of `task` that have at least one record, ascending.
    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError>;

    /// Deletes every record of each task whose newest record is older than `before_ms`; returns records removed.
    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError>;

    /// Deletes every record of the given tasks (used by retention of terminal tasks).
    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError>;

    /// Deletes the spilled blobs that no record references and that nothing
    /// has claimed for `grace` (see the `sweep` module). Stores that never
    /// spill have nothing to sweep.
    async fn sweep_blobs(&self, grace: std::time::Duration) -> Result<BlobSweep, StoreError> {
        let _ = grace;
        Ok(BlobSweep::default())
    }

    /// The bytes of the spilled blob named `sha256` (what a `file_ref`'s
    /// `blobs/<sha256>` names), `None` when the store holds none by that
    /// name. Stores that never spill hold none.
    async fn read_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let _ = sha256;
        Ok(None)
    }
}

#[cfg(test)]
mod error_tests {
    use super::StoreError;

    /// A driver-like error that says little and keeps its reason as its cause.
    #[derive(Debug, thiserror::Error)]
    #[error("db error")]
    struct Terse(#[source] std::io::Error);

    #[test]
    fn a_database_error_says_its_causes() {
        let reason = std::io::Error::other("password authentication failed for user \"swarmd\"");
        let error = StoreError::Database(Box::new(Terse(reason)));
        assert_eq!(
            error.to_string(),
            "database: db error: password authentication failed for user \"swarmd\""
        );
    }
}
