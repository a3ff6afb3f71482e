//! Hostile clients: a worker handle that floods output past its attempt's
//! budget (`limits.max_output_bytes_per_attempt`). Every write past it is
//! refused with 413 `output_budget_exceeded` and leaves nothing behind: the
//! spilled blobs (files under `<state>/blobs` on SQLite, rows of the `blobs`
//! table on PostgreSQL) are exactly the ones stored outputs reference, and
//! grow by no more than the budget per attempt, whether the refused bodies
//! came one after another or at once, as partials or as results.

use std::path::Path;

use futures_util::future::join_all;
use serde_json::{Value, json};
use swarmd_postgres::PgDb;

use crate::daemon::{Swarmd, Ws, delegate_frame};
use crate::harness::parts;

const MIB: u64 = 1024 * 1024;
/// The attempt's budget: small, so that a flood is quick.
const BUDGET: u64 = 4 * MIB;
/// Bodies posted one after another to one attempt.
const SEQUENTIAL: usize = 24;
/// Bodies posted at once to another attempt.
const CONCURRENT: usize = 8;

const CONFIG: &str = "[limits]\nmax_output_bytes_per_attempt = 4194304\n";

/// Where a backend keeps its spilled blobs.
enum Blobs<'a> {
    Files(&'a Path),
    Table(PgDb),
}

impl Blobs<'_> {
    /// Bytes of every spilled blob.
    async fn bytes(&self) -> u64 {
        match self {
            Blobs::Files(dir) => tree_bytes(dir),
            Blobs::Table(db) => db
                .query_text("SELECT coalesce(sum(size), 0)::text FROM blobs")
                .await[0]
                .parse()
                .unwrap(),
        }
    }
}

/// Bytes of every file under `dir` (0 when it does not exist).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                tree_bytes(&entry.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A 1 MiB partial whose value no other body repeats (blobs are shared by
/// equal bytes, so a flood of equal bodies would store one).
fn partial(tag: &str) -> Value {
    let value = format!("{tag}:{}", "x".repeat(MIB as usize));
    json!({"type": "partial", "chunk": {"kind": "inline", "value": value}})
}

/// Whether a write was accepted; panics on anything but 200 or the 413 of
/// the budget.
async fn accepted(response: reqwest::Response) -> bool {
    let (status, body) = parts(response).await;
    match status {
        200 => true,
        413 => {
            assert_eq!(body["code"], "output_budget_exceeded", "{body}");
            false
        }
        _ => panic!("{status}: {body}"),
    }
}

/// A delegated task's id and worker handle.
async fn delegate(ws: &mut Ws, req: &str) -> (String, String) {
    ws.send(delegate_frame(req, "researcher", "flood")).await;
    let spawn = ws.recv_type("spawn").await;
    let field = |name: &str| spawn[name].as_str().unwrap().to_owned();
    (field("task_id"), field("worker_handle"))
}

/// Bytes of the blobs the task's stored outputs reference.
async fn referenced(sw: &Swarmd, task: &str) -> u64 {
    sw.output(task)
        .await
        .iter()
        .filter_map(|record| {
            let event = &record["event"];
            let content = event.get("chunk").or_else(|| event.get("content"))?;
            (content["kind"] == "file_ref").then(|| content["size"].as_u64().unwrap())
        })
        .sum()
}

/// Floods two attempts past the budget and checks what was kept.
async fn flood(sw: &Swarmd, blobs: &Blobs<'_>) {
    let state = sw.dir().join("state");
    let (blobs_before, state_before) = (blobs.bytes().await, tree_bytes(&state));
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&main_ai).await;
    let output = |task: &str, handle: &str, body: Value| {
        sw.post(&format!("/v1/worker/output?task_id={task}"), handle)
            .json(&body)
            .send()
    };

    // One after another: partials, then a result and a submit, each 1 MiB.
    let (one, handle) = delegate(&mut ws, "r-1").await;
    let mut kept = 0;
    for i in 0..SEQUENTIAL {
        kept += usize::from(
            accepted(
                output(&one, &handle, partial(&format!("s{i}")))
                    .await
                    .unwrap(),
            )
            .await,
        );
    }
    assert_eq!(kept, 3, "{kept} of {SEQUENTIAL} kept");
    let result = json!({"task_id": one, "value": partial("result")["chunk"]["value"]});
    let response = sw.post("/v1/worker/result", &handle).json(&result).send();
    assert!(
        !accepted(response.await.unwrap()).await,
        "a result past the budget"
    );
    let body = format!("submit:{}", "z".repeat(MIB as usize));
    let submit = sw.post(&format!("/v1/worker/submit?task_id={one}"), &handle);
    assert!(!accepted(submit.body(body).send().await.unwrap()).await);

    // At once, to a fresh attempt.
    let (two, handle) = delegate(&mut ws, "r-2").await;
    let racers = (0..CONCURRENT).map(|i| output(&two, &handle, partial(&format!("c{i}"))));
    let mut raced = 0;
    for response in join_all(racers).await {
        raced += usize::from(accepted(response.unwrap()).await);
    }
    assert_eq!(raced, 3, "{raced} of {CONCURRENT} kept");

    let refused = SEQUENTIAL + CONCURRENT + 2 - kept - raced;
    let posted = (SEQUENTIAL + CONCURRENT + 2) as u64 * MIB;
    let stored = referenced(sw, &one).await + referenced(sw, &two).await;
    let (blobs_after, state_after) = (blobs.bytes().await, tree_bytes(&state));
    eprintln!(
        "output_disk: posted {posted} B in {} bodies, {refused} refused; blobs {blobs_before} -> \
         {blobs_after} B ({stored} B referenced); state dir {state_before} -> {state_after} B",
        SEQUENTIAL + CONCURRENT + 2
    );
    assert!(stored <= 2 * BUDGET, "{stored} B stored for two attempts");
    assert_eq!(
        blobs_after - blobs_before,
        stored,
        "every blob left is one a stored output references"
    );
    // The database's own files (WAL, pages) hold the accepted rows only.
    assert!(
        state_after.saturating_sub(state_before) <= 2 * BUDGET + 4 * MIB,
        "state dir {state_before} -> {state_after} B"
    );
}

#[tokio::test]
async fn refused_output_leaves_no_blob_files_behind() {
    let sw = Swarmd::new(CONFIG).start().await;
    let dir = sw.dir().join("state/blobs");
    flood(&sw, &Blobs::Files(&dir)).await;
}

#[tokio::test]
async fn refused_output_leaves_no_blob_rows_behind_on_postgres() {
    let database = swarmd_postgres::testing::fresh_database().await;
    let sw = Swarmd::on_database(CONFIG, &database).start().await;
    let db = PgDb::open(database.options()).await.unwrap();
    flood(&sw, &Blobs::Table(db)).await;
}
