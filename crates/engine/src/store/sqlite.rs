//! The SQLite `TaskStore`: tasks, attempts, worker handles, posted-Final
//! fingerprints, idempotency keys, events, audit lines, operator sessions,
//! flow runs and flow documents in the shared `swarmd.db`.
//!
//! Concurrency: every write goes through the one writer thread of
//! `SqliteDb`, shared with the output store, so all durable state of the
//! daemon has one commit order and one group commit covers both. `submit`
//! encodes its batch on the caller's thread and queues exactly one writer
//! job for it, so a batch commits atomically, batches commit in submission
//! order, and `done` runs on the writer thread right after the commit that
//! holds its batch. Reads run on the pooled read connections and see every
//! acknowledged batch. `prune` runs as writer jobs, serialized with writes.

mod keys;
mod posted;
mod prune;
mod read;
mod runs;
mod schema;
mod write;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use swarmd_output_store::{SqliteDb, StoreError};

use super::{Done, LiveSnapshot, PostedFinal, TaskFilter, TaskListing, TaskStore, WriteOp};
use crate::audit::AuditRecord;
use crate::event::EventRecord;
use crate::ids::{RunId, TaskId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use crate::task::{AttemptRecord, Task, TaskStatus};

/// A `TaskStore` on the shared SQLite database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteTaskStore {
    db: SqliteDb,
    keys: Arc<keys::KeyIndex>,
}

impl SqliteTaskStore {
    /// The schema version this build writes, kept in `PRAGMA user_version`.
    pub const SCHEMA_VERSION: i64 = schema::SCHEMA_VERSION;

    /// Creates the store's tables if needed (blocking until that commits).
    ///
    /// # Errors
    ///
    /// `StoreError::Sqlite` naming both versions if the file was written with
    /// a newer schema than [`Self::SCHEMA_VERSION`]; `StoreError::Closed` if `db` is closed; SQLite
    /// errors otherwise.
    pub fn open(db: SqliteDb) -> Result<Self, StoreError> {
        schema::migrate(&db)?;
        let keys = Arc::new(keys::KeyIndex::default());
        schema::load_keys(&db, Arc::clone(&keys))?;
        Ok(SqliteTaskStore { db, keys })
    }

    /// The shared database handle.
    pub fn db(&self) -> &SqliteDb {
        &self.db
    }
}

#[async_trait]
impl TaskStore for SqliteTaskStore {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        self.keys.add(batch.iter().filter_map(|op| match op {
            WriteOp::IdempotencyKey { key, .. } => Some(key.as_str()),
            _ => None,
        }));
        // Rows are validated and encoded here, so the writer job is plain
        // upserts that fail only when the transaction itself does: it runs
        // without a savepoint of its own. An encoding error still travels
        // through the writer queue so that `done` runs in submission order.
        match write::encode(batch) {
            Ok(rows) => self
                .db
                .write_then_unguarded(move |tx| write::apply(tx, rows), done),
            Err(error) => self.db.write_then(move |_| Err(error), done),
        }
    }

    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        self.db.read(move |conn| read::task(conn, id)).await
    }

    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        self.db.read(move |conn| read::attempts(conn, id)).await
    }

    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError> {
        let filter = filter.clone();
        self.db
            .read(move |conn| read::list_page(conn, &filter, max_bytes))
            .await
    }

    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError> {
        self.db
            .read(move |conn| read::count_by_agent(conn, status, window))
            .await
    }

    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        if !self.keys.may_contain(key) {
            return Ok(None);
        }
        let key = key.to_owned();
        self.db
            .read(move |conn| read::task_for_key(conn, &key))
            .await
    }

    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError> {
        self.db
            .read(move |conn| posted::posted_final(conn, task, attempt))
            .await
    }

    async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.db
            .read(move |conn| read::events_after(conn, after_seq, limit))
            .await
    }

    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.db
            .read(move |conn| read::audit(conn, task, limit))
            .await
    }

    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
        self.db
            .read(move |conn| read::load_live(conn, now_secs))
            .await
    }

    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        self.db.read(move |conn| runs::run(conn, id)).await
    }

    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError> {
        let key = key.to_owned();
        self.db
            .read(move |conn| runs::run_for_key(conn, &key))
            .await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let filter = filter.clone();
        self.db
            .read(move |conn| runs::list_runs(conn, &filter))
            .await
    }

    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.db.read(runs::open_runs).await
    }

    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        let hash = hash.to_owned();
        self.db.read(move |conn| runs::flow_doc(conn, &hash)).await
    }

    async fn prune(&self, finished_before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        let gone = prune::prune(&self.db, &self.keys, finished_before_ms).await?;
        // Nothing is stamped at or beyond i64::MAX ms, so the cutoff saturates.
        runs::prune(
            &self.db,
            i64::try_from(finished_before_ms).unwrap_or(i64::MAX),
        )
        .await?;
        Ok(gone)
    }

    async fn healthcheck(&self) -> Result<(), StoreError> {
        self.db.healthcheck().await
    }
}
