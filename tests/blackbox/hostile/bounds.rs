//! Hostile clients: sizes and shapes a client controls, past their bounds,
//! each refused with a 4xx that names the bound while the daemon goes on: an
//! artifact's name, a flow whose loop would run 2^32 times, a JSONPath of
//! thousands of parentheses (whose parser would overflow its stack), and a
//! cancel's reason.

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::harness::{Daemon, expect_error, parts};

fn path(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

#[tokio::test]
async fn bounds_a_client_controls_are_refused_and_the_daemon_goes_on() {
    let daemon = Daemon::start().await;
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    let handle = daemon.handle(&task, 1).await;
    let output = format!("/v1/worker/output?task_id={task}");

    // An artifact is named in 1 to 256 bytes.
    let artifact = |name: String| json!({"type": "artifact", "name": name, "content": {"kind": "inline", "value": "a"}});
    for name in [String::new(), "n".repeat(257)] {
        let response = daemon
            .post(&output, &handle)
            .json(&artifact(name))
            .send()
            .await
            .unwrap();
        expect_error(response, 400, "bad_request").await;
    }
    let response = daemon
        .post(&output, &handle)
        .json(&artifact("n".repeat(256)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);

    // A loop that would run 2^32 times is refused before the run starts.
    let spin = json!({"name": "spin", "body": {"kind": "loop", "counter": path("$.n"),
        "max": u32::MAX, "cond": {"op": "lit", "value": true},
        "body": {"kind": "let", "at": path("$.x"), "value": {"op": "lit", "value": 1}}}});
    let response = daemon
        .post("/v1/runs", &daemon.admin)
        .json(&json!({"flow": spin, "input": {}}))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_flow")),
        "{body}"
    );
    assert!(body.to_string().contains("limit_too_high"), "{body}");

    // A JSONPath nested 5 000 deep is a problem of the flow, not a crash.
    let deep = format!("$[?{}@.a{}]", "(".repeat(5_000), ")".repeat(5_000));
    let flow = json!({"name": "deep", "body": {"kind": "let", "at": path("$.x"),
        "value": path(&deep)}});
    let response = daemon
        .post("/v1/flows/lint", &daemon.admin)
        .json(&json!({ "flow": flow }))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!((status, body["ok"].as_bool()), (200, Some(false)), "{body}");
    assert!(body.to_string().contains("deeper than 32"), "{body}");

    // A cancel's reason is at most 1 KiB; at the bound the cancel goes on.
    let cancel = format!("/v1/tasks/{task}/cancel");
    let response = daemon
        .post(&cancel, &daemon.admin)
        .json(&json!({"reason": "r".repeat(1025)}))
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;
    let response = daemon
        .post(&cancel, &daemon.admin)
        .json(&json!({"reason": "r".repeat(1024)}))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
}

/// Opens `/v1/events` as a live stream with `bearer`; the response, whose
/// body holds the stream open while it lives.
async fn open_stream(daemon: &Daemon, bearer: &str) -> reqwest::Response {
    daemon
        .get("/v1/events", bearer)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn live_streams_are_bounded_per_caller_and_freed_when_closed() {
    let daemon = Daemon::start_with("[limits]\nstreams_per_caller = 2\nmax_streams = 3\n").await;
    let first = open_stream(&daemon, &daemon.admin).await;
    let second = open_stream(&daemon, &daemon.admin).await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );

    // A third of the same caller is refused, with when to try again.
    let refused = open_stream(&daemon, &daemon.admin).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    expect_error(refused, 429, "too_many_streams").await;

    // Another caller has a share of its own, up to the daemon's total.
    let observer = daemon.observer_token().await;
    let third = open_stream(&daemon, &observer).await;
    assert_eq!(third.status(), 200);
    let over = open_stream(&daemon, &observer).await;
    let (status, body) = parts(over).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("too_many_streams"))
    );
    assert!(
        body["error"].as_str().unwrap().contains("max_streams"),
        "{body}"
    );

    let scrape = daemon.metrics().await;
    assert!(
        scrape.contains("swarmd_rate_limited_total{limit=\"streams\"} 2"),
        "{scrape}"
    );

    // A client that closes its stream frees its place.
    drop(first);
    let started = std::time::Instant::now();
    loop {
        let again = open_stream(&daemon, &daemon.admin).await;
        if again.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "a closed stream's place was not freed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop((second, third));
}

/// A session's stream of a task's output ends with the session, as its
/// event stream does, though the task goes on.
#[tokio::test]
async fn a_deleted_sessions_output_stream_ends_promptly() {
    let sw = Swarmd::new(
        "[agents.sleepy]\nkind = \"process\"\nprogram = \"/bin/sleep\"\nargs = [\"60\"]\nstdin = \"none\"\n",
    )
    .start()
    .await;
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let task = sw
        .create_as(&owner.token, json!({"agent": "sleepy", "prompt": "p"}))
        .await;
    let response = live(&sw, &format!("/v1/tasks/{task}/output"), &owner.token).await;
    assert_eq!(response.status().as_u16(), 200);
    let (status, answer) = delete_session(&sw, &owner.sid).await;
    assert_eq!(status, 204, "{answer}");
    let deleted = std::time::Instant::now();
    assert!(
        ends(response).await,
        "the output stream outlived its session"
    );
    assert!(
        deleted.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        deleted.elapsed()
    );
    assert_eq!(sw.task(&task).await["status"], "running");
}

/// Operator sessions are bounded in all (each lives a day while idle, so a
/// rate of logins alone would not bound them); deleting one makes room.
#[tokio::test]
async fn operator_sessions_are_bounded_in_all() {
    let sw = Swarmd::new("[limits]\nmax_operator_sessions = 2\n")
        .start()
        .await;
    let first = sw.login(json!({})).await;
    let _second = sw.login(json!({})).await;
    let login = || async {
        sw.post("/v1/operators", &sw.admin)
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    };
    let refused = login().await;
    let (status, body) = parts(refused).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("too_many_sessions")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("max_operator_sessions"),
        "{body}"
    );
    let (status, _) = delete_session(&sw, &first.sid).await;
    assert_eq!(status, 204);
    assert_eq!(login().await.status().as_u16(), 201);
}

/// A role token's stream ends when the token expires: a credential that no
/// longer opens a stream does not keep one open.
#[tokio::test]
async fn a_role_tokens_stream_ends_when_the_token_expires() {
    let sw = Swarmd::new("").start().await;
    let token = sw
        .cli(&["token", "mint", "--role", "observer", "--ttl", "2"])
        .await;
    let response = live(&sw, "/v1/events", token.trim()).await;
    assert_eq!(response.status().as_u16(), 200);
    let opened = std::time::Instant::now();
    assert!(ends(response).await, "the stream outlived its token");
    // Two seconds of lifetime and the 5 s leeway, checked every 500 ms:
    // well before 15 s, far short of the wait above.
    assert!(
        opened.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        opened.elapsed()
    );
    let again = live(&sw, "/v1/events", token.trim()).await;
    assert_eq!(again.status().as_u16(), 401);
}

/// `path` asked for as a live stream (`text/event-stream`) with `bearer`.
async fn live(sw: &Swarmd, path: &str, bearer: &str) -> reqwest::Response {
    sw.get(path, bearer)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
}

/// Reads a stream's body to its end: whether the daemon ended it within
/// `PATIENCE`.
async fn ends(response: reqwest::Response) -> bool {
    let mut body = response.bytes_stream();
    let drained = async {
        while let Some(chunk) = body.next().await {
            chunk.unwrap();
        }
    };
    tokio::time::timeout(crate::harness::PATIENCE, drained)
        .await
        .is_ok()
}

/// Deletes the operator session `sid` as the admin: the answer.
async fn delete_session(sw: &Swarmd, sid: &str) -> (u16, Value) {
    parts(
        sw.http
            .delete(sw.url(&format!("/v1/operators/{sid}")))
            .bearer_auth(&sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await
}
