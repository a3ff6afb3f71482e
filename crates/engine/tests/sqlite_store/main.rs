//! `TaskStore` conformance (the engine's `store::conformance` cases) run
//! against `MemoryTaskStore` and `SqliteTaskStore` (a real file in a
//! tempdir), followed by the checks only SQLite can pass: reopening, atomic
//! batches, schema versions.

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use serde_json::json;
use swarmd_engine::audit::AuditAction;
use swarmd_engine::store::conformance::*;
use swarmd_engine::store::{SqliteTaskStore, TaskStore, WriteOp, commit};
use swarmd_engine::task::{AttemptOutcome, Task, TaskStatus};
use swarmd_output_store::{SqliteDb, SqliteOptions, StoreError};
use tempfile::TempDir;

// ---- fixtures -------------------------------------------------------------

struct SqliteFixture {
    _dir: TempDir,
    path: PathBuf,
    store: SqliteTaskStore,
}

fn open_sqlite(path: &Path) -> Result<SqliteTaskStore, StoreError> {
    SqliteTaskStore::open(SqliteDb::open(SqliteOptions::new(path))?)
}

fn sqlite_fixture() -> SqliteFixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swarmd.db");
    let store = open_sqlite(&path).unwrap();
    SqliteFixture {
        _dir: dir,
        path,
        store,
    }
}

/// Runs each named case once per backend.
mod memory {
    swarmd_engine::task_store_conformance!(async {
        let store: std::sync::Arc<dyn swarmd_engine::store::TaskStore> =
            std::sync::Arc::new(swarmd_engine::store::MemoryTaskStore::new());
        ((), store)
    });
}

mod sqlite {
    swarmd_engine::task_store_conformance!(async {
        let fixture = super::sqlite_fixture();
        let store: std::sync::Arc<dyn swarmd_engine::store::TaskStore> =
            std::sync::Arc::new(fixture.store.clone());
        (fixture, store)
    });
}

mod sqlite_only;
