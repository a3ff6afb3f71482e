//! The worker wrapper's tests against a small in-process axum server
//! standing in for the daemon's worker routes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use serde_json::json;
use swarmd_client::{Bearer, ClientError};
use swarmd_types::ids::TaskId;

use super::*;

const HANDLE: &str = "wh-0123456789abcdef0123456789abcdef";

/// What the fake daemon saw on `submit`.
#[derive(Debug, Default, Clone)]
struct Submitted {
    query: HashMap<String, String>,
    content_type: String,
    idempotency_key: String,
    body: String,
}

type Seen = Arc<Mutex<Vec<Submitted>>>;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {HANDLE}"))
}

async fn worker_daemon() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route(
            "/v1/worker/prompt",
            get(|headers: HeaderMap| async move {
                if !authorized(&headers) {
                    return (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "no", "code": "unauthorized"})));
                }
                (StatusCode::OK, axum::Json(json!({"task_id": "T-x", "attempt": 1, "agent": "a", "prompt": "hello world", "deadline": 0})))
            }),
        )
        .route(
            "/v1/worker/submit",
            post(
                |State(seen): State<Seen>,
                 Query(query): Query<HashMap<String, String>>,
                 headers: HeaderMap,
                 body: String| async move {
                    let header = |name: &str| {
                        headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
                    };
                    seen.lock().unwrap().push(Submitted {
                        query,
                        content_type: header("content-type"),
                        idempotency_key: header("idempotency-key"),
                        body,
                    });
                    axum::Json(json!({"accepted": true}))
                },
            ),
        )
        .with_state(seen.clone());
    (serve(router).await, seen)
}

fn options(base_url: &str, task_id: Option<TaskId>, command: &[&str]) -> WorkerOptions {
    WorkerOptions {
        base_url: base_url.to_owned(),
        handle: Bearer::new(HANDLE),
        task_id,
        heartbeat_secs: 0,
        command: command.iter().map(|arg| (*arg).to_owned()).collect(),
    }
}

#[tokio::test]
async fn worker_feeds_the_prompt_and_submits_stdout() {
    let (url, seen) = worker_daemon().await;
    let task = TaskId::new();
    let code = run_worker(&options(&url, Some(task), &["sh", "-c", "tr a-z A-Z"]))
        .await
        .unwrap();
    assert_eq!(code, 0);
    let submitted = seen.lock().unwrap()[0].clone();
    assert_eq!(submitted.body, "HELLO WORLD");
    assert_eq!(submitted.query["ok"], "true");
    assert_eq!(submitted.query["task_id"], task.to_string());
    assert!(submitted.content_type.starts_with("text/plain"));
    assert!(!submitted.idempotency_key.is_empty());
}

#[tokio::test]
async fn worker_mirrors_failure_and_sends_json_as_json() {
    let (url, seen) = worker_daemon().await;
    let code = run_worker(&options(
        &url,
        None,
        &["sh", "-c", "echo '{\"why\": 1}'; exit 4"],
    ))
    .await
    .unwrap();
    assert_eq!(code, 4);
    let submitted = seen.lock().unwrap()[0].clone();
    assert_eq!(submitted.query["ok"], "false");
    assert!(!submitted.query.contains_key("task_id"));
    assert_eq!(submitted.content_type, "application/json");
}

#[tokio::test]
async fn worker_reports_a_missing_command_as_blocked() {
    let (url, seen) = worker_daemon().await;
    let code = run_worker(&options(&url, None, &["/nonexistent/swarmd-test-cmd"]))
        .await
        .unwrap();
    assert_eq!(code, 127);
    let submitted = seen.lock().unwrap()[0].clone();
    assert_eq!(submitted.query["ok"], "false");
    assert!(submitted.body.contains("cannot run"), "{}", submitted.body);
}

#[tokio::test]
async fn worker_with_a_bad_handle_does_not_run_the_command() {
    let (url, seen) = worker_daemon().await;
    let mut options = options(&url, None, &["sh", "-c", "exit 0"]);
    options.handle = Bearer::new("wh-wrong");
    let error = run_worker(&options).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Status { status: 401, code: Some(code), .. } if code == "unauthorized"),
        "{error}"
    );
    assert!(seen.lock().unwrap().is_empty());
}
