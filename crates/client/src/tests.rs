//! Client tests against a small in-process axum server standing in for the
//! daemon's routes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use swarmd_engine::ids::TaskId;

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

#[tokio::test]
async fn task_calls_send_the_token_and_decode_errors() {
    let router = Router::new()
        .route(
            "/v1/tasks",
            post(
                |headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
                    let auth = headers[header::AUTHORIZATION].to_str().unwrap().to_owned();
                    let key = headers
                        .get("idempotency-key")
                        .map(|key| key.to_str().unwrap().to_owned());
                    (
                        StatusCode::CREATED,
                        axum::Json(json!({"echo": body, "auth": auth, "key": key})),
                    )
                },
            ),
        )
        .route(
            "/v1/tasks/{id}",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"error": "unknown task", "code": "not_found"})),
                )
                    .into_response()
            }),
        );
    let url = serve(router).await;
    let client = ApiClient::new(&url, Bearer::new("sws-token\n")).unwrap();
    let request = SpawnRequest {
        agent: "echo".into(),
        prompt: "hi".into(),
        wait_secs: Some(5),
        ..SpawnRequest::default()
    };
    let answer = client.create_task(&request).await.unwrap();
    assert_eq!(
        answer["echo"],
        json!({"agent": "echo", "prompt": "hi", "wait_secs": 5})
    );
    assert_eq!(answer["auth"], "Bearer sws-token");
    assert_eq!(answer["key"], Value::Null);
    let keyed = SpawnRequest {
        metadata: Some(json!({"ticket": 7})),
        policy: Some(json!({"max_attempts": 2})),
        idempotency_key: Some("k-1".into()),
        ..request
    };
    let answer = client.create_task(&keyed).await.unwrap();
    assert_eq!(
        answer["echo"],
        json!({"agent": "echo", "prompt": "hi", "wait_secs": 5,
               "metadata": {"ticket": 7}, "policy": {"max_attempts": 2}})
    );
    assert_eq!(answer["key"], "k-1");

    let id = TaskId::new();
    let error = client.get_task(&id).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("{url}/v1/tasks/{id} answered HTTP 404 not_found: unknown task")
    );
}

#[tokio::test]
async fn tail_prints_each_event_as_one_json_line() {
    let router = Router::new().route(
        "/v1/tasks/{id}/output",
        get(|headers: HeaderMap| async move {
            assert_eq!(headers[header::ACCEPT], "text/event-stream");
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                "id: 1\ndata: {\"type\": \"progress\", \"stage\": \"a\"}\n\n\
                 : ping\n\nid: 2\ndata: {\"type\":\"final\",\"ok\":true}\n\n",
            )
        }),
    );
    let url = serve(router).await;
    let client = ApiClient::new(&url, Bearer::new("sws-x")).unwrap();
    let mut out = Vec::new();
    let count = client
        .tail_output(&TaskId::new(), TailOptions::default(), &mut out)
        .await
        .unwrap();
    assert_eq!(count, 2);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"stage\":\"a\",\"type\":\"progress\"}\n{\"ok\":true,\"type\":\"final\"}\n"
    );
}

#[test]
fn only_http_and_https_urls_are_accepted_and_bearer_is_hidden() {
    for bad in ["ftp://x", "x:1", "https://", "http:// x"] {
        assert!(
            matches!(
                ApiClient::new(bad, Bearer::new("t")),
                Err(ClientError::BadUrl { .. })
            ),
            "{bad}"
        );
    }
    assert!(ApiClient::new("http://127.0.0.1:7700/", Bearer::new("t")).is_ok());
    assert!(ApiClient::new("https://swarmd.example:443", Bearer::new("t")).is_ok());
    assert!(!format!("{:?}", Bearer::new("sws-secret")).contains("secret"));
}
