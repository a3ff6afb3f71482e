//! A node paused (SIGSTOP) past its lease, the stand-in for a network
//! partition: a survivor takes its task over and finishes it; when the
//! paused node continues, a late write of its worker is refused with
//! `410 node_fenced` and changes nothing; the node exits; the task is
//! decided once.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::{Cluster, LEASE, create, events_after, finished, uuid};
use crate::harness::{PATIENCE, parts};

/// Its first attempt leaves its worker handle in the shared directory and
/// sleeps; the next passes.
const HOLD: &str = r#"
[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", """
if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '%s' "$SWARM_WORKER_HANDLE" > @DIR@/handle.tmp && mv @DIR@/handle.tmp @DIR@/handle
  /bin/sleep 30
fi
printf '{"type":"final","content":{"kind":"inline","value":"taken over"},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_is_fenced_and_its_late_writes_change_nothing() {
    let mut cluster = Cluster::start(2, HOLD).await;
    let paused = cluster.node_id(0);
    let survivor = cluster.node_id(1);
    let task = create(
        &cluster.nodes[0],
        json!({"agent": "hold", "prompt": "p", "policy": {"max_attempts": 2}}),
    )
    .await;
    let handle_file = cluster.shared().join("handle");
    let started = std::time::Instant::now();
    while !handle_file.exists() {
        assert!(
            started.elapsed() < PATIENCE,
            "the first attempt did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let handle = std::fs::read_to_string(&handle_file).unwrap();

    let pid = Pid::from_raw(cluster.nodes[0].pid());
    kill(pid, Signal::SIGSTOP).unwrap();
    let took = cluster.until_none_owned_by(&paused).await;
    assert!(took <= 2 * LEASE, "took {took:?}");
    assert_eq!(cluster.owner(&task).await, survivor);
    let b = &cluster.nodes[1];
    let view = finished(b, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", b.log());
    assert_eq!(view["result"]["value"], "taken over", "{view}");
    let before = events_after(b, 0).await;

    // The paused node's worker posts its Final to it; the node answers
    // once it runs again, and refuses.
    let a = &cluster.nodes[0];
    let late = a
        .http
        .post(a.url(&format!("/v1/worker/result?task_id={task}")))
        .bearer_auth(&handle)
        .json(&json!({"value": "late", "ok": true}))
        .timeout(PATIENCE)
        .send();
    let late = tokio::spawn(late);
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill(pid, Signal::SIGCONT).unwrap();
    let (status, body) = parts(late.await.unwrap().unwrap()).await;
    assert_eq!(status, 410, "{body}\n{}", a.log());
    assert_eq!(body["code"], "node_fenced", "{body}");

    // The node stops on its own, non-zero.
    let exit = cluster.nodes[0].exited().await;
    assert_eq!(exit.code(), Some(75), "{}", cluster.nodes[0].log());
    assert!(
        cluster.nodes[0].log().contains("this node is fenced"),
        "{}",
        cluster.nodes[0].log()
    );

    // Nothing changed: the result, the attempts, one decision, no stored
    // Final of the first attempt; the log only grew by nothing of the task.
    let b = &cluster.nodes[1];
    let after = finished(b, &task).await;
    assert_eq!(after["result"]["value"], "taken over", "{after}");
    assert_eq!(after["attempt"], 2, "{after}");
    let finals = cluster
        .db
        .query_i32(&format!(
            "SELECT count(*)::int FROM outputs WHERE task = '{}' AND attempt = 1",
            uuid(&task)
        ))
        .await;
    assert_eq!(finals, [0]);
    let attempts = cluster
        .db
        .query_i32(&format!(
            "SELECT count(*)::int FROM attempts WHERE task = '{}'",
            uuid(&task)
        ))
        .await;
    assert_eq!(attempts, [2]);
    let log = events_after(b, 0).await;
    let decided = log
        .iter()
        .filter(|e| e["event"]["kind"] == "task_finished" && e["event"]["task_id"] == task.as_str())
        .count();
    assert_eq!(decided, 1);
    let of_task = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["event"]["task_id"] == task.as_str())
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of_task(&log), of_task(&before));
}
