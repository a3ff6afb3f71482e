//! The invariants a chaos run must leave behind, checked against the daemon
//! through its HTTP API (and its database file once it stopped). Each check
//! collects its offenders; the run fails if any check has one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use futures_util::{StreamExt, stream};
use serde_json::{Value, json};

use crate::chaos::ledger::{Ctx, Records};

/// One check and what broke it.
#[derive(Debug)]
pub(super) struct Check {
    pub name: &'static str,
    pub offenders: Vec<String>,
}

/// What the daemon holds at the end of the run.
#[derive(Debug)]
pub(super) struct Stored {
    /// Every task the daemon lists, by id.
    pub listed: BTreeMap<String, Value>,
    /// `GET /v1/tasks/{id}` of every listed or acknowledged task (`None`
    /// when answered 404).
    pub views: BTreeMap<String, Option<Value>>,
    /// Output records of every viewed task.
    pub outputs: BTreeMap<String, Vec<Value>>,
}

pub(super) fn terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("pass" | "blocked" | "failed" | "cancelled")
    )
}

/// Every task the daemon lists, newest first, by cursor paging.
pub(super) async fn list_all(ctx: &Ctx) -> BTreeMap<String, Value> {
    let mut listed = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = "/v1/tasks?limit=1000".to_owned();
        if let Some(after) = &after {
            path.push_str(&format!("&after={after}"));
        }
        let page = get(ctx, &path)
            .await
            .unwrap_or_else(|| panic!("GET {path}: 404"));
        for task in page["tasks"].as_array().unwrap() {
            listed.insert(task["id"].as_str().unwrap().to_owned(), task.clone());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return listed,
        }
    }
}

/// A GET as the admin: the body, or `None` on 404; anything else panics.
async fn get(ctx: &Ctx, path: &str) -> Option<Value> {
    let response = ctx
        .http
        .get(ctx.url(path))
        .bearer_auth(&ctx.admin)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    match status {
        200 => Some(body),
        404 => None,
        _ => panic!("GET {path}: {status} {body}"),
    }
}

/// Reads the views and outputs of every listed or acknowledged task.
pub(super) async fn fetch(ctx: &Ctx, records: &Records) -> Stored {
    let listed = list_all(ctx).await;
    let mut ids: BTreeSet<String> = listed.keys().cloned().collect();
    ids.extend(records.tasks.values().flatten().cloned());
    let fetched: Vec<(String, Option<Value>, Vec<Value>)> = stream::iter(ids)
        .map(|id| async move {
            let view = get(ctx, &format!("/v1/tasks/{id}")).await;
            let output = match &view {
                Some(_) => get(ctx, &format!("/v1/tasks/{id}/output?limit=10000"))
                    .await
                    .map(|page| page["records"].as_array().unwrap().clone())
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            (id, view, output)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut stored = Stored {
        listed,
        views: BTreeMap::new(),
        outputs: BTreeMap::new(),
    };
    for (id, view, output) in fetched {
        stored.views.insert(id.clone(), view);
        stored.outputs.insert(id, output);
    }
    stored
}

/// The checks over the records and what the daemon holds; `sid` is the
/// MainAI's session.
pub(super) fn run(records: &Records, stored: &Stored, sid: &str) -> Vec<Check> {
    let [done_missing, done_wrong] = task_done(records, stored, sid);
    vec![
        acked_task_missing(records, stored),
        key_made_two_tasks(records, stored),
        acked_result_not_deciding(records, stored),
        stuck_non_terminal(stored),
        output_seq_gap(stored),
        done_missing,
        done_wrong,
        acked_cancel_lost(records, stored),
        Check {
            name: "unexpected_answer",
            offenders: records.unexpected.clone(),
        },
    ]
}

fn acked_task_missing(records: &Records, stored: &Stored) -> Check {
    let offenders = records
        .tasks
        .iter()
        .flat_map(|(key, ids)| ids.iter().map(move |id| (key, id)))
        .filter(|(_, id)| !matches!(stored.views.get(*id), Some(Some(_))))
        .map(|(key, id)| format!("{key} acknowledged as {id}, which does not exist"))
        .collect();
    Check {
        name: "acked_task_missing",
        offenders,
    }
}

fn key_made_two_tasks(records: &Records, stored: &Stored) -> Check {
    let mut offenders = Vec::new();
    for (key, ids) in &records.tasks {
        let distinct: BTreeSet<&String> = ids.iter().collect();
        if distinct.len() > 1 {
            offenders.push(format!("{key} acknowledged as {distinct:?}"));
        }
    }
    let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, task) in &stored.listed {
        if let Some(key) = task["metadata"]["chaos_key"].as_str() {
            by_key.entry(key).or_default().push(id);
        }
    }
    for (key, ids) in by_key {
        if ids.len() > 1 {
            offenders.push(format!("{key} made the tasks {ids:?}"));
        }
    }
    Check {
        name: "key_made_two_tasks",
        offenders,
    }
}

/// An acknowledged result decides its attempt: the attempt's outcome is
/// its verdict and its last Final is that result. Only `failed` is retried,
/// so that attempt is the task's last and the task's result is it too.
fn acked_result_not_deciding(records: &Records, stored: &Stored) -> Check {
    let mut offenders = Vec::new();
    let mut acked: BTreeMap<(&str, u64), &Value> = BTreeMap::new();
    for result in &records.results {
        let (task, attempt) = (result.task.as_str(), result.attempt);
        let expected = json!({"value": result.value, "ok": result.ok});
        let verdict = if result.ok { "pass" } else { "blocked" };
        if let Some(first) = acked.insert((task, attempt), &result.value)
            && *first != result.value
        {
            offenders.push(format!(
                "{task}/{attempt}: two results acknowledged: {first} and {}",
                result.value
            ));
        }
        let Some(Some(view)) = stored.views.get(task) else {
            offenders.push(format!("{task}/{attempt}: task missing"));
            continue;
        };
        let record = view["attempts"]
            .as_array()
            .and_then(|all| all.iter().find(|a| a["attempt"] == attempt));
        let outcome = record.map_or(Value::Null, |a| a["outcome"].clone());
        // The attempt's Finals in seq order: the last one decides.
        let finals: Vec<Value> = stored
            .outputs
            .get(task)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter(|r| r["attempt"] == attempt && r["event"]["type"] == "final")
            .map(|r| json!({"value": r["event"]["content"]["value"], "ok": r["event"]["ok"]}))
            .collect();
        let mut wrong = Vec::new();
        if outcome != verdict {
            wrong.push(format!("attempt outcome {outcome}"));
        }
        if finals.last() != Some(&expected) {
            let stored = if finals.contains(&expected) {
                "stored, not last"
            } else {
                "not stored"
            };
            wrong.push(format!(
                "its Final is {stored}; the attempt's Finals: {}",
                json!(finals)
            ));
        }
        if view["attempt"] != attempt || view["status"] != verdict || view["result"] != expected {
            wrong.push(format!(
                "task at attempt {} is {} with {}",
                view["attempt"], view["status"], view["result"]
            ));
        }
        if !wrong.is_empty() {
            offenders.push(format!(
                "{task}/{attempt} acknowledged {expected}: {}",
                wrong.join("; ")
            ));
        }
    }
    Check {
        name: "acked_result_not_deciding",
        offenders,
    }
}

fn stuck_non_terminal(stored: &Stored) -> Check {
    let offenders = stored
        .views
        .iter()
        .filter_map(|(id, view)| view.as_ref().map(|v| (id, v)))
        .filter(|(_, view)| !terminal(view))
        .map(|(id, view)| {
            format!(
                "{id} ({}) is {} at attempt {}",
                view["agent"], view["status"], view["attempt"]
            )
        })
        .collect();
    Check {
        name: "stuck_non_terminal",
        offenders,
    }
}

fn output_seq_gap(stored: &Stored) -> Check {
    let mut offenders = Vec::new();
    for (id, records) in &stored.outputs {
        let mut seqs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for record in records {
            let attempt = record["attempt"].as_u64().unwrap_or_default();
            seqs.entry(attempt)
                .or_default()
                .push(record["seq"].as_u64().unwrap_or_default());
        }
        for (attempt, got) in seqs {
            let want: Vec<u64> = (1..=got.len() as u64).collect();
            if got != want {
                offenders.push(format!("{id}/{attempt}: seqs {got:?}"));
            }
        }
    }
    Check {
        name: "output_seq_gap",
        offenders,
    }
}

/// Every task the MainAI's session owns that ended reached it as a
/// `task_done` with its final attempt and status, and no `task_done`
/// said anything else about a task.
fn task_done(records: &Records, stored: &Stored, sid: &str) -> [Check; 2] {
    let mut done: BTreeMap<&str, BTreeSet<(u64, &str)>> = BTreeMap::new();
    for (task, attempt, status) in &records.task_done {
        done.entry(task).or_default().insert((*attempt, status));
    }
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for (id, view) in stored
        .views
        .iter()
        .filter_map(|(id, v)| Some((id, v.as_ref()?)))
    {
        let ended = (
            view["attempt"].as_u64().unwrap_or_default(),
            view["status"].as_str().unwrap_or_default(),
        );
        let seen = done.get(id.as_str());
        if view["session"] == sid && terminal(view) && !seen.is_some_and(|s| s.contains(&ended)) {
            missing.push(format!("{id} ended {ended:?}; task_done seen: {seen:?}"));
        }
        if let Some(seen) = seen
            && seen.iter().any(|frame| *frame != ended)
        {
            wrong.push(format!("{id} ended {ended:?}; task_done seen: {seen:?}"));
        }
    }
    let unknown = done.keys().filter(|id| !stored.views.contains_key(**id));
    wrong.extend(unknown.map(|id| format!("task_done for {id}, which the daemon does not list")));
    [
        Check {
            name: "task_done_missing",
            offenders: missing,
        },
        Check {
            name: "task_done_wrong",
            offenders: wrong,
        },
    ]
}

fn acked_cancel_lost(records: &Records, stored: &Stored) -> Check {
    let offenders = records
        .cancels
        .iter()
        .filter_map(|id| match stored.views.get(id) {
            Some(Some(view)) if view["status"] == "cancelled" => None,
            Some(Some(view)) => Some(format!(
                "{id}: cancel acknowledged, task ended {} with {}",
                view["status"], view["result"]
            )),
            _ => Some(format!("{id}: cancel acknowledged, task missing")),
        })
        .collect();
    Check {
        name: "acked_cancel_lost",
        offenders,
    }
}

/// `PRAGMA integrity_check` of the stopped daemon's database.
pub(super) fn integrity(db: &Path) -> Check {
    let result = rusqlite::Connection::open(db).and_then(|conn| {
        let mut statement = conn.prepare("PRAGMA integrity_check")?;
        let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
        rows.collect::<Result<Vec<String>, _>>()
    });
    let offenders = match result {
        Ok(rows) if rows == ["ok"] => Vec::new(),
        Ok(rows) => rows,
        Err(e) => vec![format!("{}: {e}", db.display())],
    };
    Check {
        name: "integrity_check",
        offenders,
    }
}

/// Secrets in the daemon's log: a `wh-` handle, an `sws-` secret or a
/// `swc1.` token (only fingerprints may be logged).
pub(super) fn secrets_in_log(log: &str) -> Check {
    let mut offenders = Vec::new();
    for (prefix, hex) in [("wh-", 32), ("sws-", 64)] {
        for (at, _) in log.match_indices(prefix) {
            let rest = &log.as_bytes()[at + prefix.len()..];
            if rest.len() >= hex && rest[..hex].iter().all(u8::is_ascii_hexdigit) {
                offenders.push(line_at(log, at));
            }
        }
    }
    for (at, _) in log.match_indices("swc1.") {
        if looks_like_token(&log[at + "swc1.".len()..]) {
            offenders.push(line_at(log, at));
        }
    }
    Check {
        name: "secret_in_log",
        offenders,
    }
}

/// Whether `rest` (what follows `swc1.`) goes on like a token: a kid, a
/// dot, and a run of base64url long enough to be a payload.
fn looks_like_token(rest: &str) -> bool {
    let Some((kid, payload)) = rest.split_once('.') else {
        return false;
    };
    let base64url = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    (1..=16).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && payload.bytes().take(16).filter(base64url).count() == 16
}

fn line_at(log: &str, at: usize) -> String {
    let start = log[..at].rfind('\n').map_or(0, |n| n + 1);
    let end = log[at..].find('\n').map_or(log.len(), |n| at + n);
    log[start..end].chars().take(300).collect()
}
