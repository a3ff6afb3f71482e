//! The outcome an attempt reports through its layers (the audit trail here)
//! is the outcome the task records, however the attempt ended.

use serde_json::{Value, json};

use crate::harness::{Daemon, parts};

/// The `completed` audit record of the task's first attempt.
async fn completed_record(daemon: &Daemon, task: &str) -> Value {
    let path = format!("/v1/audit?task_id={task}");
    let (status, page) = parts(daemon.get(&path, &daemon.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|record| record["action"] == "completed")
        .cloned()
        .unwrap_or_else(|| panic!("no completed record: {page}"))
}

#[tokio::test]
async fn the_audit_trail_reports_the_outcome_the_task_records() {
    let daemon = Daemon::start().await;
    let one_try = |timeout: u64| json!({"max_attempts": 1, "attempt_timeout_secs": timeout});

    // `hold` never exits by itself: its lease runs out, the engine stops it.
    let held = daemon
        .spawn(json!({"agent": "hold", "prompt": "p", "policy": one_try(1)}))
        .await;
    // `cat` prints its prompt and exits: a Final decides.
    let printed = daemon
        .spawn(json!({"agent": "cat", "prompt": "p", "policy": one_try(60)}))
        .await;

    for (task, status) in [(&held, "failed"), (&printed, "pass")] {
        daemon.finished(task).await;
        let (code, view) = parts(
            daemon
                .get(&format!("/v1/tasks/{task}"), &daemon.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(code, 200, "{view}");
        assert_eq!(view["status"], status, "{view}");
        let attempt = &view["attempts"][0];
        let detail = &completed_record(&daemon, task).await["detail"];
        assert_eq!(
            (&detail["outcome"], &detail["reason"]),
            (&attempt["outcome"], &attempt["reason"]),
            "audit {detail} vs attempt {attempt}"
        );
    }
}
