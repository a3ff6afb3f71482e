//! `SqliteDb`: the shared handle on `swarmd.db` (one group-committing writer, pooled readers).
//!
//! The output store and the engine's stores all write through the same
//! `SqliteDb`, so every durable write of the daemon is totally ordered by
//! submission. Each store creates its own tables with `migrate` at open.

mod blob_refs;
mod checkpoint;
mod outputs;
mod readers;
mod sync;
mod writer;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction};
use tokio::sync::oneshot;

use crate::StoreError;
pub use outputs::SqliteOutputStore;
use readers::ReaderPool;
pub use writer::WriterStats;
use writer::{Command, Job};

/// Page cache of the writer: 1 MiB (256 pages) holds the right edge and
/// interior pages of the hot B-trees (outputs, events, tasks); other pages
/// come from the OS page cache. It is small on purpose: every write
/// transaction ends with a walk of the cache's whole hash table
/// (`pcache1TruncateUnsafe`), so a large cache costs more than it saves.
const WRITER_CACHE_KIB: i64 = 1024;

/// WAL pages (64 MiB) after which the writer checkpoints after a commit, so
/// that its next transaction starts the WAL over. The background
/// checkpointer (`checkpoint`) copies frames into the database continuously
/// but cannot make the WAL restart while commits keep coming (a restart needs
/// every frame copied when a write transaction begins); without this bound
/// the WAL grows by ~100 MB/s under load, and the checkpoint that finally
/// restarts it copies all of it while every write waits. Here the writer
/// copies only what the background thread has not (a few milliseconds'
/// worth) and fsyncs the database.
pub const DEFAULT_WAL_RESTART_PAGES: u32 = 16_384;

/// Default writer linger: long enough for the jobs of concurrent tasks to
/// meet in one commit, short against a request's latency budget.
pub const DEFAULT_LINGER: std::time::Duration = std::time::Duration::from_micros(250);

/// Bytes the WAL file is truncated back to after a checkpoint.
const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// How commits reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every write is made durable with an `fdatasync` of the WAL before it
    /// is acknowledged: an acknowledged write survives power loss. The sync
    /// runs on its own thread and covers every group commit made meanwhile
    /// (see `sync`), so the writer never waits for the disk.
    #[default]
    Full,
    /// No fsync at commit: an acknowledged write survives a process crash but
    /// the last commits may be lost on power loss.
    Normal,
}

/// How to open `swarmd.db`.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The database file; its parent directory is created if missing.
    pub path: PathBuf,
    pub synchronous: Synchronous,
    /// Read connections in the pool (at least 1).
    pub readers: usize,
    /// Most jobs folded into one group commit (at least 1).
    pub max_batch: usize,
    /// How long the writer waits for more jobs when a batch is small, so
    /// that bursts share one commit (see `writer::run`). Zero disables it.
    pub linger: std::time::Duration,
    /// WAL pages after which the writer checkpoints so the WAL starts over
    /// (see [`DEFAULT_WAL_RESTART_PAGES`]); bounds the WAL file's size.
    pub wal_restart_pages: u32,
}

impl SqliteOptions {
    /// Defaults for the database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> SqliteOptions {
        SqliteOptions {
            path: path.into(),
            synchronous: Synchronous::Full,
            readers: 4,
            max_batch: 4096,
            linger: DEFAULT_LINGER,
            wal_restart_pages: DEFAULT_WAL_RESTART_PAGES,
        }
    }
}

/// The shared SQLite database: cheap to clone, closed by `close` or when the
/// last clone drops (which, like `close`, blocks until queued writes commit).
#[derive(Clone)]
pub struct SqliteDb {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    commands: mpsc::Sender<Command>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The sync thread (`Synchronous::Full`), which runs write callbacks.
    sync_thread: Option<std::thread::ThreadId>,
    checkpointer: Mutex<checkpoint::Checkpointer>,
    readers: Arc<ReaderPool>,
    stats: Arc<WriterStats>,
}

impl SqliteDb {
    /// Opens (creating if needed) the database and starts its writer thread.
    ///
    /// The connection uses WAL, the chosen `synchronous`, a 5 s busy timeout,
    /// foreign keys off (stores keep their own invariants), in-memory temp
    /// storage, and the cache and checkpoint sizes documented on the constants.
    pub fn open(opts: SqliteOptions) -> Result<SqliteDb, StoreError> {
        if let Some(parent) = opts.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        create_private(&opts.path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&opts.path, flags)?;
        configure_writer(&conn, &opts.path, opts.wal_restart_pages.max(1))?;
        let stats = Arc::new(WriterStats::default());
        let (commands, receiver) = mpsc::channel();
        let max_batch = opts.max_batch.max(1);
        let linger = opts.linger;
        let thread_stats = Arc::clone(&stats);
        let syncer = match opts.synchronous {
            Synchronous::Full => Some(sync::SyncThread::start(&opts.path, Arc::clone(&stats))?),
            Synchronous::Normal => None,
        };
        let sync_thread = syncer.as_ref().map(sync::SyncThread::id);
        let writer = std::thread::Builder::new()
            .name("sqlite-writer".to_owned())
            .spawn(move || writer::run(conn, receiver, max_batch, linger, thread_stats, syncer))?;
        let checkpointer =
            checkpoint::Checkpointer::start(&opts.path, checkpoint::PACE, Arc::clone(&stats))?;
        Ok(SqliteDb {
            inner: Arc::new(Inner {
                checkpointer: Mutex::new(checkpointer),
                readers: Arc::new(ReaderPool::new(opts.path.clone(), opts.readers.max(1))),
                path: opts.path,
                commands,
                writer: Mutex::new(Some(writer)),
                sync_thread,
                stats,
            }),
        })
    }

    /// Queues `job` on the single writer thread NOW (at call time, so call order == commit order) and returns a future resolving after the transaction that ran it has committed.
    ///
    /// The job runs inside its own savepoint: if it fails or panics, its
    /// writes are rolled back and only this ticket sees the error. Dropping the
    /// ticket does not cancel the job.
    pub fn write<T, F>(&self, job: F) -> WriteTicket<T>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (sender, receiver) = oneshot::channel();
        self.write_then(job, move |outcome| {
            // The ticket may have been dropped; the write stands either way.
            let _ = sender.send(outcome);
        });
        WriteTicket { receiver }
    }

    /// Like write, but instead of a future it calls `done` on the writer thread right after the commit, in submission order (used to broadcast events in seq order).
    ///
    /// `done` must be quick and must not wait on the writer (no `migrate` or
    /// `close` from inside it). If the writer is already closed, `done` runs on
    /// the calling thread with `StoreError::Closed`.
    pub fn write_then<T, F, D>(&self, job: F, done: D)
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
        D: FnOnce(Result<T, StoreError>) + Send + 'static,
    {
        let job = Box::new(Job::new(job, done, true));
        // A refused job is dropped here, which reports `Closed` to `done`.
        let _ = self.inner.commands.send(Command::Job(job));
    }

    /// Like `write_then`, without the job's own savepoint. A savepoint makes
    /// SQLite copy every page the job touches that the batch already dirtied
    /// into a sub-journal, which dominates the cost of small jobs on hot pages.
    /// For jobs that fail only when the transaction itself is doomed (plain
    /// inserts and upserts of validated rows): if such a job does fail or
    /// panic, the whole batch rolls back and every job in it gets an error.
    pub fn write_then_unguarded<T, F, D>(&self, job: F, done: D)
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
        D: FnOnce(Result<T, StoreError>) + Send + 'static,
    {
        let job = Box::new(Job::new(job, done, false));
        let _ = self.inner.commands.send(Command::Job(job));
    }

    /// Runs `job` on a pooled read connection off the async threads (spawn_blocking).
    pub async fn read<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.inner.readers.read(job).await
    }

    /// Runs a migration batch (CREATE TABLE IF NOT EXISTS ...) synchronously on the writer; used at open by each store.
    ///
    /// Blocks the calling thread until the batch commits, so call it at
    /// startup and never from a `write_then` callback.
    pub fn migrate(&self, sql: &'static str) -> Result<(), StoreError> {
        let (sender, receiver) = mpsc::sync_channel(1);
        self.write_then(
            move |tx| Ok(tx.execute_batch(sql)?),
            move |outcome| {
                let _ = sender.send(outcome);
            },
        );
        receiver.recv().map_err(|_| StoreError::Closed)?
    }

    /// Proves the writer commits and a reader answers; for readiness checks.
    ///
    /// The write is an empty transaction through the writer queue, so it also
    /// measures how far behind the writer is; it writes no WAL frame.
    pub async fn healthcheck(&self) -> Result<(), StoreError> {
        let select_one = |conn: &Connection| -> Result<i64, StoreError> {
            Ok(conn.query_row("SELECT 1", [], |row| row.get(0))?)
        };
        self.write(move |tx| select_one(tx)).await?;
        self.read(select_one).await?;
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Counters of the writer thread.
    pub fn stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Flushes and stops the writer thread (drain on shutdown); later writes return StoreError::Closed.
    ///
    /// Jobs queued before the call commit first; later reads also return
    /// `Closed`. The WAL is checkpointed so the file is complete on its own.
    /// Blocks until the writer has stopped; calling it again is a no-op.
    pub fn close(&self) -> Result<(), StoreError> {
        self.inner.close()
    }
}

impl Inner {
    /// Errs with `Panicked` only if the writer thread died of a bug in this module.
    fn close(&self) -> Result<(), StoreError> {
        self.readers.close();
        // The writer's final TRUNCATE checkpoint must not meet a passive one.
        self.checkpointer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop();
        let (ack, acked) = mpsc::channel();
        if self.commands.send(Command::Close(ack)).is_ok() {
            // An error means the writer already stopped, which is the goal.
            let _ = acked.recv();
        }
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match handle.map(JoinHandle::join) {
            Some(Err(_)) => Err(StoreError::Panicked),
            _ => Ok(()),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let current = std::thread::current().id();
        let on_writer = self.sync_thread == Some(current)
            || self
                .writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|handle| handle.thread().id() == current);
        // From a write callback (on the writer or the sync thread), dropping
        // the sender is enough: the writer stops once the queue is empty.
        // Joining there would deadlock.
        if !on_writer && self.close().is_err() {
            tracing::error!("sqlite writer thread panicked");
        }
    }
}

impl fmt::Debug for SqliteDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteDb")
            .field("path", &self.inner.path)
            .field("stats", &self.inner.stats)
            .finish_non_exhaustive()
    }
}

/// Creates the database file with mode 0600 when it is missing, so it is
/// private whatever the umask; SQLite gives the `-wal` and `-shm` files the
/// mode of the database file. A URI or `:memory:` path is left to SQLite.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;

    let text = path.as_os_str().to_string_lossy();
    if text.starts_with("file:") || text.starts_with(':') || path.exists() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map(drop)
}

/// SQLite's `synchronous` is NORMAL for both settings: `Full` adds the sync
/// thread's fdatasync before any acknowledgement (SQLite's own FULL would
/// sync inside every COMMIT, on the writer thread).
fn configure_writer(
    conn: &Connection,
    path: &Path,
    wal_restart_pages: u32,
) -> Result<(), StoreError> {
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::WalUnsupported {
            path: path.to_owned(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
    conn.query_row(
        &format!("PRAGMA wal_autocheckpoint = {wal_restart_pages}"),
        [],
        |_| Ok(()),
    )?;
    conn.query_row(
        &format!("PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}"),
        [],
        |_| Ok(()),
    )?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Resolves with a write job's outcome once its group commit has ended.
pub struct WriteTicket<T> {
    receiver: oneshot::Receiver<Result<T, StoreError>>,
}

impl<T> Future for WriteTicket<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|received| received.unwrap_or(Err(StoreError::Closed)))
    }
}

impl<T> fmt::Debug for WriteTicket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteTicket").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
