//! One idempotency key sent to two nodes at the same instant creates one
//! task: both answers name it, and the database holds one task per key.

use serde_json::json;

use super::{Cluster, QUICK, uuid_list};
use crate::daemon::Swarmd;
use crate::harness::parts;

/// Keys raced per run.
const KEYS: usize = 24;

async fn create_keyed(node: &Swarmd, key: &str) -> (u16, String) {
    let (status, body) = parts(
        node.post("/v1/tasks", &node.admin)
            .header("Idempotency-Key", key)
            .json(&json!({"agent": "quick", "prompt": key}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    (
        status,
        body["task_id"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_sent_to_two_nodes_at_once_creates_one_task() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut tasks = Vec::new();
    for round in 0..KEYS {
        let key = format!("race-{round}");
        let ((status_a, on_a), (status_b, on_b)) =
            tokio::join!(create_keyed(a, &key), create_keyed(b, &key));
        assert!(
            matches!((status_a, status_b), (200 | 201, 200 | 201)),
            "{key}: {status_a} {status_b}"
        );
        assert_eq!(on_a, on_b, "{key}: the nodes created two tasks");
        tasks.push(on_a);
    }
    for task in &tasks {
        assert_eq!(super::finished(a, task).await["status"], "pass");
    }
    let stored = cluster
        .db
        .query_i32("SELECT count(*)::int FROM tasks")
        .await;
    assert_eq!(stored, [i32::try_from(KEYS).unwrap()]);
    let keyed = cluster
        .db
        .query_i32(&format!(
            "SELECT count(*)::int FROM idem_keys WHERE task IN ({})",
            uuid_list(&tasks)
        ))
        .await;
    assert_eq!(keyed, [i32::try_from(KEYS).unwrap()]);
}
