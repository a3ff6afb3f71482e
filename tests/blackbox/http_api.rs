//! The HTTP API of the real daemon (docs/protocol.md): worker routes with a handle,
//! token attacks, late writes and replays, the bad-input matrix, metrics,
//! the SSE output stream, and cursors that name nothing.

use serde_json::{Value, json};

use crate::harness::{Daemon, expect_error, parts};
use crate::sse::Sse;

fn progress(stage: &str) -> Value {
    json!({"type": "progress", "stage": stage})
}

#[tokio::test]
async fn a_subagent_with_its_handle_fetches_streams_and_submits() {
    let daemon = Daemon::start().await;
    let task = daemon
        .spawn(json!({"agent": "hold", "prompt": "build it", "system": "be brief"}))
        .await;
    let handle = daemon.handle(&task, 1).await;
    assert!(handle.starts_with("wh-"), "{handle}");

    let path = format!("/v1/worker/prompt?task_id={task}");
    let (status, prompt) = parts(daemon.get(&path, &handle).send().await.unwrap()).await;
    assert_eq!(status, 200, "{prompt}");
    assert_eq!(
        (prompt["prompt"].as_str(), prompt["system"].as_str()),
        (Some("build it"), Some("be brief"))
    );
    assert_eq!(prompt["attempt"], 1);

    let (status, beat) = parts(
        daemon
            .post("/v1/worker/heartbeat", &handle)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{beat}");
    assert!(beat["deadline"].as_u64().is_some());

    let mut sse = Sse::open(&daemon, &format!("/v1/tasks/{task}/output"), None).await;
    let ndjson = format!("{}\n{}\n", progress("plan"), progress("code"));
    let response = daemon
        .post("/v1/worker/output", &handle)
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    let (status, ack) = parts(response).await;
    assert_eq!((status, ack["seq"].as_u64()), (200, Some(2)), "{ack}");
    assert_eq!(sse.data().await, ("1:1".into(), progress("plan")));
    assert_eq!(sse.data().await, ("1:2".into(), progress("code")));
    drop(sse);

    let response = daemon
        .post("/v1/worker/output", &handle)
        .json(&progress("test"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut resumed = Sse::open(&daemon, &format!("/v1/tasks/{task}/output"), Some("1:2")).await;
    assert_eq!(resumed.data().await, ("1:3".into(), progress("test")));

    let response = daemon
        .post("/v1/worker/submit", &handle)
        .header("Idempotency-Key", "submit-1")
        .body("all done\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (id, last) = resumed.data().await;
    assert_eq!((id.as_str(), last["type"].as_str()), ("1:4", Some("final")));
    daemon.release(&task);
    let done = daemon.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"], json!({"value": "all done", "ok": true}));
    assert!(
        resumed.next().await.is_none(),
        "the stream ends with the task"
    );

    // Credentials never reach the logs.
    let log = daemon.log();
    assert!(
        !log.contains(&handle) && !log.contains(&daemon.admin),
        "a credential was logged"
    );
}

#[tokio::test]
async fn token_attacks_are_refused_and_change_nothing() {
    let mut daemon = Daemon::start().await;
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    let other = daemon.spawn(json!({"agent": "hold", "prompt": "q"})).await;
    let handle = daemon.handle(&task, 1).await;
    daemon.handle(&other, 1).await;
    let result = json!({"value": "forged"});

    let mut mutated = handle.clone().into_bytes();
    let last = mutated.len() - 1;
    mutated[last] = if mutated[last] == b'0' { b'1' } else { b'0' };
    let mutated = String::from_utf8(mutated).unwrap();
    let forged_token = "swc1.k1.eyJzdWIiOiJ4In0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    for bearer in [mutated.as_str(), forged_token, "wh-short", "nonsense"] {
        let response = daemon
            .post("/v1/worker/result", bearer)
            .json(&result)
            .send()
            .await
            .unwrap();
        expect_error(response, 401, "unauthorized").await;
    }
    let path = format!("/v1/worker/prompt?task_id={other}");
    expect_error(
        daemon.get(&path, &handle).send().await.unwrap(),
        403,
        "task_mismatch",
    )
    .await;
    let response = daemon
        .http
        .post(daemon.url("/v1/worker/submit"))
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let huge = format!("{handle}{}", "0".repeat(3 * 1024));
    let response = daemon
        .post("/v1/worker/submit", &huge)
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    // Refused before decoding, yet logged with its fingerprint (docs/security.md, Verification).
    let print = swarmd_engine::auth::fingerprint(&huge);
    let logged = |log: &str| {
        log.lines()
            .any(|line| line.contains("too_long") && line.contains(&print))
    };
    crate::daemon::eventually("the too_long refusal in the log", || logged(&daemon.log())).await;
    let observer = daemon.observer_token().await;
    let response = daemon
        .post("/v1/tasks", &observer)
        .json(&json!({"agent": "cat", "prompt": "p"}))
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;
    let response = daemon
        .post(&format!("/v1/tasks/{task}/cancel"), &observer)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;

    for id in [&task, &other] {
        let (_, output) = parts(
            daemon
                .get(&format!("/v1/tasks/{id}/output"), &observer)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(output["records"], json!([]), "{output}");
        let (_, view) = parts(
            daemon
                .get(&format!("/v1/tasks/{id}"), &observer)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(view["status"], "running", "{view}");
    }
    let metrics = daemon
        .http
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("swarmd_token_verify_failures_total{reason=\"task_mismatch\"} 1"),
        "{metrics}"
    );
    assert!(daemon.alive());
    daemon.release(&task);
    daemon.release(&other);
}

#[tokio::test]
async fn late_writes_conflicts_and_replays() {
    let daemon = Daemon::start().await;
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    let handle = daemon.handle(&task, 1).await;
    let submit = |key: Option<&'static str>, body: &'static str| {
        let mut request = daemon.post("/v1/worker/submit", &handle).body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let (status, first) = parts(submit(Some("k"), "one").await.unwrap()).await;
    assert_eq!(status, 200, "{first}");
    let (status, replay) = parts(submit(Some("k"), "one").await.unwrap()).await;
    assert_eq!((status, replay), (200, first));
    expect_error(
        submit(Some("k"), "two").await.unwrap(),
        409,
        "already_final",
    )
    .await;
    expect_error(submit(None, "one").await.unwrap(), 409, "already_final").await;
    daemon.release(&task);
    assert_eq!(daemon.finished(&task).await["result"]["value"], "one");

    // A cancelled task refuses its worker's late result.
    let cancelled = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    let late = daemon.handle(&cancelled, 1).await;
    let response = daemon
        .post(&format!("/v1/tasks/{cancelled}/cancel"), &daemon.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = daemon
        .post("/v1/worker/result", &late)
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap();
    expect_error(response, 410, "task_terminal").await;

    // A retried task refuses the first attempt's writes. (A process that
    // exits 1 is a `blocked` verdict, so the policy retries that.)
    let policy = json!({"max_attempts": 2, "retry_backoff_ms": 0, "retry_on": ["blocked"]});
    let flaky = daemon
        .spawn(json!({"agent": "flaky", "prompt": "p", "policy": policy}))
        .await;
    let old = daemon.handle(&flaky, 1).await;
    let new = daemon.handle(&flaky, 2).await;
    let response = daemon
        .post("/v1/worker/output", &old)
        .json(&progress("stale"))
        .send()
        .await
        .unwrap();
    expect_error(response, 409, "attempt_superseded").await;
    let response = daemon
        .post("/v1/worker/submit", &new)
        .body("fresh")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    daemon.release(&flaky);
    let done = daemon.finished(&flaky).await;
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_u64()),
        (Some("pass"), Some(2)),
        "{done}"
    );
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_the_daemon_lives() {
    let mut daemon = Daemon::start().await;
    let admin = daemon.admin.clone();
    let post = |body: String| {
        daemon
            .post("/v1/tasks", &admin)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let ten_mib = format!(
        "{{\"agent\":\"cat\",\"prompt\":\"{}\"}}",
        "x".repeat(10 * 1024 * 1024)
    );
    expect_error(post(ten_mib).await.unwrap(), 413, "payload_too_large").await;
    expect_error(
        post("{\"agent\":".into()).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let deep = format!(
        "{{\"agent\":\"cat\",\"prompt\":\"p\",\"input\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    expect_error(post(deep).await.unwrap(), 400, "bad_request").await;
    let unknown = json!({"agent": "no-such-agent", "prompt": "p"}).to_string();
    expect_error(post(unknown).await.unwrap(), 404, "not_found").await;
    // Durations the clocks cannot hold are refused, not left to overflow.
    for policy in [
        json!({"attempt_timeout_secs": u64::MAX}),
        json!({"long_hold_warn_secs": u64::MAX}),
        json!({"queue_timeout_secs": 0}),
        json!({"max_attempts": 1000}),
    ] {
        let body = json!({"agent": "cat", "prompt": "p", "policy": policy}).to_string();
        expect_error(post(body).await.unwrap(), 400, "bad_request").await;
    }
    expect_error(
        daemon.get("/v1/tasks/T-123", &admin).send().await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let response = daemon
        .http
        .get(daemon.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "ok");
    assert!(daemon.alive());
}

#[tokio::test]
async fn process_agents_and_swarmd_worker_pass_through_http() {
    let daemon = Daemon::start().await;
    let (status, done) = parts(
        daemon
            .post("/v1/tasks", &daemon.admin)
            .json(
                &json!({"agent": "worker-cat", "prompt": "hello from the prompt", "wait_secs": 20}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, done["status"].as_str()),
        (201, Some("pass")),
        "{done}\n{}",
        daemon.log()
    );
    assert!(
        done["result"]["value"]
            .to_string()
            .contains("hello from the prompt"),
        "{done}"
    );
    let task = daemon
        .spawn(json!({"agent": "cat", "prompt": "{\"n\": 7}"}))
        .await;
    assert_eq!(
        daemon.finished(&task).await["result"]["value"],
        json!({"n": 7})
    );
}

#[tokio::test]
async fn metrics_and_status_name_what_the_spec_lists() {
    let daemon = Daemon::start().await;
    let task = daemon.spawn(json!({"agent": "cat", "prompt": "1"})).await;
    daemon.finished(&task).await;
    let response = daemon.http.get(daemon.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // One refused credential, so the failure counter has a series.
    let response = daemon
        .http
        .get(daemon.url("/v1/tasks"))
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let text = daemon
        .http
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "swarmd_tasks_finished_total{status=\"pass\"}",
        "swarmd_attempts_finished_total",
        "swarmd_dispatch_latency_seconds_bucket",
        "swarmd_queue_depth",
        "swarmd_attempts_running",
        "swarmd_sessions_connected",
        "swarmd_store_append_latency_seconds",
        "swarmd_token_verify_failures_total",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
    let (status, body) = parts(
        daemon
            .get("/v1/status", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["base_url"], daemon.base);
    assert_eq!(body["store"]["backend"], "sqlite");
}

#[tokio::test]
async fn the_memory_store_keeps_only_the_newest_finished_tasks() {
    let daemon =
        Daemon::start_configured("backend = \"memory\"\nmemory_keep_finished = 2", "").await;
    let mut tasks = Vec::new();
    for n in 0..3 {
        let task = daemon
            .spawn(json!({"agent": "cat", "prompt": format!("{{\"n\": {n}}}")}))
            .await;
        assert_eq!(daemon.finished(&task).await["status"], "pass");
        tasks.push(task);
    }
    expect_error(
        daemon
            .get(&format!("/v1/tasks/{}", tasks[0]), &daemon.admin)
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    for (n, task) in tasks.iter().enumerate().skip(1) {
        let (status, body) = parts(
            daemon
                .get(&format!("/v1/tasks/{task}"), &daemon.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, &body["result"]["value"]), (200, &json!({"n": n})));
    }
}

/// A cursor names what it follows: an output seq without its attempt is
/// refused (a retry would have moved "the current attempt" under it), and
/// an event seq past the log's end is refused rather than waited on.
#[tokio::test]
async fn cursors_that_name_nothing_are_refused() {
    let daemon = Daemon::start().await;
    // The first attempt exits 1 (`blocked`), which the policy retries.
    let policy = json!({"max_attempts": 2, "retry_backoff_ms": 0, "retry_on": ["blocked"]});
    let task = daemon
        .spawn(json!({"agent": "flaky", "prompt": "p", "policy": policy}))
        .await;
    let handle = daemon.handle(&task, 2).await;
    let ndjson = format!("{}\n{}\n", progress("one"), progress("two"));
    let response = daemon
        .post("/v1/worker/output", &handle)
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    let (status, ack) = parts(response).await;
    assert_eq!(status, 200, "{ack}");
    let last = ack["seq"].as_u64().unwrap();

    let output = format!("/v1/tasks/{task}/output");
    let alone = format!("{output}?after_seq={}", last - 1);
    expect_error(
        daemon.get(&alone, &daemon.admin).send().await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let named = format!("{output}?attempt=2&after_seq={}", last - 1);
    let (status, page) = parts(daemon.get(&named, &daemon.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["records"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["records"][0]["event"], progress("two"), "{page}");
    // Every attempt's page names its cursor with the attempt.
    let (_, page) = parts(daemon.get(&output, &daemon.admin).send().await.unwrap()).await;
    assert_eq!(page["next"], format!("2:{last}"), "{page}");
    daemon.release(&task);
    assert_eq!(daemon.finished(&task).await["status"], "pass");

    let (status, state) = parts(
        daemon
            .get("/v1/status", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{state}");
    let head = state["event_seq"].as_u64().unwrap();
    let at_end = format!("/v1/events?after_seq={head}");
    let (status, page) = parts(daemon.get(&at_end, &daemon.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    // Far enough past the end that nothing this test does reaches it.
    let past = format!("/v1/events?after_seq={}", head + 500);
    expect_error(
        daemon.get(&past, &daemon.admin).send().await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let response = daemon
        .get("/v1/events", &daemon.admin)
        .header("accept", "text/event-stream")
        .header("last-event-id", (head + 500).to_string())
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;
}
