//! The pool of read-only connections that serves `SqliteDb::read`.
//!
//! Concurrency: a tokio `Semaphore` with one permit per connection bounds how
//! many reads run at once, so reads queue on the async side instead of
//! piling up on the blocking pool. A permit holder checks a connection out of
//! a `std::sync::Mutex<Vec<Connection>>` (held only to push or pop), runs the
//! job on the blocking pool and checks it back in. Connections open lazily.
//! In WAL mode readers never block the writer and see every committed batch.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::StoreError;

/// Page cache per reader: 2 MiB. A read that follows a commit starts with an
/// emptied cache anyway (SQLite resets a connection's cache when the WAL
/// changed since its last read), and emptying walks the whole cache, so a
/// larger one costs more than it saves under write load.
const READER_CACHE_KIB: i64 = 2 * 1024;

#[derive(Debug)]
pub(super) struct ReaderPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    closed: AtomicBool,
}

impl ReaderPool {
    pub(super) fn new(path: PathBuf, readers: usize) -> ReaderPool {
        ReaderPool {
            path,
            idle: Mutex::new(Vec::with_capacity(readers)),
            permits: Arc::new(Semaphore::new(readers)),
            closed: AtomicBool::new(false),
        }
    }

    /// Runs `job` on a pooled connection on the blocking pool.
    pub(super) async fn read<T, F>(self: &Arc<Self>, job: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = pool.checkout()?;
            match catch_unwind(AssertUnwindSafe(|| job(&conn))) {
                Ok(result) => {
                    pool.checkin(conn);
                    result
                }
                // The connection may be mid-statement; drop it rather than reuse it.
                Err(_) => {
                    tracing::error!("sqlite read job panicked");
                    Err(StoreError::Panicked)
                }
            }
        })
        .await
        .map_err(|_| StoreError::Panicked)?
    }

    /// Refuses new reads and drops idle connections; reads in flight finish.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.permits.close();
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    fn checkout(&self) -> Result<Connection, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match pooled {
            Some(conn) => Ok(conn),
            None => self.open(),
        }
    }

    /// Returns a connection to the pool, unless the pool closed or the job
    /// left a transaction open (which would pin an old snapshot).
    fn checkin(&self, conn: Connection) {
        if !conn.is_autocommit() || self.closed.load(Ordering::Acquire) {
            return;
        }
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "cache_size", -READER_CACHE_KIB)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(conn)
    }
}
