//! Flow runs on a cluster: a wait of a run node A drives is answered
//! through node B (forwarded to A, with the wait's own token), and a run
//! whose node is killed with SIGKILL is taken over by the survivor, which
//! continues it from its journal — the finished step is not run again, the
//! interrupted one is retried as the same task — to its end.

use serde_json::{Value, json};

use super::{Cluster, LEASE, finished};
use crate::harness::PATIENCE;

/// `hold` waits for `@DIR@/release`, then passes with its prompt; `note`
/// passes with its prompt at once.
const AGENTS: &str = r#"
[defaults]
max_attempts = 2

[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", "i=0; while [ ! -e \"$DIR/release\" ] && [ \"$i\" -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; cat"]
env = { DIR = "@DIR@", PATH = "/usr/bin:/bin" }

[agents.note]
kind = "process"
program = "/bin/cat"
"#;

fn step(agent: &str, text: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": {"op": "template", "text": text},
           "out": {"op": "path", "at": out}})
}

fn wait(name: &str, out: &str) -> Value {
    json!({"kind": "wait", "name": name, "out": {"op": "path", "at": out}})
}

async fn start(node: &crate::daemon::Swarmd, flow: Value) -> String {
    let response = node
        .post("/v1/runs", &node.admin)
        .json(&json!({"flow": flow}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

async fn view(node: &crate::daemon::Swarmd, id: &str) -> Value {
    let (status, body) = crate::harness::parts(
        node.get(&format!("/v1/runs/{id}"), &node.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn until(
    node: &crate::daemon::Swarmd,
    id: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let started = std::time::Instant::now();
    loop {
        let body = view(node, id).await;
        if check(&body) {
            return body;
        }
        assert!(started.elapsed() < PATIENCE, "{what}: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn tries(view: &Value, key: &str) -> Vec<String> {
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["key"] == key)
        .map(|n| {
            n["tries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["task_id"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_answered_through_another_node_and_a_killed_nodes_run_goes_on() {
    let mut cluster = Cluster::start(2, AGENTS).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);

    // A's run waits; its token, sent to B, is forwarded to A.
    let asked = start(
        a,
        json!({"name": "ask", "body": {"kind": "seq", "children": [
        wait("ok", "$.ok"), step("note", "got {{ ok }}", "$.r")]}}),
    )
    .await;
    let waiting = until(a, &asked, "the wait opens", |v| v["status"] == "waiting").await;
    let token = waiting["waits"][0]["token"].as_str().unwrap().to_owned();
    let response = b
        .post(&format!("/v1/runs/{asked}/waits/ok"), &token)
        .json(&json!({"value": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let done = until(b, &asked, "the run ends", |v| v["status"] == "passed").await;
    assert_eq!(done["result"]["r"]["raw"], "got yes", "{done}");

    // A's run holds in its second step when A is killed.
    let long = start(
        a,
        json!({"name": "long", "body": {"kind": "seq", "children": [
        step("note", "first", "$.a"), step("hold", "second", "$.b"),
        step("note", "third {{ b.raw }}", "$.c")]}}),
    )
    .await;
    let held = until(a, &long, "the held step starts", |v| {
        !tries(v, "/body/children/1").is_empty()
    })
    .await;
    let first = tries(&held, "/body/children/0");
    let second = tries(&held, "/body/children/1");
    cluster.nodes[0].kill9().await;
    std::fs::write(cluster.shared().join("release"), "").unwrap();
    let b = &cluster.nodes[1];
    let started = std::time::Instant::now();
    let done = until(b, &long, "the survivor finishes the run", |v| {
        v["status"] == "passed"
    })
    .await;
    assert!(
        started.elapsed() < PATIENCE,
        "took {:?} (lease {LEASE:?})",
        started.elapsed()
    );
    assert_eq!(done["result"]["c"]["raw"], "third second", "{done}");
    assert_eq!(tries(&done, "/body/children/0"), first, "{done}");
    assert_eq!(tries(&done, "/body/children/1"), second, "{done}");
    let task = finished(b, &second[0]).await;
    assert_eq!(task["status"], "pass", "{task}");
}
