//! The tables of the SQLite `TaskStore` and the migration that creates them,
//! guarded by the schema version kept in `PRAGMA user_version`.

use std::sync::{Arc, mpsc};

use rusqlite::Transaction;
use swarmd_output_store::{SqliteDb, StoreError};

use super::keys::KeyIndex;

/// The schema this build writes. A file stamped with a higher version was
/// written by a newer swarmd and is refused rather than misread.
pub(super) const SCHEMA_VERSION: i64 = 5;

/// Ids are the 16 bytes of the UUID, so `ORDER BY id` is creation order
/// (UUIDv7). A task's `spec` (what it was asked, prompt included) is
/// written once, at creation, and its `body` (its state) at every change;
/// a row without a spec holds the whole task in `body`. Secondary indexes end in `id` so that filtered listings walk one
/// index newest first. `finished_ms` is indexed only where set, which keeps
/// live tasks out of the index that retention scans. Handles are keyed by
/// their task first, so new ones land on the rightmost page instead of a
/// random one (digests are only looked up in memory; the table is read whole
/// at boot). Events have no time index: they are appended in seq order with
/// nondecreasing stamps, so retention deletes a prefix of the seq order.
/// Each index costs a page write per group commit. Audit ids are rowids
/// without AUTOINCREMENT (which costs a `sqlite_sequence` write per insert):
/// audit lines are never deleted, so an id is never handed out twice.
/// Flow runs keep their record as JSON text beside the columns listings
/// filter on; `idem_key` is unique where set (the first run to write a key
/// keeps it). Flow documents are keyed by their content hash.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id          BLOB    PRIMARY KEY,
    status      TEXT    NOT NULL,
    agent       TEXT    NOT NULL,
    finished_ms INTEGER,
    body        TEXT    NOT NULL,
    spec        TEXT
);
CREATE INDEX IF NOT EXISTS tasks_status ON tasks (status, id);
CREATE INDEX IF NOT EXISTS tasks_agent ON tasks (agent, id);
CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (finished_ms) WHERE finished_ms IS NOT NULL;

CREATE TABLE IF NOT EXISTS attempts (
    task    BLOB    NOT NULL,
    attempt INTEGER NOT NULL,
    body    TEXT    NOT NULL,
    PRIMARY KEY (task, attempt)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS handles (
    task     BLOB    NOT NULL,
    attempt  INTEGER NOT NULL,
    digest   BLOB    NOT NULL,
    exp_secs INTEGER NOT NULL,
    body     TEXT    NOT NULL,
    PRIMARY KEY (task, attempt, digest)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS idem_keys (
    key  TEXT PRIMARY KEY,
    task BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_keys_task ON idem_keys (task);

CREATE TABLE IF NOT EXISTS events (
    seq   INTEGER PRIMARY KEY,
    ts_ms INTEGER NOT NULL,
    task  BLOB,
    body  TEXT    NOT NULL
);

CREATE TABLE IF NOT EXISTS audit (
    id    INTEGER PRIMARY KEY,
    ts_ms INTEGER NOT NULL,
    task  BLOB    NOT NULL,
    body  TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_task ON audit (task, id);

CREATE TABLE IF NOT EXISTS posted_finals (
    task    BLOB    NOT NULL,
    attempt INTEGER NOT NULL,
    key     TEXT,
    digest  BLOB    NOT NULL,
    PRIMARY KEY (task, attempt)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS sessions (
    sid  BLOB PRIMARY KEY,
    body TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS flow_runs (
    id         BLOB    PRIMARY KEY,
    flow       TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    session    BLOB,
    idem_key   TEXT    UNIQUE,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    record     TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS flow_runs_status ON flow_runs (status, id);

CREATE TABLE IF NOT EXISTS flow_docs (
    hash TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    doc  TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS task_store_meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Version 4 (or older) to 5, after `SCHEMA`, where the tasks table was
/// there before it: a task's spec gets a column of its own
/// (`body` then holds only its state). Rows written before keep the whole
/// task in `body` and no spec, and are written whole at their next change.
const UPGRADE_TO_5: &str = "ALTER TABLE tasks ADD COLUMN spec TEXT;";

/// Version 3 to 4 adds `flow_runs` and `flow_docs`, and version 2 to 3
/// adds `posted_finals`, which `SCHEMA` creates: no steps of their own.
///
/// Version 1 to 2, before `SCHEMA`: handles are to be keyed by task instead
/// of digest, so the old table steps aside for `SCHEMA` to create the new
/// one; and the events time index goes.
const UPGRADE_FROM_1: &str = "
DROP INDEX IF EXISTS events_ts;
DROP INDEX IF EXISTS handles_task;
ALTER TABLE handles RENAME TO handles_v1;
";

/// Version 1 to 2, after `SCHEMA`: the old handles move into the new table.
const UPGRADE_FROM_1_AFTER: &str = "
INSERT INTO handles (task, attempt, digest, exp_secs, body)
    SELECT task, attempt, digest, exp_secs, body FROM handles_v1;
DROP TABLE handles_v1;
";

/// `task_store_meta` row holding the highest event seq ever pruned, so the
/// sequence never restarts below it once old events are gone.
pub(super) const PRUNED_EVENT_SEQ: &str = "pruned_event_seq";

/// Creates the tables if needed and stamps the schema version, in one writer
/// job; blocks until it commits, so call it at open, never on the writer.
///
/// # Errors
///
/// `StoreError::Sqlite` (`SQLITE_ERROR`, with a message naming both
/// versions) if the file carries a newer schema version; SQLite errors otherwise.
pub(super) fn migrate(db: &SqliteDb) -> Result<(), StoreError> {
    let (sender, receiver) = mpsc::sync_channel(1);
    db.write_then(migrate_in, move |outcome| {
        // The opener waits on the receiver; it cannot be gone.
        let _ = sender.send(outcome);
    });
    receiver.recv().map_err(|_| StoreError::Closed)?
}

/// Fills `keys` with every stored idempotency key, in one writer job;
/// blocks until it has run, so call it at open, never on the writer.
pub(super) fn load_keys(db: &SqliteDb, keys: Arc<KeyIndex>) -> Result<(), StoreError> {
    let (sender, receiver) = mpsc::sync_channel(1);
    db.write_then(
        move |tx| {
            let mut select = tx.prepare("SELECT key FROM idem_keys")?;
            let mut rows = select.query([])?;
            while let Some(row) = rows.next()? {
                let key: String = row.get(0)?;
                keys.add([key.as_str()]);
            }
            Ok(())
        },
        move |outcome| {
            let _ = sender.send(outcome);
        },
    );
    receiver.recv().map_err(|_| StoreError::Closed)?
}

fn migrate_in(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let found: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        // `StoreError` has no schema variant; SQLite's generic error carries the message.
        return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(format!(
                "swarmd.db has task schema version {found} (PRAGMA user_version), newer than \
                 version {SCHEMA_VERSION} that this swarmd understands; refusing to open it"
            )),
        )));
    }
    if found == 1 {
        tx.execute_batch(UPGRADE_FROM_1)?;
    }
    tx.execute_batch(SCHEMA)?;
    if found == 1 {
        tx.execute_batch(UPGRADE_FROM_1_AFTER)?;
    }
    if found < 5 && !has_column(tx, "tasks", "spec")? {
        tx.execute_batch(UPGRADE_TO_5)?;
    }
    if found < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    Ok(())
}

fn has_column(tx: &Transaction<'_>, table: &str, column: &str) -> Result<bool, StoreError> {
    let found: i64 = tx.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |row| row.get(0),
    )?;
    Ok(found > 0)
}
