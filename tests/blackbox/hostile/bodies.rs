//! Hostile clients: bodies a client sends by hand, refused the same way on
//! every route that reads one: a body that stalls is 408 `request_timeout`
//! (the routes that read their body whole by hand included: the login and
//! `/mcp`), a worker route or task creation whose credential is refused
//! answers 401 from the request's head without reading the body, a login nested past 64 levels or with an oversized capability
//! manifest is 400, a body to `/mcp` that is not one JSON-RPC message is
//! 400 (not rmcp's 415, as if its type were wrong), a query parameter on
//! a route that takes none is 400 (after the credential), an error that
//! repeats a huge input is cut to 16 KiB, and an inline flow whose JSONPath descends twice (its
//! matches would grow as a power of the run's variables) is refused before
//! it runs, and a template whose filters would loop over a large input
//! fails its run on the work they are charged.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::daemon::Swarmd;
use crate::harness::{PATIENCE, expect_error};

/// Sends `POST path` whose body promises 100 bytes and delivers one; the
/// status line and body the daemon answers once it stops waiting.
async fn stalled(sw: &Swarmd, path: &str, bearer: &str) -> (u16, Value) {
    let addr = sw.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 100\r\nConnection: close\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    // A chunked answer: the JSON is on the line after the chunk's size.
    let json = body.lines().find(|l| l.starts_with('{')).unwrap_or(body);
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_stalled_body_is_a_timeout_on_every_route() {
    let sw = Swarmd::new("")
        .env("SWARMD_SERVER__BODY_TIMEOUT_SECS", "1")
        .start()
        .await;
    for path in ["/v1/tasks", "/v1/operators", "/mcp"] {
        let (status, body) = stalled(&sw, path, &sw.admin).await;
        assert_eq!(
            (status, &body["code"]),
            (408, &json!("request_timeout")),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn a_refused_credential_is_answered_before_its_body_is_read() {
    // The body would stall for a second and end in 408: a 401 shows the
    // credential was refused from the head alone.
    let sw = Swarmd::new("")
        .env("SWARMD_SERVER__BODY_TIMEOUT_SECS", "1")
        .start()
        .await;
    for bearer in ["swc1.forged.forged", "wh-0123456789abcdef0123", "nonsense"] {
        for path in [
            "/v1/worker/result",
            "/v1/worker/submit",
            "/v1/worker/output",
            "/v1/worker/heartbeat",
            "/v1/worker/artifact?name=a",
            "/v1/worker/stats",
            "/v1/worker/degradation",
            "/v1/tasks",
        ] {
            let (status, body) = stalled(&sw, path, bearer).await;
            assert_eq!(
                (status, &body["code"]),
                (401, &json!("unauthorized")),
                "{path} with {bearer}: {body}"
            );
        }
    }
}

#[tokio::test]
async fn a_login_is_bounded_in_depth_and_in_its_manifest() {
    let sw = Swarmd::new("").start().await;
    let login = |body: Value| {
        sw.http
            .post(sw.url("/v1/operators"))
            .bearer_auth(&sw.admin)
            .json(&body)
            .send()
    };
    let deep = (0..100).fold(json!(1), |inner, _| json!([inner]));
    let refused = login(json!({"capability_manifest": deep})).await.unwrap();
    expect_error(refused, 400, "bad_request").await;
    let big = json!({"capability_manifest": {"tools": "x".repeat(70 * 1024)}});
    let refused = login(big).await.unwrap();
    let (status, body) = crate::harness::parts(refused).await;
    assert_eq!(
        (status, &body["code"]),
        (400, &json!("bad_request")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("capability_manifest"),
        "{body}"
    );
    let fits = json!({"capability_manifest": {"tools": "x".repeat(60 * 1024)}});
    let created = login(fits).await.unwrap();
    assert_eq!(created.status().as_u16(), 201);
}

#[tokio::test]
async fn a_flow_whose_path_descends_twice_is_refused_before_it_runs() {
    let sw = Swarmd::new("").start().await;
    let chain = (0..60).fold(json!(1), |inner, _| json!([0, inner]));
    let flow = |at: &str| {
        json!({"name": "x", "body": {"kind": "let",
            "at": {"op": "path", "at": "$.x"},
            "value": {"op": "select", "at": at}}})
    };
    let started = tokio::time::Instant::now();
    let refused = sw
        .post("/v1/runs", &sw.admin)
        .json(&json!({"flow": flow("$..*..*..*..*..*..*"), "input": chain}))
        .send()
        .await
        .unwrap();
    let (status, body) = crate::harness::parts(refused).await;
    assert_eq!(
        (status, &body["code"]),
        (400, &json!("invalid_flow")),
        "{body}"
    );
    assert!(body.to_string().contains("descendant"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // One descent runs, and matches each value once.
    let ran = sw
        .post("/v1/runs", &sw.admin)
        .json(&json!({"flow": flow("$.input..*"), "input": chain}))
        .send()
        .await
        .unwrap();
    let (status, body) = crate::harness::parts(ran).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap();
    let done = sw
        .get(&format!("/v1/runs/{id}?wait=10"), &sw.admin)
        .send()
        .await
        .unwrap();
    let (_, run) = crate::harness::parts(done).await;
    assert_eq!(run["status"], "passed", "{run}");
    assert_eq!(
        run["result"]["x"].as_array().map(Vec::len),
        Some(120),
        "{run}"
    );
}

#[tokio::test]
async fn a_template_looping_filters_over_a_large_input_fails_its_run() {
    let sw = Swarmd::new("").start().await;
    // Each `sort` is one instruction over 200 000 items: on fuel alone the
    // run would sort them 100 000 times on an async worker.
    let flow = json!({"name": "t", "body": {"kind": "let",
        "at": {"op": "path", "at": "$.x"},
        "value": {"op": "template",
                  "text": "{% for i in range(100000) %}{{ input.a|sort|length }}{% endfor %}"}}});
    let input = json!({"a": (0..200_000).rev().collect::<Vec<u32>>()});
    let created = sw
        .post("/v1/runs", &sw.admin)
        .json(&json!({"flow": flow, "input": input}))
        .send()
        .await
        .unwrap();
    let (status, body) = crate::harness::parts(created).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap();
    let done = sw
        .get(&format!("/v1/runs/{id}?wait=30"), &sw.admin)
        .send()
        .await
        .unwrap();
    let (_, run) = crate::harness::parts(done).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(run.to_string().contains("units of work"), "{run}");
    let health = sw.get("/healthz", "").send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn mcp_answers_a_body_that_is_not_json_rpc_with_a_bad_request() {
    let sw = Swarmd::new("").start().await;
    for body in ["{{{", "", "[]", r#"{"id":1,"method":"ping"}"#] {
        let answer = sw
            .http
            .post(sw.url("/mcp"))
            .bearer_auth(&sw.admin)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .unwrap();
        expect_error(answer, 400, "bad_request").await;
    }
    // A body of another type is still rmcp's 415.
    let answer = sw
        .http
        .post(sw.url("/mcp"))
        .bearer_auth(&sw.admin)
        .header("Content-Type", "text/plain")
        .header("Accept", "application/json, text/event-stream")
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(answer, 415, "unsupported_media_type").await;
}

#[tokio::test]
async fn a_query_parameter_a_route_does_not_take_is_refused_after_the_credential() {
    let sw = Swarmd::new(
        r#"
[agents.nap]
kind = "process"
program = "/bin/sleep"
args = ["30"]
stdin = "none"
"#,
    )
    .start()
    .await;
    let (status, body) = sw.create(json!({"agent": "nap", "prompt": "p"})).await;
    assert_eq!(status, 201, "{body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    for path in [
        "/v1/status?x=1".to_owned(),
        "/v1/agents?verbose".to_owned(),
        "/v1/operators?x=1".to_owned(),
        "/v1/flows?x=1".to_owned(),
        "/v1/metrics/history?x=1".to_owned(),
        format!("/v1/tasks/{task}?x=1"),
        format!("/v1/tasks/{task}/diff?x=1"),
    ] {
        let answer = sw.get(&path, &sw.admin).send().await.unwrap();
        let (status, body) = crate::harness::parts(answer).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!("bad_request")),
            "{path}: {body}"
        );
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("this route takes none"),
            "{body}"
        );
    }
    // A cancel with a mistyped parameter cancels nothing.
    let cancel = format!("/v1/tasks/{task}/cancel?reasn=typo");
    let answer = sw.post(&cancel, &sw.admin).send().await.unwrap();
    expect_error(answer, 400, "bad_request").await;
    let answer = sw
        .get(&format!("/v1/tasks/{task}"), &sw.admin)
        .send()
        .await
        .unwrap();
    let (_, view) = crate::harness::parts(answer).await;
    assert_ne!(view["status"], "cancelled", "{view}");
    // Without a credential the answer is 401 first.
    let answer = sw.http.get(sw.url("/v1/status?x=1")).send().await.unwrap();
    expect_error(answer, 401, "unauthorized").await;
}

#[tokio::test]
async fn an_error_repeating_a_huge_input_is_cut() {
    let sw = Swarmd::new("[agents.cat]\nkind = \"process\"\nprogram = \"/bin/cat\"\n")
        .start()
        .await;
    let body = json!({"agent": "cat", "prompt": "p", "layers": ["x".repeat(1_000_000)]});
    let answer = sw
        .post("/v1/tasks", &sw.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    let text = answer.text().await.unwrap();
    assert!(text.len() < 20_000, "{} bytes", text.len());
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["code"], "bad_request");
    assert!(
        parsed["error"].as_str().unwrap().ends_with(" more bytes)"),
        "{}",
        &text[..200]
    );
}
