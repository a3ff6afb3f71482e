//! The read side of the SQLite `TaskStore`: queries run on a pooled read
//! connection, and the decoding of stored rows back into records.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use rusqlite::types::{Type, Value as SqlValue, ValueRef};
use rusqlite::{
    CachedStatement, Connection, OptionalExtension, Params, Row, params, params_from_iter,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use swarmd_output_store::{StoreError, nesting};
use uuid::Uuid;

use super::schema::PRUNED_EVENT_SEQ;
use super::write::task_key;
use crate::audit::AuditRecord;
use crate::event::EventRecord;
use crate::ids::TaskId;
use crate::store::{LiveSnapshot, TaskFilter, TaskListing};
use crate::task::{AttemptRecord, Task, TaskStatus};

/// `'queued', 'running'`, or the terminal statuses: SQL lists derived from
/// `TaskStatus` so a new status cannot be forgotten here.
pub(super) fn status_list(terminal: bool) -> String {
    TaskStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal() == terminal)
        .map(|status| format!("'{}'", status.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

static LIVE_TASKS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE status IN ({}) ORDER BY id",
        status_list(false)
    )
});

/// Row counts and limits as SQLite integers; a `usize` beyond `i64` means "all".
pub(super) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

pub(super) fn task_id(bytes: [u8; 16]) -> TaskId {
    TaskId::from_uuid(Uuid::from_bytes(bytes))
}

/// Decodes the JSON text in column `index` of a row of `table`. A row deeper
/// than the decoder takes comes back with its deep parts replaced (see
/// `nesting::decode_stored`); the row is named in the log by `row_key`.
fn json<T: DeserializeOwned>(
    table: &str,
    row: &Row<'_>,
    index: usize,
    row_key: impl Fn(&Row<'_>) -> String,
) -> Result<T, StoreError> {
    let text = row
        .get_ref(index)?
        .as_str()
        .map_err(rusqlite::Error::from)?;
    match serde_json::from_str(text) {
        Ok(decoded) => Ok(decoded),
        Err(_) => Ok(nesting::decode_stored(table, &row_key(row), text)?),
    }
}

/// A row named by a digest of its body, for tables read without their key.
fn body_key(index: usize) -> impl Fn(&Row<'_>) -> String {
    move |row| {
        let body = row.get_ref(index).ok().and_then(|v| v.as_bytes().ok());
        let digest = Sha256::digest(body.unwrap_or_default());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("body:{hex}")
    }
}

/// Runs `stmt` and decodes the JSON body in the first column of every row.
fn bodies<T: DeserializeOwned>(
    table: &str,
    mut stmt: CachedStatement<'_>,
    params: impl Params,
) -> Result<Vec<T>, StoreError> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(json(table, row, 0, body_key(0))?);
    }
    Ok(out)
}

/// Task rows, as selected by [`TASK_COLUMNS`]. A row whose body cannot be
/// decoded at all stands in as a task built from its indexed columns, with a
/// `reason` saying so, so that one bad row never fails a page.
fn task_rows(stmt: CachedStatement<'_>, params: impl Params) -> Result<Vec<Task>, StoreError> {
    Ok(weighed_task_rows(stmt, params, usize::MAX)?.tasks)
}

/// [`task_rows`], ending once the rows read weigh `max_bytes` (their
/// stored `body` and `spec`); `cut` when a row is left after that.
fn weighed_task_rows(
    mut stmt: CachedStatement<'_>,
    params: impl Params,
    max_bytes: usize,
) -> Result<TaskListing, StoreError> {
    let mut rows = stmt.query(params)?;
    let mut out = TaskListing::default();
    let mut weight = 0usize;
    while let Some(row) = rows.next()? {
        if weight >= max_bytes {
            out.cut = true;
            break;
        }
        weight = weight.saturating_add(stored_len(row, 0)?.saturating_add(stored_len(row, 5)?));
        let key = |row: &Row<'_>| {
            row.get::<_, [u8; 16]>(1)
                .map_or_else(|_| "?".to_owned(), |id| task_id(id).to_string())
        };
        match task_of(row, key) {
            Ok(task) => out.tasks.push(task),
            Err(StoreError::Json(_)) => out.tasks.push(unreadable_task(row)?),
            Err(other) => return Err(other),
        }
    }
    Ok(out)
}

/// The bytes of column `idx` as stored (0 for NULL).
fn stored_len(row: &Row<'_>, idx: usize) -> Result<usize, StoreError> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes.len(),
        _ => 0,
    })
}

/// The columns [`task_rows`] reads.
const TASK_COLUMNS: &str = "body, id, status, agent, finished_ms, spec";

/// A task from its row: its spec and state, or the whole task in `body`
/// when the row has no spec.
fn task_of(row: &Row<'_>, key: impl Fn(&Row<'_>) -> String) -> Result<Task, StoreError> {
    if row.get_ref(5)?.data_type() == Type::Null {
        return json("tasks", row, 0, key);
    }
    let spec: Map<String, Value> = json("tasks", row, 5, &key)?;
    let state: Map<String, Value> = json("tasks", row, 0, &key)?;
    Ok(Task::from_parts(spec, state)?)
}

fn unreadable_task(row: &Row<'_>) -> Result<Task, StoreError> {
    let id = task_id(row.get(1)?);
    let status: String = row.get(2)?;
    let agent: String = row.get(3)?;
    let finished_ms: Option<u64> = row.get(4)?;
    let stamp = finished_ms.unwrap_or(0);
    let stand_in = serde_json::json!({
        "id": id,
        "agent": agent,
        "prompt": "",
        "policy": crate::task::Policy::default(),
        "depth": 0,
        "status": status,
        "attempt": 0,
        "reason": UNREADABLE_TASK_REASON,
        "created_ms": stamp,
        "updated_ms": stamp,
        "finished_ms": finished_ms,
    });
    Ok(serde_json::from_value(stand_in)?)
}

/// The `reason` of a task read back in place of an unreadable record.
pub(crate) const UNREADABLE_TASK_REASON: &str = "the stored record of this task cannot be read";

pub(super) fn task(conn: &Connection, id: TaskId) -> Result<Option<Task>, StoreError> {
    let stmt = conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))?;
    Ok(task_rows(stmt, params![task_key(id)])?.pop())
}

pub(super) fn attempts(conn: &Connection, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
    let stmt = conn.prepare_cached("SELECT body FROM attempts WHERE task = ?1 ORDER BY attempt")?;
    bodies("attempts", stmt, params![task_key(id)])
}

/// Newest first, ending at `max_bytes` ([`weighed_task_rows`]); each
/// combination of filters is its own cached statement.
pub(super) fn list_page(
    conn: &Connection,
    filter: &TaskFilter,
    max_bytes: usize,
) -> Result<TaskListing, StoreError> {
    let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1");
    let mut args: Vec<SqlValue> = Vec::with_capacity(8);
    if let Some(status) = filter.status {
        sql.push_str(" AND status = ?");
        args.push(SqlValue::Text(status.as_str().to_owned()));
    }
    if let Some(agent) = &filter.agent {
        sql.push_str(" AND agent = ?");
        args.push(SqlValue::Text(agent.clone()));
    }
    if let Some(before) = filter.before {
        sql.push_str(" AND id < ?");
        args.push(SqlValue::Blob(task_key(before).to_vec()));
    }
    if let Some(since) = filter.since {
        sql.push_str(" AND id >= ?");
        args.push(SqlValue::Blob(task_key(since).to_vec()));
    }
    // These read the spec (the whole body in a row without one): a scan in
    // id order that stops at `limit` matches.
    if let Some(session) = filter.session {
        sql.push_str(" AND json_extract(coalesce(spec, body), '$.session') = ?");
        args.push(SqlValue::Text(session.to_string()));
    }
    if let Some(parent) = filter.parent {
        sql.push_str(" AND json_extract(coalesce(spec, body), '$.parent') = ?");
        args.push(SqlValue::Text(parent.to_string()));
    }
    if let Some(from) = filter.continued_from {
        sql.push_str(" AND json_extract(coalesce(spec, body), '$.continued_from') = ?");
        args.push(SqlValue::Text(from.to_string()));
    }
    if let Some(text) = &filter.prompt_contains {
        // SQLite's lower() folds ASCII only, as `TaskFilter::matches` does.
        sql.push_str(
            " AND instr(lower(json_extract(coalesce(spec, body), '$.prompt')), lower(?)) > 0",
        );
        args.push(SqlValue::Text(text.clone()));
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(SqlValue::Integer(sql_limit(filter.limit)));
    weighed_task_rows(
        conn.prepare_cached(&sql)?,
        params_from_iter(args),
        max_bytes,
    )
}

/// The newest `window` tasks of `status`, counted by agent.
pub(super) fn count_by_agent(
    conn: &Connection,
    status: TaskStatus,
    window: usize,
) -> Result<BTreeMap<String, usize>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT agent, count(*) FROM \
         (SELECT agent FROM tasks WHERE status = ?1 ORDER BY id DESC LIMIT ?2) GROUP BY agent",
    )?;
    let mut rows = stmt.query(params![status.as_str(), sql_limit(window)])?;
    let mut counts = BTreeMap::new();
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(1)?;
        counts.insert(row.get(0)?, usize::try_from(n).unwrap_or(0));
    }
    Ok(counts)
}

pub(super) fn task_for_key(conn: &Connection, key: &str) -> Result<Option<TaskId>, StoreError> {
    let found: Option<[u8; 16]> = conn
        .prepare_cached("SELECT task FROM idem_keys WHERE key = ?1")?
        .query_row(params![key], |row| row.get(0))
        .optional()?;
    Ok(found.map(task_id))
}

pub(super) fn events_after(
    conn: &Connection,
    after_seq: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    // A cursor beyond i64 is past every stored seq.
    let Ok(after) = i64::try_from(after_seq) else {
        return Ok(Vec::new());
    };
    let mut stmt =
        conn.prepare_cached("SELECT body, seq FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let mut rows = stmt.query(params![after, sql_limit(limit)])?;
    let mut out = Vec::new();
    let key = |row: &Row<'_>| format!("seq:{}", row.get::<_, i64>(1).unwrap_or(-1));
    while let Some(row) = rows.next()? {
        // An event has no stand-in form; an undecodable one is logged (once)
        // and left out, and the stream goes on after it.
        match json("events", row, 0, key) {
            Ok(record) => out.push(record),
            Err(StoreError::Json(_)) => {}
            Err(other) => return Err(other),
        }
    }
    Ok(out)
}

/// Newest first; the record's `id` is the row id the store assigned.
pub(super) fn audit(
    conn: &Connection,
    task: Option<TaskId>,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    let limit = sql_limit(limit);
    let mut stmt;
    let mut rows = match task {
        Some(task) => {
            stmt = conn.prepare_cached(
                "SELECT id, body FROM audit WHERE task = ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            stmt.query(params![task_key(task), limit])?
        }
        None => {
            stmt = conn.prepare_cached("SELECT id, body FROM audit ORDER BY id DESC LIMIT ?1")?;
            stmt.query(params![limit])?
        }
    };
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut record: AuditRecord = json("audit", row, 1, body_key(1))?;
        record.id = row.get(0)?;
        out.push(record);
    }
    Ok(out)
}

/// Reads the snapshot inside one read transaction, so every part of it comes
/// from the same commit.
pub(super) fn load_live(conn: &Connection, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
    let snapshot = conn.unchecked_transaction()?;
    let mut snap = LiveSnapshot {
        tasks: task_rows(snapshot.prepare_cached(&LIVE_TASKS)?, [])?,
        sessions: bodies(
            "sessions",
            snapshot.prepare_cached("SELECT body FROM sessions ORDER BY sid")?,
            [],
        )?,
        ..LiveSnapshot::default()
    };

    let mut stmt = snapshot.prepare_cached(
        "SELECT body FROM attempts WHERE task = ?1 ORDER BY attempt DESC LIMIT 1",
    )?;
    for task in &snap.tasks {
        let mut rows = stmt.query(params![task_key(task.id)])?;
        if let Some(row) = rows.next()? {
            snap.attempts.push(json("attempts", row, 0, body_key(0))?);
        }
    }

    // Stored expiries fit in i64, so a `now` beyond it has expired them all.
    if let Ok(now) = i64::try_from(now_secs) {
        let mut stmt = snapshot.prepare_cached(
            "SELECT digest, body FROM handles WHERE exp_secs > ?1 ORDER BY digest",
        )?;
        let mut rows = stmt.query(params![now])?;
        while let Some(row) = rows.next()? {
            let digest: [u8; 32] = row.get(0)?;
            snap.handles
                .push((digest, json("handles", row, 1, body_key(1))?));
        }
    }

    let stored: Option<u64> = snapshot
        .prepare_cached("SELECT MAX(seq) FROM events")?
        .query_row([], |row| row.get(0))?;
    let pruned: Option<u64> = snapshot
        .prepare_cached("SELECT value FROM task_store_meta WHERE name = ?1")?
        .query_row(params![PRUNED_EVENT_SEQ], |row| row.get(0))
        .optional()?;
    snap.last_event_seq = stored.unwrap_or(0).max(pruned.unwrap_or(0));
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lists_split_live_from_terminal() {
        assert_eq!(status_list(false), "'queued', 'running'");
        assert_eq!(
            status_list(true),
            "'pass', 'blocked', 'failed', 'cancelled'"
        );
    }

    #[test]
    fn limits_saturate_at_i64() {
        assert_eq!(sql_limit(7), 7);
        assert_eq!(sql_limit(usize::MAX), i64::MAX);
    }
}
