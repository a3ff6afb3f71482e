//! The writer thread: the only write connection, folding queued jobs into group commits.
//!
//! Concurrency: a dedicated OS thread owns the write connection and takes
//! commands from a `std::sync::mpsc` channel. It blocks for the first command,
//! drains whatever else is queued (up to `max_batch`) and runs the lot in one
//! `BEGIN IMMEDIATE … COMMIT`, so one fsync covers every job of the batch.
//! Each job runs inside its own savepoint and under `catch_unwind`: a failing
//! or panicking job is rolled back to its savepoint and only its caller sees
//! the error. Outcomes are delivered after `COMMIT` returns, in queue order:
//! by this thread, or with `Synchronous::Full` by the sync thread once an
//! `fdatasync` of the WAL has made the batch durable (see `sync`). If the
//! transaction itself is lost (a savepoint or `COMMIT` fails), every job of
//! the batch receives `StoreError::Batch`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};

/// A batch this large commits at once; smaller ones linger for company.
const LINGER_UNTIL: usize = 64;

/// While the previous group is being synced, the open batch takes the jobs
/// that arrived at least this often.
const SYNC_POLL: std::time::Duration = std::time::Duration::from_micros(250);

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::sync::{Committed, SyncThread};
use crate::StoreError;
use crate::histogram::{Histogram, SYNC_BUCKETS};

/// What the writer thread consumes.
pub(super) enum Command {
    Job(Box<dyn PendingJob>),
    /// Commit what is queued before this command, checkpoint, acknowledge and stop.
    Close(Sender<()>),
}

/// The jobs of one group commit, in queue order.
type Batch = Vec<Box<dyn PendingJob>>;

/// A type-erased write job together with the way its outcome is delivered.
pub(super) trait PendingJob: Send {
    /// Whether the job runs in its own savepoint (see `commit_batch`).
    fn guarded(&self) -> bool;
    /// Runs the job against the open transaction; returns whether it succeeded.
    fn run(&mut self, tx: &Transaction<'_>) -> bool;
    /// Delivers the outcome once the batch has ended; `batch_error` is set when
    /// the batch did not commit.
    fn finish(self: Box<Self>, batch_error: Option<&Arc<StoreError>>);
}

/// Counters of the writer thread, for metrics and tests.
#[derive(Debug)]
pub struct WriterStats {
    commits: AtomicU64,
    jobs: AtomicU64,
    failed_jobs: AtomicU64,
    syncs: AtomicU64,
    sync_latency: Histogram,
    commit_latency: Histogram,
}

impl Default for WriterStats {
    fn default() -> WriterStats {
        WriterStats {
            commits: AtomicU64::default(),
            jobs: AtomicU64::default(),
            failed_jobs: AtomicU64::default(),
            syncs: AtomicU64::default(),
            sync_latency: Histogram::new(&SYNC_BUCKETS),
            commit_latency: Histogram::new(&SYNC_BUCKETS),
        }
    }
}

impl WriterStats {
    /// Batches that committed.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Counts a batch that committed.
    pub(super) fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Jobs that ran, whatever their outcome.
    pub fn jobs(&self) -> u64 {
        self.jobs.load(Ordering::Relaxed)
    }

    /// Jobs that returned an error or panicked.
    pub fn failed_jobs(&self) -> u64 {
        self.failed_jobs.load(Ordering::Relaxed)
    }

    /// `fdatasync`s of the WAL by the sync thread (`Synchronous::Full`);
    /// one covers every group commit that queued up while the last ran.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// How long each of those `fdatasync`s took: the disk's share of every
    /// durable acknowledgement.
    pub fn sync_latency(&self) -> &Histogram {
        &self.sync_latency
    }

    /// How long each group's `COMMIT` took on the writer thread: writing
    /// its pages to the WAL, plus the checkpoint that lets the WAL start
    /// over when one is due (see `DEFAULT_WAL_RESTART_PAGES`). Every write
    /// queued meanwhile waits, so this is where writer stalls show.
    pub fn commit_latency(&self) -> &Histogram {
        &self.commit_latency
    }

    pub(super) fn count_sync(&self, took: std::time::Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_latency.observe(took);
    }
}

/// A job `F` producing `T`, whose outcome goes to `D`.
///
/// Dropping a job that was never finished (the channel closed under it, or it
/// was refused at submission) delivers `StoreError::Closed`, so every caller
/// hears back exactly once.
pub(super) struct Job<T, F, D>
where
    D: FnOnce(Result<T, StoreError>),
{
    work: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    done: Option<D>,
    guarded: bool,
}

impl<T, F, D> Job<T, F, D>
where
    D: FnOnce(Result<T, StoreError>),
{
    pub(super) fn new(work: F, done: D, guarded: bool) -> Self {
        Job {
            work: Some(work),
            outcome: None,
            done: Some(done),
            guarded,
        }
    }

    fn deliver(&mut self, outcome: Result<T, StoreError>) {
        if let Some(done) = self.done.take() {
            // A panicking callback must not take the writer thread down.
            if catch_unwind(AssertUnwindSafe(|| done(outcome))).is_err() {
                tracing::error!("sqlite write callback panicked");
            }
        }
    }
}

impl<T, F, D> PendingJob for Job<T, F, D>
where
    F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send,
    T: Send,
    D: FnOnce(Result<T, StoreError>) + Send,
{
    fn guarded(&self) -> bool {
        self.guarded
    }

    fn run(&mut self, tx: &Transaction<'_>) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| work(tx))).unwrap_or_else(|_| {
            tracing::error!("sqlite write job panicked; rolled back");
            Err(StoreError::Panicked)
        });
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn finish(mut self: Box<Self>, batch_error: Option<&Arc<StoreError>>) {
        let outcome = match (self.outcome.take(), batch_error) {
            // A job that failed on its own keeps its own error.
            (Some(Err(error)), _) => Err(error),
            (Some(Ok(_)) | None, Some(batch)) => Err(StoreError::Batch(Arc::clone(batch))),
            (Some(Ok(value)), None) => Ok(value),
            (None, None) => Err(StoreError::Closed),
        };
        self.deliver(outcome);
    }
}

impl<T, F, D> Drop for Job<T, F, D>
where
    D: FnOnce(Result<T, StoreError>),
{
    fn drop(&mut self) {
        self.deliver(Err(StoreError::Closed));
    }
}

/// The writer thread's body; returns when closed or when every sender is
/// gone, after every outcome has been delivered.
pub(super) fn run(
    conn: Connection,
    commands: Receiver<Command>,
    max_batch: usize,
    linger: std::time::Duration,
    stats: Arc<WriterStats>,
    mut syncer: Option<SyncThread>,
) {
    let mut batch: Batch = Vec::new();
    while let Ok(first) = commands.recv() {
        let mut close = None;
        match first {
            Command::Job(job) => batch.push(job),
            Command::Close(ack) => close = Some(ack),
        }
        drain(&commands, &mut batch, &mut close, max_batch);
        if !batch.is_empty() {
            let error = match &syncer {
                // Full: the batch stays open while the previous group is
                // being synced, taking and running the jobs that arrive
                // meanwhile, and commits as the sync ends: one commit per
                // sync, each writing its dirty pages to the WAL once, with
                // the SQL work done while the disk was busy anyway.
                Some(syncer) => {
                    let mut last_call = false;
                    commit_batch(&conn, &mut batch, &stats, &mut |batch| {
                        if last_call || close.is_some() || batch.len() >= max_batch {
                            return false;
                        }
                        last_call = syncer.wait_idle(SYNC_POLL);
                        drain(&commands, batch, &mut close, max_batch);
                        true
                    })
                }
                // Normal: if the batch is small, linger once for company and
                // take what arrived meanwhile, so that a burst of small
                // writes shares one commit (each commit writes every page it
                // dirtied to the WAL). The writer sleeps rather than waits on
                // the queue, so arriving jobs do not wake it one by one.
                None => {
                    let mut lingered = linger.is_zero();
                    commit_batch(&conn, &mut batch, &stats, &mut |batch| {
                        if lingered || close.is_some() || batch.len() >= LINGER_UNTIL {
                            return false;
                        }
                        lingered = true;
                        std::thread::sleep(linger);
                        drain(&commands, batch, &mut close, max_batch);
                        true
                    })
                }
            };
            let jobs = std::mem::take(&mut batch);
            match &syncer {
                Some(syncer) => syncer.deliver(Committed { jobs, error }),
                None => {
                    for job in jobs {
                        job.finish(error.as_ref());
                    }
                }
            }
        }
        if let Some(ack) = close {
            if let Some(syncer) = syncer.take() {
                syncer.finish();
            }
            checkpoint(&conn);
            // The closer may have given up waiting; nothing to do then.
            let _ = ack.send(());
            return;
        }
    }
    if let Some(syncer) = syncer.take() {
        syncer.finish();
    }
}

/// Moves queued commands into `batch` (up to `max_batch`) without waiting.
fn drain(
    commands: &Receiver<Command>,
    batch: &mut Batch,
    close: &mut Option<Sender<()>>,
    max_batch: usize,
) {
    while close.is_none() && batch.len() < max_batch {
        match commands.try_recv() {
            Ok(Command::Job(job)) => batch.push(job),
            Ok(Command::Close(ack)) => *close = Some(ack),
            Err(_) => break,
        }
    }
}

/// Runs `batch` in one transaction; returns the batch error if it did not
/// commit. Once the jobs so far have run, `gather` may add more to share the
/// commit (returning true to have them run); it returns false when it is
/// time to commit. The caller delivers the outcomes.
fn commit_batch(
    conn: &Connection,
    batch: &mut Batch,
    stats: &WriterStats,
    gather: &mut dyn FnMut(&mut Batch) -> bool,
) -> Option<Arc<StoreError>> {
    let mut failed = 0u64;
    let result = (|| -> Result<(), StoreError> {
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let mut ran = 0;
        loop {
            for job in &mut batch[ran..] {
                if !job.guarded() {
                    // No savepoint: its pages need no sub-journal copy. If it
                    // fails anyway, the whole batch goes (see `write_then_unguarded`).
                    if !job.run(&tx) {
                        failed += 1;
                        return Err(StoreError::UnguardedJobFailed);
                    }
                    continue;
                }
                tx.prepare_cached("SAVEPOINT job")?.execute([])?;
                if !job.run(&tx) {
                    failed += 1;
                    tx.prepare_cached("ROLLBACK TO job")?.execute([])?;
                }
                tx.prepare_cached("RELEASE job")?.execute([])?;
            }
            ran = batch.len();
            if !gather(batch) {
                break;
            }
        }
        // On failure the dropped transaction rolls back.
        let committing = std::time::Instant::now();
        tx.commit()?;
        stats.commit_latency.observe(committing.elapsed());
        Ok(())
    })();
    stats.jobs.fetch_add(batch.len() as u64, Ordering::Relaxed);
    stats.failed_jobs.fetch_add(failed, Ordering::Relaxed);
    match result {
        Ok(()) => {
            stats.committed();
            None
        }
        Err(error) => {
            tracing::error!(%error, jobs = batch.len(), "sqlite group commit failed");
            Some(Arc::new(error))
        }
    }
}

/// Moves the WAL into the database and truncates it, so a closed store is one file.
fn checkpoint(conn: &Connection) {
    let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    });
    match result {
        Ok(0) => {}
        Ok(_) => tracing::warn!("sqlite checkpoint at close was blocked by a reader"),
        Err(error) => tracing::warn!(%error, "sqlite checkpoint at close failed"),
    }
}
