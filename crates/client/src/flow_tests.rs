//! The flow and lint renderings, and the run routes against a small
//! in-process daemon.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::routing::post;
use serde_json::{Value, json};

use super::*;

const RUN: &str = "R-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";
const NOW: u64 = 1_000_000_000;

#[test]
fn a_run_table_has_one_aligned_row_per_run() {
    let page = json!({"runs": [
        {"id": RUN, "flow": "best-of-3", "status": "waiting",
         "created_ms": NOW - 600_000, "updated_ms": NOW - 65_000, "error": null},
        {"id": "R-0190f3c2a1b27c3d8e4f5a6b7c8d0000", "flow": "deploy", "status": "failed",
         "created_ms": NOW - 7_200_000, "updated_ms": NOW - 7_200_000,
         "error": "step /body: exit\n1"},
    ]});
    let table = run_table(&page, NOW, false);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("ID "), "{table}");
    assert!(
        lines[1].starts_with("…7c8d9e0f  best-of-3  waiting  1m ago"),
        "{table}"
    );
    assert!(lines[2].ends_with("step /body: exit 1"), "{table}");
    assert_eq!(lines[1].find("waiting"), lines[2].find("failed"), "{table}");
    assert!(run_table(&page, NOW, true).contains(RUN));
    assert!(lines.iter().all(|line| !line.ends_with(' ')));
}

#[test]
fn a_flow_table_shows_a_short_hash() {
    let page = json!({"flows": [{"name": "review", "description": "Two reviewers.",
        "hash": "sha256:0123456789abcdef0123", "source": "flows/review.json"}]});
    let table = flow_table(&page);
    let row = table.lines().nth(1).unwrap_or_default();
    assert_eq!(
        row,
        "review  flows/review.json  sha256:0123456789a…  Two reviewers."
    );
}

#[test]
fn lint_problems_print_one_per_line_with_their_hint() {
    let answer = json!({"ok": false, "problems": [
        {"pointer": "/body/children/1/ref", "code": "unknown_agent",
         "message": "no agent `codr`", "hint": "agents: coder, judge"},
        {"pointer": "", "code": "bad_name", "message": "bad\u{1b}name", "hint": ""},
    ]});
    let problems = problems_of(&answer);
    assert_eq!(
        problem_lines(&problems),
        "/body/children/1/ref  unknown_agent  no agent `codr`  (agents: coder, judge)\n\
         /  bad_name  bad name"
    );
}

/// What the fake daemon saw.
#[derive(Debug, Default, Clone)]
struct Seen {
    uri: String,
    authorization: Vec<String>,
    key: String,
    body: Value,
}

type Log = Arc<Mutex<Vec<Seen>>>;

async fn run_daemon() -> (ApiClient, Log) {
    let log = Log::default();
    let record = |log: &Log, uri: &Uri, headers: &HeaderMap, body: Value| {
        log.lock().unwrap().push(Seen {
            uri: uri.to_string(),
            authorization: headers
                .get_all(header::AUTHORIZATION)
                .iter()
                .map(|v| v.to_str().unwrap_or_default().to_owned())
                .collect(),
            key: headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            body,
        });
    };
    let router = Router::new()
        .route(
            "/v1/runs",
            post(
                move |State(log): State<Log>, uri: Uri, headers: HeaderMap, body: String| async move {
                    let body: Value = serde_json::from_str(&body).unwrap_or_default();
                    record(&log, &uri, &headers, body.clone());
                    match body["flow"].as_str() {
                        Some("broken") => (StatusCode::BAD_REQUEST, axum::Json(json!({
                            "error": "the flow fails lint", "code": "invalid_flow",
                            "problems": [{"pointer": "/body/ref", "code": "unknown_agent",
                                          "message": "no agent x", "hint": "agents: a"}]}))),
                        Some("missing") => (StatusCode::BAD_REQUEST, axum::Json(json!({
                            "error": "input: `task` is required", "code": "invalid_input"}))),
                        _ if headers.contains_key("idempotency-key") => {
                            (StatusCode::OK, axum::Json(json!({"id": RUN, "status": "running"})))
                        }
                        _ => (StatusCode::CREATED, axum::Json(json!({"id": RUN, "status": "running"}))),
                    }
                },
            ),
        )
        .fallback(
            move |State(log): State<Log>, uri: Uri, headers: HeaderMap, body: String| async move {
                let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                record(&log, &uri, &headers, body);
                axum::Json(json!({"id": RUN, "status": "passed"}))
            },
        )
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let client = ApiClient::new(&format!("http://{addr}"), Bearer::new("sws-admin")).unwrap();
    (client, log)
}

#[tokio::test]
async fn a_start_tells_created_from_replayed_and_keeps_every_lint_problem() {
    let (client, log) = run_daemon().await;
    let request = |flow: &str, key: Option<&str>| RunRequest {
        flow: json!(flow),
        input: json!({"task": "t"}),
        idempotency_key: key.map(str::to_owned),
    };
    let started = client.start_run(&request("review", None)).await.unwrap();
    assert!(matches!(started, RunStart::Started { created: true, .. }));
    let replayed = client
        .start_run(&request("review", Some("k1")))
        .await
        .unwrap();
    assert!(matches!(replayed, RunStart::Started { created: false, .. }));
    assert_eq!(log.lock().unwrap()[1].key, "k1");
    assert_eq!(
        log.lock().unwrap()[1].body,
        json!({"flow": "review", "input": {"task": "t"}})
    );
    match client.start_run(&request("broken", None)).await.unwrap() {
        RunStart::Invalid { message, problems } => {
            assert_eq!(message, "the flow fails lint");
            assert_eq!(problems.len(), 1);
            assert_eq!(problems[0].code, "unknown_agent");
        }
        other => panic!("expected invalid, got {other:?}"),
    }
    let refused = client.start_run(&request("missing", None)).await;
    assert!(
        matches!(refused, Err(ClientError::Status { status: 400, code: Some(code), .. })
        if code == "invalid_input")
    );
}

#[tokio::test]
async fn an_answer_with_a_wait_token_sends_only_that_token_and_encodes_the_key() {
    let (client, log) = run_daemon().await;
    let token = Bearer::new("swt1.abc");
    client
        .answer_wait(RUN, "/body/body[1]", &json!(true), Some(&token))
        .await
        .unwrap();
    client
        .answer_wait(RUN, "approve", &json!({"ok": 1}), None)
        .await
        .unwrap();
    client.get_run(RUN, Some(5)).await.unwrap();
    client.cancel_run(RUN, Some("enough")).await.unwrap();
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        seen[0].uri,
        format!("/v1/runs/{RUN}/waits/%2Fbody%2Fbody%5B1%5D")
    );
    assert_eq!(seen[0].authorization, ["Bearer swt1.abc"]);
    assert_eq!(seen[0].body, json!({"value": true}));
    assert_eq!(seen[1].authorization, ["Bearer sws-admin"]);
    assert_eq!(seen[2].uri, format!("/v1/runs/{RUN}?wait=5"));
    assert_eq!(seen[3].uri, format!("/v1/runs/{RUN}/cancel"));
    assert_eq!(seen[3].body, json!({"reason": "enough"}));
}

#[test]
fn a_shape_error_of_the_lint_route_is_a_lint_problem_at_its_pointer() {
    let message = "the flow is not flow IR (docs/flow.schema.json): /body/strategy: \
                   \"best\" is not one of \"pick_best\", \"sequence\", \"octopus\"";
    let problem = shape_problem(message);
    assert_eq!(
        problem_lines(&[problem]),
        "/body/strategy  invalid_flow  \"best\" is not one of \"pick_best\", \"sequence\", \
         \"octopus\"  (the document is not flow IR: see docs/flow.schema.json)"
    );
    let whole =
        shape_problem("the flow is not flow IR (docs/flow.schema.json): missing field `body`");
    assert_eq!(
        (whole.pointer.as_str(), whole.message.as_str()),
        ("/", "missing field `body`")
    );
}
