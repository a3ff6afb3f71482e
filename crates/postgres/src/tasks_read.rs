//! The read side of `PgTaskStore`, and its retention: queries on pooled
//! connections, and the decoding of stored rows back into records.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::{EventRecord, Logged};
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::{PostedFinal, TaskFilter, TaskListing};
use swarmd_engine::task::{AttemptRecord, Task, TaskStatus};
use swarmd_output_store::{StoreError, nesting};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::PgDb;
use crate::connect::db_error;
use crate::rows::int;

/// Tasks deleted per retention transaction.
const TASK_CHUNK: i64 = 256;
/// Events deleted per retention transaction.
const EVENT_CHUNK: i64 = 4096;
/// `task_store_meta` row holding the highest event seq ever pruned, so the
/// sequence never restarts below it once old events are gone.
pub(crate) const PRUNED_EVENT_SEQ: &str = "pruned_event_seq";

/// The statuses that are (or are not) terminal, as a SQL array.
pub(crate) fn statuses(terminal: bool) -> Vec<&'static str> {
    TaskStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal() == terminal)
        .map(TaskStatus::as_str)
        .collect()
}

/// Decodes a stored JSON body; one deeper than the decoder takes comes back
/// with its deep parts replaced (`nesting::decode_stored`).
pub(crate) fn decode<T: DeserializeOwned>(
    table: &str,
    key: &str,
    text: &str,
) -> Result<T, StoreError> {
    match serde_json::from_str(text) {
        Ok(decoded) => Ok(decoded),
        Err(_) => Ok(nesting::decode_stored(table, &key, text)?),
    }
}

/// The columns [`task_of`] reads, first in a task query's select list.
pub(crate) const TASK_COLUMNS: &str = "body, id, spec";

/// A task from a row selected with [`TASK_COLUMNS`] first: its spec and
/// its state, or the whole task in `body` when the row has no spec (a row
/// an older build wrote).
pub(crate) fn task_of(row: &tokio_postgres::Row) -> Result<Task, StoreError> {
    let id: Uuid = row.get(1);
    let key = id.to_string();
    let body: &str = row.get(0);
    match row.get::<_, Option<&str>>(2) {
        None => decode("tasks", &key, body),
        Some(spec) => {
            let spec: Map<String, Value> = decode("tasks", &key, spec)?;
            let state: Map<String, Value> = decode("tasks", &key, body)?;
            Ok(Task::from_parts(spec, state)?)
        }
    }
}

async fn task_rows(
    db: &PgDb,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Task>, StoreError> {
    let client = db.reader().await?;
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    let rows = client.query(&statement, params).await.map_err(db_error)?;
    rows.iter().map(task_of).collect()
}

pub(crate) async fn task(db: &PgDb, id: TaskId) -> Result<Option<Task>, StoreError> {
    let id = id.as_uuid();
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1");
    Ok(task_rows(db, &sql, &[&id]).await?.pop())
}

pub(crate) async fn attempts(db: &PgDb, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached("SELECT body FROM attempts WHERE task = $1 ORDER BY attempt")
        .await
        .map_err(db_error)?;
    let rows = client
        .query(&statement, &[&id.as_uuid()])
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| decode("attempts", &id.to_string(), row.get(0)))
        .collect()
}

/// Newest first, ending once the rows read weigh `max_bytes` (their
/// `body` and `spec`); each combination of filters is its own cached
/// statement.
pub(crate) async fn list_page(
    db: &PgDb,
    filter: &TaskFilter,
    max_bytes: usize,
) -> Result<TaskListing, StoreError> {
    let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE true");
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::with_capacity(8);
    let mut arg = |sql: &mut String, clause: &str, value: Box<dyn ToSql + Sync + Send>| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("${}", args.len())));
    };
    if let Some(status) = filter.status {
        arg(&mut sql, " AND status = ?", Box::new(status.as_str()));
    }
    if let Some(agent) = &filter.agent {
        arg(&mut sql, " AND agent = ?", Box::new(agent.clone()));
    }
    if let Some(before) = filter.before {
        arg(&mut sql, " AND id < ?", Box::new(before.as_uuid()));
    }
    if let Some(since) = filter.since {
        arg(&mut sql, " AND id >= ?", Box::new(since.as_uuid()));
    }
    if let Some(session) = filter.session {
        arg(&mut sql, " AND session = ?", Box::new(session.as_uuid()));
    }
    if let Some(parent) = filter.parent {
        arg(&mut sql, " AND parent = ?", Box::new(parent.as_uuid()));
    }
    if let Some(from) = filter.continued_from {
        arg(
            &mut sql,
            " AND continued_from = ?",
            Box::new(from.as_uuid()),
        );
    }
    if let Some(text) = &filter.prompt_contains {
        // Folds ASCII letters only, as `TaskFilter::matches` does. The
        // prompt is in the spec (in `body` in a row without one).
        arg(
            &mut sql,
            " AND strpos(translate((coalesce(spec, body)::json ->> 'prompt'), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', \
             'abcdefghijklmnopqrstuvwxyz'), translate(?, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', \
             'abcdefghijklmnopqrstuvwxyz')) > 0",
            Box::new(text.clone()),
        );
    }
    arg(
        &mut sql,
        " ORDER BY id DESC LIMIT ?",
        Box::new(sql_limit(filter.limit)),
    );
    let params: Vec<&(dyn ToSql + Sync)> = args
        .iter()
        .map(|arg| &**arg as &(dyn ToSql + Sync))
        .collect();
    if max_bytes == usize::MAX {
        let tasks = task_rows(db, &sql, &params).await?;
        return Ok(TaskListing { tasks, cut: false });
    }
    weighed_task_rows(db, &sql, &params, max_bytes).await
}

/// Rows fetched by a listing's first round trip.
const FIRST_CHUNK: i32 = 8;
/// Rows fetched by any one round trip of a listing.
const MAX_CHUNK: i32 = 256;

/// Task rows through a portal, a few at a time, ending once the rows read
/// weigh `max_bytes`: rows past that are never sent, so a listing over
/// huge prompts holds about its budget, not its `LIMIT` of them.
async fn weighed_task_rows(
    db: &PgDb,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    max_bytes: usize,
) -> Result<TaskListing, StoreError> {
    let mut client = db.reader().await?;
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    let tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .map_err(db_error)?;
    let portal = tx.bind(&statement, params).await.map_err(db_error)?;
    let mut page = TaskListing::default();
    let mut weight = 0usize;
    let mut chunk = FIRST_CHUNK;
    'fetch: loop {
        let rows = tx.query_portal(&portal, chunk).await.map_err(db_error)?;
        for row in &rows {
            if weight >= max_bytes {
                page.cut = true;
                break 'fetch;
            }
            let spec = row.get::<_, Option<&str>>(2).map_or(0, str::len);
            weight = weight.saturating_add(row.get::<_, &str>(0).len() + spec);
            page.tasks.push(task_of(row)?);
        }
        if rows.len() < usize::try_from(chunk).unwrap_or(0) {
            break;
        }
        // As many rows as the budget left holds at the mean weight so far,
        // and one more to learn whether the page ends there.
        let mean = (weight / page.tasks.len().max(1)).max(1);
        let fits = max_bytes.saturating_sub(weight) / mean + 1;
        chunk = i32::try_from(fits).unwrap_or(MAX_CHUNK).clamp(1, MAX_CHUNK);
    }
    tx.commit().await.map_err(db_error)?;
    Ok(page)
}

/// The newest `window` tasks of `status`, counted by agent.
pub(crate) async fn count_by_agent(
    db: &PgDb,
    status: TaskStatus,
    window: usize,
) -> Result<BTreeMap<String, usize>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached(
            "SELECT agent, count(*) FROM \
             (SELECT agent FROM tasks WHERE status = $1 ORDER BY id DESC LIMIT $2) AS newest \
             GROUP BY agent",
        )
        .await
        .map_err(db_error)?;
    let rows = client
        .query(&statement, &[&status.as_str(), &sql_limit(window)])
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|row| {
            let n: i64 = row.get(1);
            (row.get(0), usize::try_from(n).unwrap_or(0))
        })
        .collect())
}

/// Row counts as SQL integers; a `usize` beyond `i64` means "all".
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

pub(crate) async fn task_for_key(db: &PgDb, key: &str) -> Result<Option<TaskId>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached("SELECT task FROM idem_keys WHERE key = $1")
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&statement, &[&key])
        .await
        .map_err(db_error)?;
    Ok(row.map(|row| TaskId::from_uuid(row.get(0))))
}

pub(crate) async fn posted_final(
    db: &PgDb,
    task: TaskId,
    attempt: u32,
) -> Result<Option<PostedFinal>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached("SELECT key, digest FROM posted_finals WHERE task = $1 AND attempt = $2")
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&statement, &[&task.as_uuid(), &i64::from(attempt)])
        .await
        .map_err(db_error)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let digest: &[u8] = row.get(1);
    let body_digest = <[u8; 32]>::try_from(digest)
        .map_err(|_| StoreError::Schema("a posted-Final digest is not 32 bytes".to_owned()))?;
    Ok(Some(PostedFinal {
        idempotency_key: row.get(0),
        body_digest,
    }))
}

pub(crate) async fn events_after(
    db: &PgDb,
    after_seq: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    // An event has no stand-in form; an undecodable one is left out.
    let logged = log_after(db, after_seq, limit, None).await?;
    Ok(logged
        .into_iter()
        .filter_map(|entry| match entry {
            Logged::Whole(record) => Some(record),
            Logged::Seq(_) => None,
        })
        .collect())
}

/// The log after `after_seq`: the records of `kinds` (every record when
/// `None`, and those logged before events had a kind column) read whole,
/// the rest as their seq, their bodies never leaving the database. An
/// undecodable record also comes as its seq, so it is stepped past.
pub(crate) async fn log_after(
    db: &PgDb,
    after_seq: u64,
    limit: usize,
    kinds: Option<&[&str]>,
) -> Result<Vec<Logged>, StoreError> {
    // A cursor beyond i64 is past every stored seq.
    let Ok(after) = i64::try_from(after_seq) else {
        return Ok(Vec::new());
    };
    let client = db.reader().await?;
    let statement = client
        .prepare_cached(
            "SELECT seq, CASE WHEN $3::text[] IS NULL OR kind IS NULL OR kind = ANY($3) THEN body END
             FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .await
        .map_err(db_error)?;
    let rows = client
        .query(&statement, &[&after, &sql_limit(limit), &kinds])
        .await
        .map_err(db_error)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.get(0);
        let seq_u = seq.max(0) as u64;
        let Some(body) = row.get::<_, Option<&str>>(1) else {
            out.push(Logged::Seq(seq_u));
            continue;
        };
        // The body was encoded before the commit numbered it: the column
        // holds the seq.
        match decode::<EventRecord>("events", &format!("seq:{seq}"), body) {
            Ok(mut record) => {
                record.seq = seq_u;
                out.push(Logged::Whole(record));
            }
            Err(StoreError::Json(_)) => out.push(Logged::Seq(seq_u)),
            Err(other) => return Err(other),
        }
    }
    Ok(out)
}

/// Newest first; the record's `id` is the one the store assigned.
pub(crate) async fn audit(
    db: &PgDb,
    task: Option<TaskId>,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    let client = db.reader().await?;
    let limit = sql_limit(limit);
    let rows = match task {
        Some(task) => {
            let statement = client
                .prepare_cached(
                    "SELECT id, body FROM audit WHERE task = $1 ORDER BY id DESC LIMIT $2",
                )
                .await
                .map_err(db_error)?;
            client.query(&statement, &[&task.as_uuid(), &limit]).await
        }
        None => {
            let statement = client
                .prepare_cached("SELECT id, body FROM audit ORDER BY id DESC LIMIT $1")
                .await
                .map_err(db_error)?;
            client.query(&statement, &[&limit]).await
        }
    }
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let id: i64 = row.get(0);
            let mut record: AuditRecord = decode("audit", &format!("id:{id}"), row.get(1))?;
            record.id = id as u64;
            Ok(record)
        })
        .collect()
}

/// Reads the snapshot in one repeatable-read transaction, so every part of
/// it comes from the same commit.
/// Deletes terminal tasks finished before `cutoff_ms` (with their attempts,
/// handles, posted-Final fingerprints and idempotency keys) and events
/// stamped before it, in bounded transactions beside the writer (the rows
/// are final: nothing writes a terminal task again); returns the deleted
/// task ids in ascending (creation) order.
pub(crate) async fn prune(db: &PgDb, cutoff_ms: u64) -> Result<Vec<TaskId>, StoreError> {
    let cutoff = int(cutoff_ms);
    let terminal = statuses(true);
    let mut client = db.reader().await?;
    let mut gone = Vec::new();
    loop {
        let tx = client.transaction().await.map_err(db_error)?;
        let ids: Vec<Uuid> = tx
            .query(
                "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks
                     WHERE finished_ms < $1 AND status = ANY($2) LIMIT $3)
                 RETURNING id",
                &[&cutoff, &terminal, &TASK_CHUNK],
            )
            .await
            .map_err(db_error)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for table in ["attempts", "handles", "posted_finals", "idem_keys"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE task = ANY($1)"),
                &[&ids],
            )
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        let last = (ids.len() as i64) < TASK_CHUNK;
        gone.extend(ids.into_iter().map(TaskId::from_uuid));
        if last {
            break;
        }
    }
    loop {
        let tx = client.transaction().await.map_err(db_error)?;
        // The mark first, so `load_live` never hands out a used seq again.
        tx.execute(
            "INSERT INTO task_store_meta (name, value)
             SELECT $1, MAX(seq) FROM events HAVING MAX(seq) IS NOT NULL
             ON CONFLICT (name) DO UPDATE
                 SET value = GREATEST(task_store_meta.value, excluded.value)",
            &[&PRUNED_EVENT_SEQ],
        )
        .await
        .map_err(db_error)?;
        // Events are committed in seq order with nondecreasing stamps, so
        // the old ones are the leading run of the seq order.
        let deleted = tx
            .execute(
                "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE ts_ms < $1
                     ORDER BY seq LIMIT $2)",
                &[&cutoff, &EVENT_CHUNK],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        if (deleted as i64) < EVENT_CHUNK {
            break;
        }
    }
    gone.sort_unstable();
    Ok(gone)
}
