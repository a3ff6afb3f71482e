//! The live state a node reads: at boot (`load_live`, the tasks it owns,
//! or every live task outside a cluster) and at a takeover (the tasks just
//! taken), in one repeatable-read snapshot.

use swarmd_engine::store::LiveSnapshot;
use swarmd_output_store::StoreError;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::PgDb;
use crate::connect::db_error;
use crate::rows::int;
use crate::tasks_read::{PRUNED_EVENT_SEQ, decode, statuses, task_of};

/// Which live tasks a snapshot holds.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// Every live task (a database outside a cluster).
    All,
    /// The live tasks this node owns, with the sessions (at boot).
    Owner(Uuid),
    /// These tasks, just taken over: no sessions, no event seq.
    Tasks(Vec<Uuid>),
}

impl Scope {
    /// The condition on `tasks` (aliased `t`) after `$1`/`$2`, and its parameter.
    fn condition(&self) -> (&'static str, Option<&(dyn ToSql + Sync)>) {
        match self {
            Scope::All => ("true", None),
            Scope::Owner(node) => ("t.owner_node = $3", Some(node)),
            Scope::Tasks(ids) => ("t.id = ANY($3)", Some(ids)),
        }
    }
}

pub(crate) async fn load_live(
    db: &PgDb,
    now_secs: u64,
    scope: Scope,
) -> Result<LiveSnapshot, StoreError> {
    let mut client = db.reader().await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db_error)?;
    let live = statuses(false);
    let now = int(now_secs);
    let (condition, param) = scope.condition();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&live, &now];
    params.extend(param);
    let mut snap = LiveSnapshot::default();
    for row in tx
        .query(
            &format!(
                "SELECT t.body, t.id, t.spec FROM tasks t WHERE t.status = ANY($1)
                 AND $2::bigint >= 0 AND {condition} ORDER BY t.id"
            ),
            &params,
        )
        .await
        .map_err(db_error)?
    {
        snap.tasks.push(task_of(&row)?);
    }
    for row in tx
        .query(
            &format!(
                "SELECT DISTINCT ON (a.task) a.body FROM attempts a JOIN tasks t ON t.id = a.task
                 WHERE t.status = ANY($1) AND $2::bigint >= 0 AND {condition}
                 ORDER BY a.task, a.attempt DESC"
            ),
            &params,
        )
        .await
        .map_err(db_error)?
    {
        snap.attempts
            .push(decode("attempts", "latest", row.get(0))?);
    }
    // Outside a cluster every unexpired handle; in one, those of the
    // scope's tasks, live or not.
    let handles = match scope {
        Scope::All => "SELECT h.digest, h.body FROM handles h
             WHERE h.exp_secs > $2 AND cardinality($1::text[]) >= 0 ORDER BY h.digest"
            .to_owned(),
        _ => format!(
            "SELECT h.digest, h.body FROM handles h JOIN tasks t ON t.id = h.task
             WHERE h.exp_secs > $2 AND cardinality($1::text[]) >= 0 AND {condition}
             ORDER BY h.digest"
        ),
    };
    for row in tx.query(&handles, &params).await.map_err(db_error)? {
        let digest: &[u8] = row.get(0);
        let Ok(digest) = <[u8; 32]>::try_from(digest) else {
            continue;
        };
        snap.handles
            .push((digest, decode("handles", "handle", row.get(1))?));
    }
    if let Scope::Tasks(_) = scope {
        tx.commit().await.map_err(db_error)?;
        return Ok(snap);
    }
    for row in tx
        .query("SELECT body FROM sessions ORDER BY sid", &[])
        .await
        .map_err(db_error)?
    {
        snap.sessions
            .push(decode("sessions", "session", row.get(0))?);
    }
    let row = tx
        .query_one(
            "SELECT GREATEST(COALESCE((SELECT MAX(seq) FROM events), 0),
                             COALESCE((SELECT value FROM task_store_meta WHERE name = $1), 0),
                             (SELECT seq FROM event_head))",
            &[&PRUNED_EVENT_SEQ],
        )
        .await
        .map_err(db_error)?;
    snap.last_event_seq = row.get::<_, i64>(0).max(0) as u64;
    tx.commit().await.map_err(db_error)?;
    Ok(snap)
}
