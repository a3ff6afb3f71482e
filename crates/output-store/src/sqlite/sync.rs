//! The sync thread of `Synchronous::Full`: makes committed group commits
//! durable with `fdatasync` on the WAL file, off the writer thread, and only
//! then delivers their outcomes.
//!
//! Why a thread: with SQLite's own `synchronous = FULL` the writer thread
//! sits in `fsync` inside every `COMMIT` (≈ 2–3 ms on this project's disks)
//! and cannot start the next group meanwhile. Here the write connection runs
//! `synchronous = NORMAL` (frames reach the OS at `COMMIT`, nothing is
//! synced), the writer hands each committed group to this thread and goes
//! on: it runs the jobs that arrive during the sync in an open transaction
//! and commits them as the sync ends (see `writer::run`), so there is one
//! commit per sync and the SQL work overlaps the disk's. (Should groups
//! still queue up, one `fsync` covers them all.)
//!
//! Durability is that of `FULL`: a job's outcome is delivered only after an
//! `fdatasync` of the WAL that began after its `COMMIT` returned, and `fsync`
//! flushes the file (the inode) whichever descriptor wrote it. SQLite only
//! truncates the WAL while a connection is open (it deletes it when the last
//! one closes, after the writer has stopped), so the descriptor opened here
//! stays the WAL's. Frames the checkpointer has already copied are synced in
//! the database file by the checkpoint itself before the WAL is reused.
//!
//! Order: groups are delivered in commit order, and jobs within a group in
//! queue order, exactly as when the writer delivers them itself.
//!
//! Visibility: a committed group is readable by other connections before it
//! is synced, as the engine's in-memory state already is; nothing the daemon
//! acknowledges depends on such a read.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::writer::{PendingJob, WriterStats};
use crate::StoreError;

/// One group commit waiting for its sync: its jobs, and the batch error if
/// the group did not commit (then it needs no sync, only its place in order).
pub(super) struct Committed {
    pub(super) jobs: Vec<Box<dyn PendingJob>>,
    pub(super) error: Option<Arc<StoreError>>,
}

/// The handle the writer keeps: a queue into the sync thread.
pub(super) struct SyncThread {
    queue: Sender<Committed>,
    pending: Arc<Pending>,
    thread: JoinHandle<()>,
}

/// Groups handed over and not yet delivered, so the writer can commit its
/// next group as the current sync ends.
#[derive(Default)]
struct Pending {
    groups: Mutex<usize>,
    idle: Condvar,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn delivered(&self, groups: usize) {
        let mut pending = self.lock();
        *pending = pending.saturating_sub(groups);
        if *pending == 0 {
            self.idle.notify_all();
        }
    }
}

impl SyncThread {
    /// Starts the thread for the WAL of the database at `db_path`.
    pub(super) fn start(
        db_path: &std::path::Path,
        stats: Arc<WriterStats>,
    ) -> Result<SyncThread, StoreError> {
        let mut wal = db_path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let (queue, groups) = std::sync::mpsc::channel();
        let pending = Arc::new(Pending::default());
        let thread_pending = Arc::clone(&pending);
        let thread = std::thread::Builder::new()
            .name("sqlite-sync".to_owned())
            .spawn(move || run(&wal, &groups, &stats, &thread_pending))?;
        Ok(SyncThread {
            queue,
            pending,
            thread,
        })
    }

    /// Waits up to `timeout` until every group handed over is delivered;
    /// returns whether that is so.
    pub(super) fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        let pending = self.pending.lock();
        let (pending, _) = self
            .pending
            .idle
            .wait_timeout_while(pending, timeout, |groups| *groups > 0)
            .unwrap_or_else(PoisonError::into_inner);
        *pending == 0
    }

    /// The thread's id, so that a callback running on it can be recognised.
    pub(super) fn id(&self) -> std::thread::ThreadId {
        self.thread.thread().id()
    }

    /// Queues a committed (or failed) group for delivery after the next sync.
    pub(super) fn deliver(&self, group: Committed) {
        *self.pending.lock() += 1;
        if let Err(refused) = self.queue.send(group) {
            self.pending.delivered(1);
            // The thread is gone (it only stops when this handle does), so
            // nothing can be proven durable: fail the jobs rather than drop them.
            let error = Arc::new(StoreError::Closed);
            for job in refused.0.jobs {
                job.finish(Some(&error));
            }
        }
    }

    /// Delivers everything queued, then stops the thread.
    pub(super) fn finish(self) {
        drop(self.queue);
        if self.thread.join().is_err() {
            tracing::error!("sqlite sync thread panicked");
        }
    }
}

fn run(
    wal_path: &std::path::Path,
    groups: &Receiver<Committed>,
    stats: &WriterStats,
    pending: &Pending,
) {
    let mut wal: Option<File> = None;
    while let Ok(first) = groups.recv() {
        let mut taken = vec![first];
        taken.extend(groups.try_iter());
        let sync_error = if taken.iter().any(|g| g.error.is_none()) {
            let started = std::time::Instant::now();
            let synced = sync(&mut wal, wal_path);
            stats.count_sync(started.elapsed());
            synced.err().map(Arc::new)
        } else {
            None
        };
        let count = taken.len();
        for group in taken {
            let error = group.error.or_else(|| sync_error.clone());
            for job in group.jobs {
                job.finish(error.as_ref());
            }
        }
        pending.delivered(count);
    }
}

/// `fdatasync` of the WAL, opening it on first use. A failed sync drops the
/// descriptor (the next sync reopens the file) and is reported to every job
/// it covered: their writes are visible but not known to be durable.
fn sync(wal: &mut Option<File>, path: &std::path::Path) -> Result<(), StoreError> {
    let file = match wal {
        Some(file) => file,
        None => wal.insert(OpenOptions::new().write(true).open(path)?),
    };
    file.sync_data().map_err(|error| {
        tracing::error!(%error, path = %path.display(), "fdatasync of the WAL failed");
        *wal = None;
        StoreError::Io(error)
    })
}
