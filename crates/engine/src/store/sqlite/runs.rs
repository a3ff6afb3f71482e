//! Flow runs and flow documents in the SQLite `TaskStore`: the reads, and
//! the retention of old terminal runs.

use std::sync::LazyLock;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Transaction, params, params_from_iter};
use swarmd_output_store::{SqliteDb, StoreError, nesting};
use uuid::Uuid;

use super::read::sql_limit;
use super::write::session_key;
use crate::ids::{RunId, SessionId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunStatus, RunSummary};

/// Runs deleted per writer job.
const RUN_CHUNK: usize = 256;

/// `'running', 'waiting'`, or the terminal statuses, derived from `RunStatus`.
fn run_status_list(terminal: bool) -> String {
    RunStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal() == terminal)
        .map(|status| format!("'{}'", status.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

static OPEN_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT record, id FROM flow_runs WHERE status IN ({}) ORDER BY id",
        run_status_list(false)
    )
});

static PRUNE_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM flow_runs WHERE id IN (SELECT id FROM flow_runs
             WHERE status IN ({}) AND updated_ms < ?1 LIMIT ?2)",
        run_status_list(true)
    )
});

fn run_key(id: RunId) -> [u8; 16] {
    id.as_uuid().into_bytes()
}

fn decode<T: serde::de::DeserializeOwned>(
    table: &str,
    key: &str,
    text: &str,
) -> Result<T, StoreError> {
    match serde_json::from_str(text) {
        Ok(decoded) => Ok(decoded),
        Err(_) => Ok(nesting::decode_stored(table, &key, text)?),
    }
}

/// Decodes `(record, id)` rows.
fn run_rows(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(args)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let id: [u8; 16] = row.get(1)?;
        let key = RunId::from_uuid(Uuid::from_bytes(id)).to_string();
        let text: String = row.get(0)?;
        out.push(decode("flow_runs", &key, &text)?);
    }
    Ok(out)
}

pub(super) fn run(conn: &Connection, id: RunId) -> Result<Option<RunRecord>, StoreError> {
    Ok(run_rows(
        conn,
        "SELECT record, id FROM flow_runs WHERE id = ?1",
        params![run_key(id)],
    )?
    .pop())
}

pub(super) fn run_for_key(conn: &Connection, key: &str) -> Result<Option<RunId>, StoreError> {
    let found: Option<[u8; 16]> = conn
        .prepare_cached("SELECT id FROM flow_runs WHERE idem_key = ?1")?
        .query_row(params![key], |row| row.get(0))
        .optional()?;
    Ok(found.map(|id| RunId::from_uuid(Uuid::from_bytes(id))))
}

/// Newest first; each combination of filters is its own cached statement.
pub(super) fn list_runs(
    conn: &Connection,
    filter: &RunFilter,
) -> Result<Vec<RunSummary>, StoreError> {
    let mut sql = "SELECT id, flow, status, session, created_ms, updated_ms, \
                   json_extract(record, '$.error') FROM flow_runs WHERE 1"
        .to_owned();
    let mut args: Vec<SqlValue> = Vec::with_capacity(5);
    if let Some(status) = filter.status {
        sql.push_str(" AND status = ?");
        args.push(SqlValue::Text(status.as_str().to_owned()));
    }
    if let Some(flow) = &filter.flow {
        sql.push_str(" AND flow = ?");
        args.push(SqlValue::Text(flow.clone()));
    }
    if let Some(session) = filter.session {
        sql.push_str(" AND session = ?");
        args.push(SqlValue::Blob(session_key(session).to_vec()));
    }
    if let Some(before) = filter.before {
        sql.push_str(" AND id < ?");
        args.push(SqlValue::Blob(run_key(before).to_vec()));
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(SqlValue::Integer(sql_limit(filter.limit)));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(args))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let id = RunId::from_uuid(Uuid::from_bytes(row.get(0)?));
        let status: String = row.get(2)?;
        let session: Option<[u8; 16]> = row.get(3)?;
        out.push(RunSummary {
            id,
            flow: row.get(1)?,
            status: status
                .parse()
                .map_err(|_| StoreError::Schema(format!("run {id}: unknown status {status:?}")))?,
            session: session.map(|s| SessionId::from_uuid(Uuid::from_bytes(s))),
            created_ms: row.get(4)?,
            updated_ms: row.get(5)?,
            error: row.get(6)?,
        });
    }
    Ok(out)
}

pub(super) fn open_runs(conn: &Connection) -> Result<Vec<RunRecord>, StoreError> {
    run_rows(conn, &OPEN_RUNS, [])
}

pub(super) fn flow_doc(conn: &Connection, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
    let found: Option<(String, String)> = conn
        .prepare_cached("SELECT name, doc FROM flow_docs WHERE hash = ?1")?
        .query_row(params![hash], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((name, text)) = found else {
        return Ok(None);
    };
    Ok(Some(FlowDoc {
        hash: hash.to_owned(),
        name,
        doc: decode("flow_docs", hash, &text)?,
    }))
}

/// Deletes terminal runs last updated before `cutoff` (their keys are
/// columns of their rows, so they go too), one bounded writer job at a time.
pub(super) async fn prune(db: &SqliteDb, cutoff: i64) -> Result<(), StoreError> {
    while db.write(move |tx| prune_chunk(tx, cutoff)).await? == RUN_CHUNK {}
    Ok(())
}

fn prune_chunk(tx: &Transaction<'_>, cutoff: i64) -> Result<usize, StoreError> {
    Ok(tx
        .prepare_cached(&PRUNE_RUNS)?
        .execute(params![cutoff, sql_limit(RUN_CHUNK)])?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use swarmd_output_store::{SqliteDb, SqliteOptions};

    use crate::store::conformance::{apply, put_run, run_record};
    use crate::store::{SqliteTaskStore, TaskStore};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_3_file_gains_the_run_tables_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swarmd.db");
        let open = || SqliteTaskStore::open(SqliteDb::open(SqliteOptions::new(&path)).unwrap());
        // A file as version 3 left it: every table but the runs' and docs'.
        open().unwrap().db().close().unwrap();
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE flow_runs; DROP TABLE flow_docs; PRAGMA user_version = 3;")
            .unwrap();
        drop(conn);

        let store = Arc::new(open().unwrap());
        let mut run = run_record("f", RunStatus::Waiting, 5);
        run.idempotency_key = Some("k".to_owned());
        let doc = FlowDoc {
            hash: run.flow_hash.clone(),
            name: "f".to_owned(),
            doc: json!({"nodes": []}),
        };
        let batch = vec![
            put_run(&run),
            crate::store::WriteOp::PutFlow(Box::new(doc.clone())),
        ];
        apply(&*store, batch).await;
        assert_eq!(store.run(run.id).await.unwrap(), Some(run.clone()));
        assert_eq!(store.run_for_key("k").await.unwrap(), Some(run.id));
        assert_eq!(store.open_runs().await.unwrap(), vec![run]);
        assert_eq!(store.flow_doc(&doc.hash).await.unwrap(), Some(doc));
        store.db().close().unwrap();

        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SqliteTaskStore::SCHEMA_VERSION);
        let indexed: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'flow_runs_status'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(indexed, 1);
    }
}
