//! Flow runs and flow documents in `PgTaskStore`: the reads, on pooled
//! connections, and the retention of old terminal runs. They are written
//! by the writer's groups (`rows`), like every other row.

use swarmd_engine::ids::{RunId, SessionId};
use swarmd_engine::run::{FlowDoc, RunFilter, RunRecord, RunStatus, RunSummary};
use swarmd_output_store::StoreError;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::PgDb;
use crate::connect::db_error;
use crate::rows::int;
use crate::tasks_read::decode;

/// Runs deleted per retention transaction.
const RUN_CHUNK: i64 = 256;

/// The run statuses that are (or are not) terminal, as a SQL array.
fn run_statuses(terminal: bool) -> Vec<&'static str> {
    RunStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal() == terminal)
        .map(RunStatus::as_str)
        .collect()
}

/// Row counts as SQL integers; a `usize` beyond `i64` means "all".
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Decodes `(record::text, id)` rows.
async fn run_rows(
    db: &PgDb,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<RunRecord>, StoreError> {
    let client = db.reader().await?;
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    let rows = client.query(&statement, params).await.map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let id = RunId::from_uuid(row.get(1));
            decode("flow_runs", &id.to_string(), row.get(0))
        })
        .collect()
}

pub(crate) async fn run(db: &PgDb, id: RunId) -> Result<Option<RunRecord>, StoreError> {
    let id = id.as_uuid();
    Ok(run_rows(
        db,
        "SELECT record::text, id FROM flow_runs WHERE id = $1",
        &[&id],
    )
    .await?
    .pop())
}

pub(crate) async fn run_for_key(db: &PgDb, key: &str) -> Result<Option<RunId>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached("SELECT id FROM flow_runs WHERE idem_key = $1")
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&statement, &[&key])
        .await
        .map_err(db_error)?;
    Ok(row.map(|row| RunId::from_uuid(row.get(0))))
}

/// Newest first; each combination of filters is its own cached statement.
pub(crate) async fn list_runs(
    db: &PgDb,
    filter: &RunFilter,
) -> Result<Vec<RunSummary>, StoreError> {
    let mut sql = "SELECT id, flow, status, session, created_ms, updated_ms, record ->> 'error' \
                   FROM flow_runs WHERE true"
        .to_owned();
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::with_capacity(5);
    let mut arg = |sql: &mut String, clause: &str, value: Box<dyn ToSql + Sync + Send>| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("${}", args.len())));
    };
    if let Some(status) = filter.status {
        arg(&mut sql, " AND status = ?", Box::new(status.as_str()));
    }
    if let Some(flow) = &filter.flow {
        arg(&mut sql, " AND flow = ?", Box::new(flow.clone()));
    }
    if let Some(session) = filter.session {
        arg(&mut sql, " AND session = ?", Box::new(session.as_uuid()));
    }
    if let Some(before) = filter.before {
        arg(&mut sql, " AND id < ?", Box::new(before.as_uuid()));
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
    let client = db.reader().await?;
    let statement = client.prepare_cached(&sql).await.map_err(db_error)?;
    let rows = client.query(&statement, &params).await.map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let id = RunId::from_uuid(row.get(0));
            let status: &str = row.get(2);
            Ok(RunSummary {
                id,
                flow: row.get(1),
                status: status.parse().map_err(|_| {
                    StoreError::Schema(format!("run {id}: unknown status {status:?}"))
                })?,
                session: row.get::<_, Option<Uuid>>(3).map(SessionId::from_uuid),
                created_ms: u64::try_from(row.get::<_, i64>(4)).unwrap_or(0),
                updated_ms: u64::try_from(row.get::<_, i64>(5)).unwrap_or(0),
                error: row.get(6),
            })
        })
        .collect()
}

/// Every open run; on a cluster node, only those it drives (a takeover
/// moves a dead node's runs to the node that took it over).
pub(crate) async fn open_runs(db: &PgDb) -> Result<Vec<RunRecord>, StoreError> {
    let open = run_statuses(false);
    match db.fence().node() {
        Some((me, _)) => {
            run_rows(
                db,
                "SELECT record::text, id FROM flow_runs
                 WHERE status = ANY($1) AND (owner_node = $2 OR owner_node IS NULL) ORDER BY id",
                &[&open, &me],
            )
            .await
        }
        None => {
            run_rows(
                db,
                "SELECT record::text, id FROM flow_runs WHERE status = ANY($1) ORDER BY id",
                &[&open],
            )
            .await
        }
    }
}

/// The open runs of a dead node become `me`'s, in the takeover's
/// transaction.
pub(crate) fn open_statuses() -> Vec<&'static str> {
    run_statuses(false)
}

pub(crate) async fn flow_doc(db: &PgDb, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
    let client = db.reader().await?;
    let statement = client
        .prepare_cached("SELECT name, doc::text FROM flow_docs WHERE hash = $1")
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&statement, &[&hash])
        .await
        .map_err(db_error)?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(FlowDoc {
        hash: hash.to_owned(),
        name: row.get(0),
        doc: decode("flow_docs", hash, row.get(1))?,
    }))
}

/// Deletes terminal runs last updated before `cutoff_ms` (their keys are
/// columns of their rows, so they go too), in bounded transactions beside
/// the writer. Flow documents stay.
pub(crate) async fn prune(db: &PgDb, cutoff_ms: u64) -> Result<(), StoreError> {
    let cutoff = int(cutoff_ms);
    let terminal = run_statuses(true);
    let client = db.reader().await?;
    loop {
        let deleted = client
            .execute(
                "DELETE FROM flow_runs WHERE id IN (SELECT id FROM flow_runs
                     WHERE status = ANY($1) AND updated_ms < $2 LIMIT $3)",
                &[&terminal, &cutoff, &RUN_CHUNK],
            )
            .await
            .map_err(db_error)?;
        if (deleted as i64) < RUN_CHUNK {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_statuses_split_live_from_terminal() {
        assert_eq!(run_statuses(false), ["running", "waiting"]);
        assert_eq!(run_statuses(true), ["passed", "failed", "cancelled"]);
        assert_eq!(sql_limit(usize::MAX), i64::MAX);
    }
}
