//! PostgreSQL backend of swarmd's durable state: the engine's `TaskStore`
//! (`PgTaskStore`) and the `OutputStore` (`PgOutputStore`) on one database,
//! reached through `PgDb`.
//!
//! `PgDb` owns one dedicated writer connection, driven by a single tokio
//! task that folds every write queued meanwhile into one transaction (group
//! commit, `writer`), and a `deadpool-postgres` pool of read connections.
//! Both stores write through the same `PgDb`, so every durable write of the
//! daemon has one commit order: submission order. A write is acknowledged
//! only after its group's `COMMIT` has returned, which with PostgreSQL's
//! default `synchronous_commit = on` means its WAL is flushed to disk.
//! The schema is versioned (`schema_version`) and migrated at open under a
//! PostgreSQL advisory lock (`migrate`), so nodes starting together on an
//! empty database apply it once.

mod blobs;
mod connect;
mod keys;
mod live;
mod mail;
mod migrate;
mod nodes;
mod notice;
mod outputs;
mod owners;
mod redact;
mod roles;
mod rows;
mod runs;
mod secrets;
mod specs;
mod tasks;
mod tasks_read;
#[cfg(feature = "testing")]
pub mod testing;
mod writer;

use std::sync::Arc;

use swarmd_output_store::StoreError;
use tokio::sync::{mpsc, oneshot};

pub use connect::{DEFAULT_MAX_BATCH, DEFAULT_POOL_SIZE, PgOptions};
pub use migrate::SCHEMA_VERSION;
pub use nodes::{EventWake, NodeId, NodeRow, OfferEntries, Registration, Takeover};
pub use outputs::PgOutputStore;
pub use owners::{OwnerKey, TaskOwner};
pub use redact::redact_url;
pub use roles::RoleLock;
pub use secrets::PgSecrets;
pub use swarmd_engine::store::HomedSession;
pub use swarmd_types::cluster::{Homed, Mail, NewMail};
pub use tasks::PgTaskStore;
pub use writer::WriterStats;

/// The shared PostgreSQL handle: cheap to clone. The writer stops once
/// `close` is called or every clone has dropped, after committing what was
/// queued.
#[derive(Clone)]
pub struct PgDb {
    inner: Arc<Inner>,
}

struct Inner {
    pool: deadpool_postgres::Pool,
    jobs: mpsc::UnboundedSender<writer::Command>,
    stats: Arc<WriterStats>,
    fence: Arc<writer::Fence>,
    /// The tasks whose spec this process has sent (`specs`), shared with
    /// the writer, which empties it when a group fails.
    specs: Arc<specs::SpecsSent>,
    config: tokio_postgres::Config,
    /// The idempotency key claims' own connection (`keys`).
    claims: keys::ClaimsSlot,
}

/// The cluster's coordination rows on this database, apart from the
/// stores: nodes, their leases, fencing and takeover (`nodes`), session
/// homes and the session mailbox (`mail`), role locks (`roles`) and the
/// owner of a live task (`owners`). A view on the same connections and
/// fence as the stores (`PgDb::cluster`).
#[derive(Clone, Debug)]
pub struct PgCluster {
    db: PgDb,
}

impl PgDb {
    /// This database as the cluster's coordination rows.
    pub fn cluster(&self) -> PgCluster {
        PgCluster { db: self.clone() }
    }
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("stats", &self.inner.stats)
            .finish_non_exhaustive()
    }
}

impl PgDb {
    /// Connects, applies the schema migrations this build knows (under the
    /// advisory lock), and starts the writer task. Needs a tokio runtime.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the server cannot be reached or refuses
    /// the login; `StoreError::Schema` when the database carries a newer
    /// schema than [`SCHEMA_VERSION`].
    pub async fn open(opts: PgOptions) -> Result<PgDb, StoreError> {
        let config = opts.pg_config()?;
        let (mut client, connection) = connect::connect(&config).await?;
        writer::drive(connection);
        migrate::migrate(&mut client).await?;
        let pool = connect::pool(config.clone(), opts.pool_size)?;
        let stats = Arc::new(WriterStats::default());
        let (jobs, receiver) = mpsc::unbounded_channel();
        let fence = Arc::new(writer::Fence::default());
        let specs = Arc::new(specs::SpecsSent::default());
        let writer = writer::Writer::new(
            config.clone(),
            client,
            Arc::clone(&stats),
            Arc::clone(&fence),
            Arc::clone(&specs),
        )
        .await?;
        tokio::spawn(writer.run(receiver, opts.max_batch.max(1)));
        Ok(PgDb {
            inner: Arc::new(Inner {
                pool,
                jobs,
                stats,
                fence,
                specs,
                config,
                claims: keys::ClaimsSlot::default(),
            }),
        })
    }

    /// Queues `op` on the writer now (call order is commit order); `done`
    /// runs on the writer task once the group holding it has committed or
    /// failed, in submission order. If the writer has stopped, `done` runs
    /// here with `StoreError::Closed`.
    pub(crate) fn submit(&self, op: writer::Op, done: writer::Done) {
        if let Err(refused) = self
            .inner
            .jobs
            .send(writer::Command::Job(writer::Job { op, done }))
            && let writer::Command::Job(job) = refused.0
        {
            self.inner.specs.forget_all();
            (job.done)(Err(StoreError::Closed));
        }
    }

    /// Like `submit`, resolving when done.
    pub(crate) async fn write(&self, op: writer::Op) -> Result<u64, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.submit(
            op,
            Box::new(move |outcome| {
                let _ = tx.send(outcome);
            }),
        );
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// The tasks whose spec this process has sent.
    pub(crate) fn specs(&self) -> &specs::SpecsSent {
        &self.inner.specs
    }

    /// The driver's configuration every connection of this handle uses.
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.inner.config
    }

    /// The idempotency key claims' connection slot.
    pub(crate) fn claims(&self) -> &keys::ClaimsSlot {
        &self.inner.claims
    }

    /// A pooled read connection.
    pub(crate) async fn reader(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.pool.get().await.map_err(connect::pool_error)
    }

    /// Counters of the writer task.
    pub fn stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Proves the writer commits and a reader answers, for readiness.
    pub async fn healthcheck(&self) -> Result<(), StoreError> {
        self.write(writer::Op::Ping).await?;
        self.reader()
            .await?
            .simple_query("SELECT 1")
            .await
            .map_err(connect::db_error)?;
        Ok(())
    }

    /// Commits what is queued and stops the writer; later writes fail with
    /// `StoreError::Closed`. A registered node then leaves the cluster, so
    /// its peers take its live tasks over at once. Calling it again is a
    /// no-op.
    pub async fn close(&self) {
        let (ack, acked) = oneshot::channel();
        if self.inner.jobs.send(writer::Command::Close(ack)).is_ok() {
            let _ = acked.await;
            if let Err(error) = self.cluster().leave().await {
                tracing::warn!(%error, "could not mark this node as left");
            }
        }
        self.inner.pool.close();
    }
}
