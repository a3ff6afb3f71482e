//! Any node serves any request about a live task: a worker of a task node
//! A holds fetches its prompt, streams output, creates a sub-task and
//! submits through node B, and a SubAgent of a task A delegated to its
//! MainAI does the same with its capability token; a cancel sent to B is forwarded to A, and a
//! wait at B waits on A's task without being forwarded; a request
//! forwarded once is never forwarded again; while the owner is dead B
//! answers `503 owner_unavailable` (a wait goes on), and once B has taken
//! the task over it serves it itself.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Cluster, QUICK, create, finished};
use crate::daemon::{Swarmd, delegate_frame};
use crate::harness::{PATIENCE, expect_error, parts};

/// The hop header a forwarded request carries.
const FORWARDED_BY: &str = "x-swarmd-forwarded-by";
/// The header that names the node that served a forwarded request.
const FORWARDED_TO: &str = "x-swarmd-forwarded-to";

/// A worker that talks only to the peer whose URL is in `@DIR@/peer`, with
/// its own handle: prompt, heartbeat, output, a sub-task, then its result.
const VIA_PEER: &str = r#"
[agents.via_peer]
kind = "process"
program = "/bin/sh"
allow_subtasks = true
args = ["-c", """
peer=$(cat @DIR@/peer)
printf '%s' "$SWARM_WORKER_HANDLE" > @DIR@/handle
auth="Authorization: Bearer $SWARM_WORKER_HANDLE"
json="Content-Type: application/json"
curl -sSf -H "$auth" "$peer/v1/worker/prompt" > @DIR@/prompt.json || exit 3
curl -sSf -X POST -H "$auth" "$peer/v1/worker/heartbeat" > /dev/null || exit 4
curl -sSf -H "$auth" -H "$json" -d '{"type":"progress","stage":"via-peer"}' \
  "$peer/v1/worker/output" > /dev/null || exit 5
curl -sSf -H "$auth" -H "$json" -d '{"agent":"quick","prompt":"child"}' \
  "$peer/v1/tasks" > @DIR@/child.json || exit 6
curl -sSf -D @DIR@/submit.headers -H "$auth" -H "$json" -d '{"answer":42}' \
  "$peer/v1/worker/submit" > /dev/null || exit 7
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
"#;

/// Delegated to the session holding `main-ai`.
const CODER: &str = r#"
[agents.coder]
kind = "operator"
operator_role = "main-ai"
"#;

/// Runs until cancelled, at every attempt.
const ENDLESS: &str = r#"
[agents.endless]
kind = "process"
program = "/bin/sleep"
args = ["60"]
stdin = "none"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_talking_to_another_node_completes_its_task() {
    let cluster = Cluster::start(2, &format!("{QUICK}{VIA_PEER}")).await;
    let owner = cluster.node_id(0);
    let shared = cluster.shared();
    std::fs::write(shared.join("peer"), cluster.nodes[1].url("")).unwrap();

    let task = create(
        &cluster.nodes[0],
        json!({"agent": "via_peer", "prompt": "ask the other node"}),
    )
    .await;
    let view = finished(&cluster.nodes[1], &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", cluster.nodes[0].log());
    assert_eq!(view["result"]["value"], json!({"answer": 42}), "{view}");

    // Each call went through node B to node A, which holds the task.
    let prompt: Value =
        serde_json::from_str(&std::fs::read_to_string(shared.join("prompt.json")).unwrap())
            .unwrap();
    assert_eq!(prompt["prompt"], "ask the other node", "{prompt}");
    assert_eq!(prompt["task_id"], task.as_str(), "{prompt}");
    let headers = std::fs::read_to_string(shared.join("submit.headers")).unwrap();
    assert!(
        headers
            .to_ascii_lowercase()
            .contains(&format!("{FORWARDED_TO}: {owner}")),
        "{headers}"
    );
    let stages: Vec<Value> = cluster.nodes[1]
        .output(&task)
        .await
        .iter()
        .map(|r| r["event"]["stage"].clone())
        .collect();
    assert!(stages.contains(&json!("via-peer")), "{stages:?}");

    // The sub-task is the worker's task's child, created on its node.
    let child: Value =
        serde_json::from_str(&std::fs::read_to_string(shared.join("child.json")).unwrap()).unwrap();
    let child = child["task_id"].as_str().unwrap().to_owned();
    let child_view = finished(&cluster.nodes[1], &child).await;
    assert_eq!(child_view["status"], "pass", "{child_view}");
    assert_eq!(child_view["parent"], task.as_str(), "{child_view}");
    assert_eq!(cluster.owner(&child).await, owner);

    // Neither node logged the handle it forwarded or served.
    let handle = std::fs::read_to_string(shared.join("handle")).unwrap();
    assert!(handle.starts_with("wh-"));
    for node in &cluster.nodes {
        assert!(!node.log().contains(&handle));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_completes_a_delegated_task_through_another_node_with_its_token() {
    let cluster = Cluster::start(2, CODER).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let owner = cluster.node_id(0);
    let login = a.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = a.connect(&login).await;
    ws.send(delegate_frame("r-1", "coder", "fix it")).await;
    let accepted = ws.recv().await;
    assert_eq!(accepted["type"], "task_accepted", "{accepted}");
    let task = accepted["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    let token = spawn["capability_token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("swc1."), "{spawn}");

    // The SubAgent talks to node B only, with its token.
    let response = b.get("/v1/worker/prompt", &token).send().await.unwrap();
    assert_eq!(response.headers()[FORWARDED_TO], owner.as_str());
    let (status, prompt) = parts(response).await;
    assert_eq!(
        (status, &prompt["prompt"]),
        (200, &json!("fix it")),
        "{prompt}"
    );
    let response = b
        .post("/v1/worker/output", &token)
        .json(&json!({"type": "progress", "stage": "editing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = b
        .post("/v1/worker/result", &token)
        .json(&json!({"value": "fixed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[FORWARDED_TO], owner.as_str());
    let (status, ack) = parts(response).await;
    assert_eq!(
        (status, ack),
        (
            200,
            json!({"task_id": task, "attempt": 1, "accepted": true})
        )
    );

    let done = ws.done(&task).await;
    assert_eq!(
        (&done["status"], &done["value"]),
        (&json!("pass"), &json!("fixed"))
    );
    let stages: Vec<Value> = b
        .output(&task)
        .await
        .iter()
        .map(|r| r["event"]["stage"].clone())
        .collect();
    assert!(stages.contains(&json!("editing")), "{stages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_to_another_node_stops_the_owners_task_while_it_waits_there() {
    let cluster = Cluster::start(2, ENDLESS).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let owner = cluster.node_id(0);
    let task = create(a, json!({"agent": "endless", "prompt": "p"})).await;
    running(a, &task).await;

    // A wait at B waits on A's live task, on B's own event feed.
    let waiting = {
        let request = b.get(&format!("/v1/tasks/{task}/wait?timeout_secs=60"), &b.admin);
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the wait answered before the cancel"
    );

    let response = b
        .post(&format!("/v1/tasks/{task}/cancel"), &b.admin)
        .json(&json!({"reason": "from node B"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[FORWARDED_TO], owner.as_str());
    let (status, body) = parts(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");

    let waited = tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(waited.headers().get(FORWARDED_TO).is_none());
    let (status, view) = parts(waited).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "cancelled", "{view}");
    assert_eq!(finished(a, &task).await["status"], "cancelled");

    // An id that names no task is a bad id wherever it lands, not a path
    // the node would not forward.
    let (status, body) = parts(
        b.post("/v1/tasks/not-a-task/cancel", &b.admin)
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (400, &json!("bad_request")),
        "{body}"
    );
    assert!(
        !body["error"]
            .as_str()
            .unwrap()
            .contains("must name its route"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_never_forwarded_again() {
    let cluster = Cluster::start(2, ENDLESS).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let task = create(a, json!({"agent": "endless", "prompt": "p"})).await;
    running(a, &task).await;
    let cancel = format!("/v1/tasks/{task}/cancel");

    // Marked as forwarded, B does not hold the task and does not pass it on.
    let response = b
        .post(&cancel, &b.admin)
        .header(FORWARDED_BY, cluster.node_id(0))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.headers().get(FORWARDED_TO).is_none());
    expect_error(response, 503, "owner_unavailable").await;
    assert_eq!(a.task(&task).await["status"], "running");

    // Unmarked, B forwards it; A serves a marked one it holds.
    let response = b.post(&cancel, &b.admin).send().await.unwrap();
    assert_eq!(
        response.headers()[FORWARDED_TO],
        cluster.node_id(0).as_str()
    );
    assert_eq!(parts(response).await.1["status"], "cancelled");
    let other = create(a, json!({"agent": "endless", "prompt": "q"})).await;
    running(a, &other).await;
    let response = a
        .post(&format!("/v1/tasks/{other}/cancel"), &a.admin)
        .header(FORWARDED_BY, cluster.node_id(1))
        .send()
        .await
        .unwrap();
    assert!(response.headers().get(FORWARDED_TO).is_none());
    assert_eq!(parts(response).await.1["status"], "cancelled");

    // B counted one of each; A, which forwarded nothing, none.
    let metrics = b.metrics().await;
    for outcome in ["forwarded", "unavailable"] {
        let line = format!("swarmd_cluster_forwarded_requests_total{{outcome=\"{outcome}\"}} 1");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    assert!(
        !a.metrics()
            .await
            .contains("swarmd_cluster_forwarded_requests_total{")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_503_until_the_survivor_serves_its_task_itself() {
    let mut cluster = Cluster::start(2, ENDLESS).await;
    let dead = cluster.node_id(0);
    let task = create(
        &cluster.nodes[0],
        json!({"agent": "endless", "prompt": "p", "policy": {"max_attempts": 2}}),
    )
    .await;
    running(&cluster.nodes[0], &task).await;
    let cancel = format!("/v1/tasks/{task}/cancel");
    let waiting = {
        let b = &cluster.nodes[1];
        let request = b.get(&format!("/v1/tasks/{task}/wait?timeout_secs=60"), &b.admin);
        tokio::spawn(async move { request.send().await.unwrap() })
    };

    cluster.nodes[0].kill9().await;
    let b = &cluster.nodes[1];
    let response = b.post(&cancel, &b.admin).send().await.unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    expect_error(response, 503, "owner_unavailable").await;

    // B owns the task; until it has loaded it B still answers 503, then it
    // holds the task (its attempt interrupted and retried) and cancels it
    // itself.
    cluster.until_none_owned_by(&dead).await;
    let started = Instant::now();
    let cancelled = loop {
        let response = b.post(&cancel, &b.admin).send().await.unwrap();
        assert!(response.headers().get(FORWARDED_TO).is_none());
        let (status, body) = parts(response).await;
        match status {
            200 => break body,
            503 => assert_eq!(body["code"], "owner_unavailable", "{body}"),
            _ => panic!("{status} {body}"),
        }
        assert!(started.elapsed() < PATIENCE, "{body}\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // The wait begun at B before the kill saw it through.
    let waited = tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap();
    let (status, view) = parts(waited).await;
    assert_eq!(
        (status, &view["status"]),
        (200, &json!("cancelled")),
        "{view}"
    );
}

/// Waits until `task`'s first attempt runs on `node`.
async fn running(node: &Swarmd, task: &str) {
    let started = Instant::now();
    loop {
        if node.task(task).await["status"] == "running" {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "{task} never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
