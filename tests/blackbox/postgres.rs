//! The daemon on `store.backend = "postgres"` (a fresh database per test
//! on the cluster `scripts/pg-env.sh` runs): process and delegated tasks
//! complete, their outputs and the event log read back, and a SIGTERM
//! restart and a kill -9 lose no acknowledged task, result or output, with
//! running attempts recovered per policy as on SQLite. The password never
//! reaches the log, even at trace level. A value one node spilled is served
//! by another, and blob files an earlier swarmd spilled move into the
//! database.

use std::time::Duration;

use serde_json::{Value, json};

use crate::daemon::{Swarmd, delegate_frame};
use crate::harness::parts;

const AGENTS: &str = r#"
[agents.steps]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf '{"type":"progress","stage":"one"}\n'
printf '{"type":"final","content":{"kind":"inline","value":{"steps":1}},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"

# Sleeps on its first attempt (long enough to be killed), passes on the next.
[agents.slow_once]
kind = "process"
program = "/bin/sh"
args = ["-c", """
if [ "$SWARM_ATTEMPT" = 1 ]; then /bin/sleep 30; fi
printf '{"type":"final","content":{"kind":"inline","value":"second try"},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
"#;

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {value}"))
}

async fn post_result(sw: &Swarmd, handle: &str, task: &str, body: &Value) -> (u16, Value) {
    parts(
        sw.http
            .post(sw.url(&format!("/v1/worker/result?task_id={task}")))
            .bearer_auth(handle)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// The seqs of the event log, read from the start.
async fn event_seqs(sw: &Swarmd) -> Vec<u64> {
    let (status, body) = parts(
        sw.get("/v1/events?after_seq=0&limit=1000", &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events in {body}"))
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect()
}

/// The overview's history counts the writer's group commits as the store's
/// share of an acknowledgement (one sample every 5 s).
async fn store_commits_reach_the_history(sw: &Swarmd) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = parts(
            sw.get("/v1/metrics/history", &sw.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let commits: u64 = body["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("no samples in {body}"))
            .iter()
            .flat_map(|sample| sample["sync"].as_array().cloned().unwrap_or_default())
            .filter_map(|count| count.as_u64())
            .sum();
        if commits > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no commits in the history: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Everything a restart must keep of a finished task.
async fn snapshot(sw: &Swarmd, task: &str) -> (Value, Vec<Value>) {
    let view = sw.finished(task).await;
    (
        json!([view["status"], view["result"], view["attempt"]]),
        sw.output(task).await,
    )
}

#[tokio::test]
async fn tasks_complete_on_postgres_and_survive_a_sigterm_and_a_kill_9() {
    let mut sw = Swarmd::on_postgres(AGENTS).await.start().await;

    // A process task runs to completion; its outputs read back.
    let (status, created) = sw.create(json!({"agent": "steps", "prompt": "go"})).await;
    assert_eq!(status, 201, "{created}");
    let process = text(&created, "task_id").to_owned();
    let view = sw.finished(&process).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", sw.log());
    assert_eq!(view["result"]["value"], json!({"steps": 1}), "{view}");
    let records = sw.output(&process).await;
    let kinds: Vec<&str> = records.iter().map(|r| text(&r["event"], "type")).collect();
    assert_eq!(kinds, ["progress", "final"], "{records:?}");

    // A delegated task completes through its SubAgent's result.
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&main_ai).await;
    ws.send(delegate_frame("r-1", "researcher", "look")).await;
    let spawn = ws.recv_type("spawn").await;
    let delegated = text(&spawn, "task_id").to_owned();
    let handle = text(&spawn, "worker_handle").to_owned();
    let (status, ack) = post_result(
        &sw,
        &handle,
        &delegated,
        &json!({"value": "found", "ok": true}),
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    let done = ws.done(&delegated).await;
    assert_eq!(done["status"], "pass", "{done}");

    // The PostgreSQL writer's group commits are in /metrics, with none of
    // SQLite's WAL syncs.
    let metrics = sw.metrics().await;
    let commits: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("swarmd_store_commits_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no store_commits in {metrics}"));
    assert!(commits > 0, "{metrics}");
    assert!(
        metrics.contains("swarmd_store_commit_seconds_count "),
        "{metrics}"
    );
    assert!(!metrics.contains("swarmd_store_syncs_total"), "{metrics}");
    store_commits_reach_the_history(&sw).await;

    // The event log is gapless from 1.
    let seqs = event_seqs(&sw).await;
    assert!(!seqs.is_empty());
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    // SIGTERM, then start: everything acknowledged is there.
    let before = (
        snapshot(&sw, &process).await,
        snapshot(&sw, &delegated).await,
    );
    drop(ws);
    sw.sigterm();
    assert!(sw.exited().await.success(), "{}", sw.log());
    sw.restart().await;
    let after = (
        snapshot(&sw, &process).await,
        snapshot(&sw, &delegated).await,
    );
    assert_eq!(before, after);
    let resumed = event_seqs(&sw).await;
    assert_eq!(&resumed[..seqs.len()], &seqs[..], "the log kept its prefix");

    // Running attempts at a kill -9: a process attempt is interrupted and
    // retried; a delegated one keeps running and completes when its
    // SubAgent posts; an acknowledged queued task is not lost.
    let (status, created) = sw
        .create(json!({"agent": "slow_once", "prompt": "p", "policy": {"max_attempts": 2}}))
        .await;
    assert_eq!(status, 201, "{created}");
    let slow = text(&created, "task_id").to_owned();
    let mut ws = sw.connect(&main_ai).await;
    ws.send(delegate_frame("r-2", "researcher", "again")).await;
    let spawn = ws.recv_type("spawn").await;
    let running = text(&spawn, "task_id").to_owned();
    let handle = text(&spawn, "worker_handle").to_owned();
    // The process attempt has started before the kill.
    for _ in 0..50 {
        if sw.task(&slow).await["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sw.kill9().await;
    drop(ws);
    sw.restart().await;

    let retried = sw.finished(&slow).await;
    assert_eq!(
        (
            &retried["status"],
            &retried["attempt"],
            &retried["result"]["value"]
        ),
        (&json!("pass"), &json!(2), &json!("second try")),
        "{retried}\n{}",
        sw.log()
    );
    assert_eq!(sw.task(&running).await["status"], "running");
    let (status, ack) = post_result(
        &sw,
        &handle,
        &running,
        &json!({"value": "late", "ok": true}),
    )
    .await;
    assert_eq!(status, 200, "{ack}\n{}", sw.log());
    let finished = sw.finished(&running).await;
    assert_eq!(finished["status"], "pass", "{finished}");
    assert_eq!(snapshot(&sw, &process).await, after.0);
    let seqs = event_seqs(&sw).await;
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "no gap after recovery"
    );
}

#[tokio::test]
async fn the_password_never_reaches_the_log_even_at_trace_level() {
    let mut sw = Swarmd::on_postgres(AGENTS)
        .await
        .env("RUST_LOG", "trace")
        .start()
        .await;
    let (status, created) = sw.create(json!({"agent": "steps", "prompt": "go"})).await;
    assert_eq!(status, 201, "{created}");
    let task = text(&created, "task_id").to_owned();
    assert_eq!(sw.finished(&task).await["status"], "pass");
    sw.sigterm();
    assert!(sw.exited().await.success());
    let password = swarmd_postgres::testing::cluster().password;
    let log = sw.log();
    // The PostgreSQL driver is capped at info whatever RUST_LOG says.
    assert!(log.contains(" DEBUG "), "trace logging was on:\n{log}");
    assert!(!log.contains("tokio_postgres::query"), "{log}");
    assert!(
        !log.contains(&password),
        "the database password appears in the log"
    );
}

/// SHA-256 of `bytes` in lowercase hex, as a blob is named.
fn sha256_hex(bytes: &[u8]) -> String {
    swarmd_output_store::blob_name(bytes)
}

/// `GET /v1/blobs/{name}` with the admin token: status and body.
async fn blob(sw: &Swarmd, name: &str) -> (u16, String) {
    let response = sw
        .get(&format!("/v1/blobs/{name}"), &sw.admin)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_value_one_node_spilled_is_served_by_another() {
    let database = swarmd_postgres::testing::fresh_database().await;
    let mut one = Swarmd::on_database(crate::blobs::AGENTS, &database)
        .start()
        .await;
    let (status, done) = one
        .create(json!({"agent": "big", "prompt": "p", "wait_secs": 10}))
        .await;
    assert_eq!((status, &done["status"]), (201, &json!("pass")), "{done}");
    let task = text(&done, "task_id").to_owned();
    let records = one.output(&task).await;
    let content = &records.last().unwrap()["event"]["content"];
    assert_eq!(content["kind"], "file_ref", "{content}");
    let name = text(content, "sha256").to_owned();
    let expected = "0".repeat(200);
    // A process agent's plain stdout is its value's `raw`.
    let (status, body) = blob(&one, &name).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["raw"],
        json!(expected)
    );
    let (status, body) = blob(&one, "not-a-blob").await;
    assert_eq!(
        (status, body.contains("bad_request")),
        (400, true),
        "{body}"
    );
    let (status, body) = blob(&one, &"0".repeat(64)).await;
    assert_eq!((status, body.contains("not_found")), (404, true), "{body}");
    one.sigterm();
    assert!(one.exited().await.success(), "{}", one.log());

    // Another node, with a state directory of its own, serves the value;
    // a blob file an earlier swarmd spilled there moves into the database.
    let other = Swarmd::on_database(crate::blobs::AGENTS, &database);
    let legacy = br#""spilled by an earlier swarmd""#;
    let legacy_name = sha256_hex(legacy);
    let legacy_dir = other.dir().join("state/blobs");
    std::fs::create_dir_all(&legacy_dir).unwrap();
    std::fs::write(legacy_dir.join(&legacy_name), legacy).unwrap();
    let other = other.start().await;
    assert_eq!(
        blob(&other, &legacy_name).await,
        (200, String::from_utf8(legacy.to_vec()).unwrap())
    );
    let (status, body) = blob(&other, &name).await;
    assert_eq!(status, 200, "{body}\n{}", other.log());
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["raw"],
        json!(expected)
    );
    for node in [&one, &other] {
        let files = std::fs::read_dir(node.dir().join("state/blobs"))
            .map(|dir| dir.count())
            .unwrap_or(0);
        assert_eq!(files, 0, "no blob is written to a node's disk");
    }
}
