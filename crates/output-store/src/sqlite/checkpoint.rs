//! The background checkpointer: copies the WAL into the database file from
//! its own connection and thread, so that the writer never stalls inside a
//! commit while a checkpoint copies pages and fsyncs the database.
//!
//! It runs `wal_checkpoint(PASSIVE)` when the writer has committed enough
//! since the last one: after `Pace::commits` commits, looked at every
//! `Pace::tick`, or after `Pace::idle` once anything at all was committed.
//! While nothing is committed it looks half as often each time, down to
//! once per `Pace::rest`, so an idle daemon's thread sleeps.
//! Passive checkpoints never block the writer or readers, and copy what
//! they can. Restarting the WAL from its beginning is the writer's job (its
//! automatic checkpoint at 64 MiB of WAL), which then has only the frames
//! copied since to catch up.
//!
//! A checkpoint costs about the same however little it copies (SQLite
//! sorts the page numbers of the WAL's current 4 096-frame segment each
//! time), so it waits for commits to gather rather than run on a clock:
//! under load enough gather within every look, and a daemon running a few
//! tasks a second checkpoints a few times a second instead of forty
//! (docs/benchmarks.md, "The checkpointer waits for commits").

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::writer::WriterStats;
use crate::StoreError;

/// When the checkpointer runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    /// How often it looks at the writer's commit count.
    pub tick: Duration,
    /// Commits since the last checkpoint that call for the next one.
    pub commits: u64,
    /// How long fewer commits than that wait for their checkpoint.
    pub idle: Duration,
    /// The longest wait between looks while nothing is committed.
    pub rest: Duration,
}

/// The daemon's pace: often enough that the writer's own checkpoint (see
/// `DEFAULT_WAL_RESTART_PAGES`) finds little left to copy; at C=32 (about
/// a thousand commits a second) every look finds 16.
pub(super) const PACE: Pace = Pace {
    tick: Duration::from_millis(25),
    commits: 16,
    idle: Duration::from_secs(1),
    rest: Duration::from_secs(1),
};

/// A running checkpointer; `stop` ends it (dropping it does too).
#[derive(Debug)]
pub(super) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(
        path: &Path,
        pace: Pace,
        stats: Arc<WriterStats>,
    ) -> Result<Checkpointer, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let (stop, stopped) = mpsc::channel();
        // Counted from here, so a commit made once this returns is seen.
        let done = stats.commits();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".to_owned())
            .spawn(move || run(&conn, &stopped, pace, &stats, done))?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (at most one checkpoint's time).
    pub(super) fn stop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checkpoints at `pace` until stopped; `done` is the commit count the
/// WAL was last copied at.
fn run(
    conn: &Connection,
    stopped: &mpsc::Receiver<()>,
    pace: Pace,
    stats: &WriterStats,
    mut done: u64,
) {
    let mut last = Instant::now();
    let mut wait = pace.tick;
    loop {
        match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let commits = stats.commits();
        let since = commits.wrapping_sub(done);
        if since == 0 {
            wait = (wait * 2).min(pace.rest.max(pace.tick));
            continue;
        }
        wait = pace.tick;
        if since < pace.commits && last.elapsed() < pace.idle {
            continue;
        }
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(0)
        });
        if let Err(error) = result {
            tracing::warn!(%error, "sqlite background checkpoint failed");
        }
        done = commits;
        last = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database in WAL mode whose writes stay in the WAL until a
    /// checkpoint: its file's length grows only when one copies them.
    fn written_to_the_wal() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch(
            "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);
             CREATE TABLE u (y INTEGER); CREATE TABLE v (z INTEGER);",
        )
        .unwrap();
        (dir, path, conn)
    }

    /// A checkpointer on `path` that looks every 2 ms, with its own commit
    /// count for the test to move.
    fn started(path: &Path, commits: u64, idle: Duration) -> (Arc<WriterStats>, Checkpointer) {
        let stats = Arc::new(WriterStats::default());
        let pace = Pace {
            tick: Duration::from_millis(2),
            commits,
            idle,
            rest: Duration::from_millis(8),
        };
        let checkpointer = Checkpointer::start(path, pace, Arc::clone(&stats)).unwrap();
        (stats, checkpointer)
    }

    fn length(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// Whether the database file grows past `before` within two seconds.
    fn grows(path: &Path, before: u64) -> bool {
        for _ in 0..400 {
            if length(path) > before {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn checkpoints_once_enough_commits_gathered() {
        let (_dir, path, conn) = written_to_the_wal();
        let before = length(&path);
        let (stats, mut checkpointer) = started(&path, 2, Duration::from_secs(3600));
        stats.committed();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(length(&path), before, "one commit of two waits");
        stats.committed();
        assert!(grows(&path, before), "the second commit checkpoints");
        checkpointer.stop();
        let count: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 2);
    }

    #[test]
    fn a_lone_commit_is_checkpointed_after_the_idle_wait() {
        let (_dir, path, _conn) = written_to_the_wal();
        let before = length(&path);
        let (stats, mut checkpointer) = started(&path, 1_000, Duration::from_millis(150));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(length(&path), before, "nothing committed, nothing copied");
        stats.committed();
        assert!(grows(&path, before), "the idle wait ends in a checkpoint");
        checkpointer.stop();
    }
}
