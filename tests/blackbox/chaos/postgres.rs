//! Crash chaos on PostgreSQL: the run of `chaos` against a daemon on a
//! fresh database of the test cluster, with every delegated result spilled
//! to the `blobs` table; the checks see spilled values as the SubAgents
//! posted them (`resolve_blobs`), then the database's own integrity: the
//! event log gapless from 1, every output's spilled value present.

use serde_json::{Value, json};
use swarmd_postgres::PgDb;
use swarmd_postgres::testing::{TestDatabase, fresh_database};

use crate::chaos::checks::{Check, Stored};
use crate::chaos::{AGENTS, Backend, Beside, env_number, run};
use crate::daemon::Swarmd;

/// Kills in the short mode: a run stays under about 40 s.
const SHORT_KILLS: u64 = 12;

/// Values over 32 bytes (every delegated result) spill.
const SPILL: &str = "\n[limits]\ninline_max_bytes = 32\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_on_postgres_loses_nothing_acknowledged() {
    let kills = env_number("SWARMD_CHAOS_KILLS").unwrap_or(SHORT_KILLS);
    let database = fresh_database().await;
    let sw = Swarmd::on_database(&format!("{SPILL}{AGENTS}"), &database);
    run(sw, kills, Backend::Postgres(database), Beside::default()).await;
}

/// Replaces every `file_ref` to a spilled blob in the fetched outputs and
/// task views by the value its bytes hold (an output's content by its
/// inline form), so the checks compare what was posted with what is
/// stored. A blob that is not there leaves the reference, which the checks
/// then report.
pub(super) async fn resolve_blobs(database: &TestDatabase, stored: &mut Stored) {
    let db = PgDb::open(database.options()).await.unwrap();
    let blobs: std::collections::HashMap<String, Value> = db
        .query_text("SELECT sha256 || ' ' || convert_from(bytes, 'UTF8') FROM blobs")
        .await
        .into_iter()
        .filter_map(|row| {
            let (name, text) = row.split_once(' ')?;
            Some((name.to_owned(), serde_json::from_str(text).ok()?))
        })
        .collect();
    db.close().await;
    for records in stored.outputs.values_mut() {
        records
            .iter_mut()
            .for_each(|record| resolve(record, &blobs, ""));
    }
    for view in stored.views.values_mut().flatten() {
        resolve(view, &blobs, "");
    }
}

/// `value` with its blob references resolved; `key` is the field holding it.
fn resolve(value: &mut Value, blobs: &std::collections::HashMap<String, Value>, key: &str) {
    if value["kind"] == "file_ref"
        && let Some(bytes) = value["sha256"].as_str().and_then(|name| blobs.get(name))
        && value["path"].as_str()
            == value["sha256"]
                .as_str()
                .map(|n| format!("blobs/{n}"))
                .as_deref()
    {
        *value = if key == "content" {
            json!({"kind": "inline", "value": bytes})
        } else {
            bytes.clone()
        };
        return;
    }
    match value {
        Value::Object(fields) => fields
            .iter_mut()
            .for_each(|(key, field)| resolve(field, blobs, key)),
        Value::Array(items) => items.iter_mut().for_each(|item| resolve(item, blobs, key)),
        _ => {}
    }
}

/// What a crash must never leave in the database: a hole in the event log
/// (the writer commits events in seq order, and a restart numbers after
/// the last one committed), or an output naming a blob that is not there
/// (blobs are durable before their row is queued).
pub(super) async fn integrity(database: TestDatabase) -> Check {
    let db = PgDb::open(database.options()).await.unwrap();
    let mut offenders = Vec::new();
    let seqs = db
        .query_text("SELECT seq::text AS seq_text FROM events ORDER BY seq")
        .await;
    for (expected, seq) in (1u64..).zip(&seqs) {
        if seq.parse::<u64>().ok() != Some(expected) {
            offenders.push(format!("event log: seq {seq} where {expected} belongs"));
            break;
        }
    }
    let missing = db
        .query_text(
            "SELECT o.task::text || '/' || o.attempt || '/' || o.seq FROM outputs o
             WHERE strpos(o.event, '\"path\":\"blobs/') > 0
               AND NOT EXISTS (SELECT 1 FROM blobs b
                               WHERE strpos(o.event, 'blobs/' || b.sha256) > 0)",
        )
        .await;
    offenders.extend(
        missing
            .into_iter()
            .map(|key| format!("output {key}: blob missing")),
    );
    if db.query_i32("SELECT count(*)::int FROM blobs").await == [0] {
        offenders.push("no value was spilled: the run did not test blobs".to_owned());
    }
    db.close().await;
    Check {
        name: "postgres_integrity",
        offenders,
    }
}
