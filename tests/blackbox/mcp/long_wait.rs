//! The issue's 60 s wait: the Python SDK waits 60 s for a task that runs
//! longer, at the default `mcp.progress_ms` (5 s), and receives a progress
//! notification with a message about every 5 s, then the answer at the
//! timeout with the task still running. It costs a minute of wall time
//! and little CPU; libtest runs it beside the others.

use std::time::Duration;

use serde_json::json;

use super::{LEGACY, MODERN, Via, run};
use crate::harness::Daemon;

/// `long` runs two minutes; `[mcp]` keeps its defaults.
const LONG: &str = r#"
[agents.long]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 120"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

async fn a_minute_of_waiting_is_a_minute_of_progress(via: Via, mode: &str) {
    let daemon = Daemon::start_with(LONG).await;
    let started = tokio::time::Instant::now();
    let seen = run(&daemon, via, mode, "long_wait", &daemon.admin, &[]).await;
    assert!(started.elapsed() >= Duration::from_secs(60), "{seen}");

    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{waited}");
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(false), &json!(0)),
        "{waited}"
    );
    assert_eq!(waited["tasks"][0]["status"], "running", "{waited}");
    let elapsed = seen["elapsed"].as_f64().unwrap();
    assert!((59.5..75.0).contains(&elapsed), "{elapsed}");

    let progress = seen["progress"].as_array().unwrap();
    // One every 5 s: 11 or 12 in a minute, give or take a late one.
    assert!((10..=13).contains(&progress.len()), "{progress:?}");
    let mut last = (0.0, 0.0);
    for note in progress {
        let message = note["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("0/1 done, "), "{note}");
        assert!(message.ends_with("s elapsed"), "{note}");
        assert_eq!(note["total"], 1.0, "{note}");
        let (at, value) = (
            note["at"].as_f64().unwrap(),
            note["progress"].as_f64().unwrap(),
        );
        assert!(value > last.1 && value < 1.0, "{progress:?}");
        assert!(at - last.0 < 10.0, "a 10 s silence: {progress:?}");
        last = (at, value);
    }
    assert!(
        elapsed - last.0 < 10.0,
        "silent before the answer: {progress:?}"
    );
}

/// Both transports at once, in one test: a minute of one libtest thread
/// (they default to one per CPU) instead of two.
#[tokio::test]
async fn a_60s_wait_gets_progress_every_5s_over_http_and_stdio() {
    tokio::join!(
        a_minute_of_waiting_is_a_minute_of_progress(Via::Http, MODERN),
        a_minute_of_waiting_is_a_minute_of_progress(Via::Stdio, LEGACY),
    );
}
