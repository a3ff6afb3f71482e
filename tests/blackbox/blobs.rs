//! Spilled blobs across a restart (docs/tasks.md, Output and retention): a blob a stored output
//! references survives; one that no record references (its append cut off by
//! a crash) is swept by the retention job at the next start; a stored one
//! reads back through `GET /v1/blobs/{sha256}`.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::daemon::{Swarmd, eventually};

/// `big` prints 200 bytes: its Final spills to a blob (here and on
/// PostgreSQL, `postgres.rs`).
pub(crate) const AGENTS: &str = r#"
[limits]
inline_max_bytes = 64

[agents.big]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '%0200d' 0"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

fn age(path: &Path) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
}

#[tokio::test]
async fn a_restart_sweeps_orphaned_blobs_and_keeps_referenced_ones() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let (status, done) = sw
        .create(json!({"agent": "big", "prompt": "p", "wait_secs": 10}))
        .await;
    assert_eq!((status, &done["status"]), (201, &json!("pass")), "{done}");
    let task = done["task_id"].as_str().unwrap().to_owned();
    let records = sw.output(&task).await;
    let content = &records.last().unwrap()["event"]["content"];
    assert_eq!(content["kind"], "file_ref", "{content}");
    let blobs = sw.dir().join("state/blobs");
    let kept = blobs.join(content["sha256"].as_str().unwrap());
    assert!(kept.exists());
    let orphan = blobs.join("ab".repeat(32));
    std::fs::write(&orphan, b"\"left by a crash\"").unwrap();
    age(&kept);
    age(&orphan);

    sw.kill9().await;
    sw.restart().await;

    eventually("the orphaned blob to be swept", || !orphan.exists()).await;
    assert!(kept.exists(), "a referenced blob is never swept");
    let after = sw.output(&task).await;
    assert_eq!(after.last().unwrap()["event"]["content"], *content);
    // The value reads back by its name; the swept one is gone.
    let read = |name: String| sw.get(&format!("/v1/blobs/{name}"), &sw.admin).send();
    let kept_value = read(content["sha256"].as_str().unwrap().to_owned())
        .await
        .unwrap();
    assert_eq!(kept_value.status(), 200);
    let value: serde_json::Value = kept_value.json().await.unwrap();
    assert_eq!(value["raw"], "0".repeat(200));
    assert_eq!(read("ab".repeat(32)).await.unwrap().status(), 404);
    // The sweep logs once it has deleted what it swept.
    eventually(
        "the log to say the sweep (swept unreferenced blobs)",
        || sw.log().contains("swept unreferenced blobs"),
    )
    .await;
}
