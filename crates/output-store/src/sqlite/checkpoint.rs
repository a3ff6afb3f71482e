//! The background checkpointer: copies the WAL into the database file from
//! its own connection and thread, so that the writer never stalls inside a
//! commit while a checkpoint copies pages and fsyncs the database.
//!
//! It runs `wal_checkpoint(PASSIVE)` on a fixed cadence: passive checkpoints
//! never block the writer or readers, and copy what they can. Restarting the
//! WAL from its beginning is the writer's job (its automatic checkpoint at
//! 64 MiB of WAL), which then has only the frames copied since to catch up.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::StoreError;

/// How often the WAL is checkpointed: often enough that the writer's own
/// checkpoint (see `DEFAULT_WAL_RESTART_PAGES`) finds little left to copy.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(25);

/// A running checkpointer; `stop` ends it (dropping it does too).
#[derive(Debug)]
pub(super) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(path: &Path, every: Duration) -> Result<Checkpointer, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".to_owned())
            .spawn(move || run(&conn, &stopped, every))?;
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

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>, every: Duration) {
    loop {
        match stopped.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(0)
        });
        if let Err(error) = result {
            tracing::warn!(%error, "sqlite background checkpoint failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_the_wal_into_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        let wal = path.with_extension("sqlite-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 0);
        let mut checkpointer = Checkpointer::start(&path, Duration::from_millis(10)).unwrap();
        // The checkpointed WAL is reset by the next write, which then starts
        // at the beginning of the file again: poll until that happens.
        let mut reset = false;
        for _ in 0..500 {
            std::thread::sleep(Duration::from_millis(10));
            let (log, done): (i64, i64) = conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                    Ok((row.get(1)?, row.get(2)?))
                })
                .unwrap();
            if log == done {
                reset = true;
                break;
            }
        }
        checkpointer.stop();
        assert!(reset, "the WAL was checkpointed");
        let count: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 2);
    }
}
