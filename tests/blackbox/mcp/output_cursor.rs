//! The `output` tool pages a task's records the way the HTTP route does: a
//! seq is one attempt's, so `after_seq` needs `attempt`, and paging every
//! attempt continues from the page's `next` (`<attempt>:<seq>`) as
//! `after`. Through the official Python SDK.

use serde_json::{Value, json};

use super::{EXTRA, Via, call, tool_error};
use crate::harness::Daemon;

/// Three records a run: two progress notes and its Final.
const CHATTY: &str = r#"
[agents.chatty]
kind = "process"
program = "/bin/sh"
args = ["-c", """printf '{"type":"progress","stage":"a","note":"one"}\n{"type":"progress","stage":"b","note":"two"}\n{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}\n'"""]
stdin = "none"
stream = "ndjson"
"#;

#[tokio::test]
async fn output_pages_continue_from_next_and_a_bare_seq_is_refused() {
    let daemon = Daemon::start_with(&format!("{EXTRA}{CHATTY}")).await;
    let task = daemon
        .spawn(json!({"agent": "chatty", "prompt": "talk"}))
        .await;
    assert_eq!(daemon.finished(&task).await["status"], "pass");
    let admin = daemon.admin.clone();
    let page = |args: Value| call(&daemon, Via::Http, &admin, "output", args);

    let first = page(json!({"task_id": task, "limit": 1})).await;
    assert_eq!(first["is_error"], false, "{first}");
    let next = first["structured"]["next"]
        .as_str()
        .expect("a cursor")
        .to_owned();
    assert!(next.starts_with("1:"), "{first}");
    assert_eq!(first["structured"]["more"], true, "{first}");
    let (_, seq) = next.split_once(':').unwrap();
    let seq: u64 = seq.parse().unwrap();

    let second = page(json!({"task_id": task, "limit": 1, "after": next})).await;
    assert_eq!(second["is_error"], false, "{second}");
    let records = second["structured"]["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{first} then {second}");
    assert_eq!(records[0]["seq"], seq + 1, "{second}");

    // The same page through `attempt` and `after_seq`.
    let named = page(json!({"task_id": task, "limit": 1, "attempt": 1, "after_seq": seq})).await;
    assert_eq!(
        named["structured"]["records"], second["structured"]["records"],
        "{named}"
    );

    // A bare seq names no attempt.
    let bare = page(json!({"task_id": task, "after_seq": seq})).await;
    let error = tool_error(&bare);
    assert_eq!(error["code"], "bad_request", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("attempt"),
        "{error}"
    );
}
