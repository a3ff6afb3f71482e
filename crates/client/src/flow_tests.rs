//! The flow renderings, and the run routes against a small in-process
//! daemon.

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

fn node(key: &str, pointer: &str, kind: &str, status: &str) -> Value {
    json!({"key": key, "pointer": pointer, "kind": kind, "status": status})
}

/// A run whose nodes arrive in the daemon's key order, where a child's
/// key sorts before its fan-out item's and `else` before `then`.
fn waiting_run() -> Value {
    let mut step0 = node(
        "/body/children/0/body[0]",
        "/body/children/0/body",
        "step",
        "passed",
    );
    step0["name"] = json!("try");
    step0["tries"] = json!([{"key": "/body/children/0/body[0]",
        "task_id": "T-0190f3c2a1b27c3d8e4f5a6b11111111",
        "started_ms": NOW - 20_000, "ended_ms": NOW - 7_700}]);
    let mut step1 = node(
        "/body/children/0/body[1]",
        "/body/children/0/body",
        "step",
        "failed",
    );
    step1["name"] = json!("try");
    step1["reason"] = json!("exit 1");
    step1["tries"] = json!([
        {"key": "/body/children/0/body[1]", "task_id": "T-0190f3c2a1b27c3d8e4f5a6b22222222",
         "started_ms": NOW - 20_000, "ended_ms": NOW - 19_000, "reason": "exit 2"},
        {"key": "/body/children/0/body[1]~2", "task_id": "T-0190f3c2a1b27c3d8e4f5a6b33333333",
         "started_ms": NOW - 18_000, "ended_ms": NOW - 16_000, "reason": "exit 1"},
    ]);
    let mut wait = node(
        "/body/children/1/then",
        "/body/children/1/then",
        "wait",
        "waiting",
    );
    wait["name"] = json!("approve");
    json!({
        "id": RUN, "flow": "best-of-2", "flow_hash": "sha256:0123456789abcdef0123",
        "status": "waiting", "input": {"task": "fix it"},
        "created_ms": NOW - 30_000, "updated_ms": NOW - 5_000, "version": 7,
        "nodes": [
            node("/body", "/body", "seq", "waiting"),
            node("/body/children/0", "/body/children/0", "fanout", "passed"),
            step0,
            step1,
            node("/body/children/1", "/body/children/1", "branch", "waiting"),
            wait,
        ],
        "waits": [{"key": "/body/children/1/then", "name": "approve", "open": true,
                   "prompt": "Ship it?", "opened_ms": NOW - 5_000,
                   "deadline_ms": NOW + 300_000, "token": "swt1.abcdef"}],
        "graph": {}
    })
}

#[test]
fn a_run_shows_its_header_then_its_node_tree_then_its_waits() {
    let shown = run_block(&waiting_run(), NOW);
    let expected = format!(
        "id        {RUN}
flow      best-of-2 (sha256:0123456789a…)
status    waiting
created   30s ago
updated   5s ago
duration  30.0s
input     {{\"task\":\"fix it\"}}

⏸ seq  waiting
  ✓ fanout  passed
    ✓ step try[0]  passed  task …11111111  12.3s
    ✗ step try[1]  failed  exit 1
        try 1  task …22222222  1.0s  exit 2
        try 2  task …33333333  2.0s  exit 1
  ⏸ branch  waiting
    ⏸ then: wait approve  waiting

waits:
  approve  open  Ship it?  (ends in 5m 00s)
    answer: swarmd flow answer {RUN} approve '<JSON>'
    token:  swt1.abcdef"
    );
    assert_eq!(shown, expected, "\n{shown}");
}

#[test]
fn items_of_nested_fanouts_and_sub_flows_keep_their_subtrees() {
    let nodes = vec![
        node(
            "/body/body/children/0[0]",
            "/body/body/children/0",
            "call",
            "passed",
        ),
        node(
            "/body/body/children/0[0]>sub/body",
            "/body",
            "step",
            "passed",
        ),
        node(
            "/body/body/children/0[1]",
            "/body/body/children/0",
            "call",
            "running",
        ),
        node("/body/body[0]", "/body/body", "seq", "passed"),
        node("/body/body[1]", "/body/body", "seq", "running"),
        node("/body", "/body", "fanout", "running"),
    ];
    let lines = node_tree(&nodes, NOW);
    assert_eq!(
        lines,
        [
            "▶ fanout  running",
            "  ✓ seq[0]  passed",
            "    ✓ call[0]  passed",
            "      ✓ step  passed",
            "  ▶ seq[1]  running",
            "    ▶ call[1]  running",
        ]
    );
}

#[test]
fn a_wait_name_shared_by_open_waits_is_answered_by_its_quoted_key() {
    let wait = |key: &str| json!({"key": key, "name": "ok", "open": true, "opened_ms": NOW});
    let waits = [wait("/body/body[0]"), wait("/body/body[1]")];
    let lines = wait_lines(&waits[1], &waits, RUN, NOW);
    assert_eq!(
        lines[1],
        format!("    answer: swarmd flow answer {RUN} '/body/body[1]' '<JSON>'")
    );
    assert_eq!(shell_word("it's"), r"'it'\''s'");
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
fn an_answer_prints_the_run_or_only_what_a_wait_token_may_read() {
    let only = json!({"id": RUN, "wait": "approve", "status": "running"});
    assert_eq!(
        answer_block(&only, NOW),
        format!("id      {RUN}\nwait    approve\nstatus  running")
    );
    let view = waiting_run();
    assert_eq!(answer_block(&view, NOW), run_block(&view, NOW));
}
