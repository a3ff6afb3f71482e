//! Large outputs cost their blob and little else (docs/tasks.md, Output and
//! retention): a partial over `limits.inline_max_bytes` is spilled before its
//! record or its `output` event is encoded, so the database holds only the
//! reference, and each large partial meets the attempt's output budget on
//! its own.

use serde_json::{Value, json};

use crate::daemon::Swarmd;

/// `spill-lua` emits `prompt` partials of 1 MiB each (distinct values), then
/// returns `"done"`; the attempt may store 8 MiB.
const AGENTS: &str = r#"
[limits]
max_output_bytes_per_attempt = 8388608

[agents.spill-lua]
kind = "lua"
script = "@DIR@/spill.lua"
"#;

const SCRIPT: &str = r#"
local big = ("x"):rep(1048576)
for i = 1, tonumber(prompt) do
  emit_partial(big .. i)
end
return "done"
"#;

async fn daemon() -> Swarmd {
    let sw = Swarmd::new(AGENTS);
    std::fs::write(sw.dir().join("spill.lua"), SCRIPT).unwrap();
    sw.start().await
}

/// The bytes of the database and its WAL.
fn database_bytes(sw: &Swarmd) -> u64 {
    ["swarmd.db", "swarmd.db-wal"]
        .iter()
        .map(|name| {
            std::fs::metadata(sw.dir().join("state").join(name)).map_or(0, |meta| meta.len())
        })
        .sum()
}

/// The longest stored output row and event row, read from the database.
fn longest_rows(sw: &Swarmd) -> (i64, i64) {
    let db = rusqlite::Connection::open_with_flags(
        sw.dir().join("state/swarmd.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let longest = |sql: &str| db.query_row(sql, [], |row| row.get::<_, i64>(0)).unwrap();
    (
        longest("SELECT coalesce(max(length(event)), 0) FROM outputs"),
        longest("SELECT coalesce(max(length(body)), 0) FROM events"),
    )
}

fn partials(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["event"]["type"] == "partial")
        .map(|r| &r["event"]["chunk"])
        .collect()
}

#[tokio::test]
async fn large_output_partials_cost_their_blobs_not_database_rows() {
    let sw = daemon().await;
    let before = database_bytes(&sw);
    let (status, done) = sw
        .create(json!({"agent": "spill-lua", "prompt": "5", "wait_secs": 30}))
        .await;
    assert_eq!((status, &done["status"]), (201, &json!("pass")), "{done}");
    let task = done["task_id"].as_str().unwrap();

    let records = sw.output(task).await;
    let chunks = partials(&records);
    assert_eq!(chunks.len(), 5);
    for chunk in &chunks {
        assert_eq!(chunk["kind"], "file_ref", "{chunk}");
        let blob = sw
            .dir()
            .join("state/blobs")
            .join(chunk["sha256"].as_str().unwrap());
        assert_eq!(
            std::fs::metadata(blob).unwrap().len(),
            chunk["size"].as_u64().unwrap()
        );
    }
    // Five values of 1 MiB: stored inline they would take 5 MiB of rows (and
    // as much again in events).
    let grown = database_bytes(&sw).saturating_sub(before);
    assert!(grown < 1 << 20, "the database grew by {grown} bytes");
    let (output_row, event_row) = longest_rows(&sw);
    assert!(output_row < 1024, "an output row of {output_row} bytes");
    assert!(event_row < 1024, "an event row of {event_row} bytes");
}

#[tokio::test]
async fn large_output_partials_meet_the_budget_one_by_one() {
    let sw = daemon().await;
    let (status, created) = sw
        .create(json!({"agent": "spill-lua", "prompt": "20"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap();
    let view = sw.finished(task).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert!(
        view["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("output budget"),
        "{view}"
    );
    // Each partial takes 1 MiB and a few hundred bytes: seven fit in 8 MiB,
    // whatever the worker had emitted while the first were stored.
    let records = sw.output(task).await;
    assert_eq!(partials(&records).len(), 7, "{records:?}");
    let (output_row, event_row) = longest_rows(&sw);
    assert!(
        output_row < 1024 && event_row < 1024,
        "{output_row} {event_row}"
    );
}
