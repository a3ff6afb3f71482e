//! Client tests against a small in-process axum server standing in for the
//! daemon's routes.

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use swarmd_types::ids::TaskId;

use super::*;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
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

#[tokio::test]
async fn a_401_names_where_the_credential_was_read_from_and_nothing_else_does() {
    let router = Router::new()
        .route(
            "/v1/tasks",
            get(|| async {
                let body =
                    json!({"error": "missing or invalid credential", "code": "unauthorized"});
                (StatusCode::UNAUTHORIZED, axum::Json(body))
            }),
        )
        .route(
            "/v1/agents",
            get(|| async {
                let body = json!({"error": "not allowed", "code": "forbidden"});
                (StatusCode::FORBIDDEN, axum::Json(body))
            }),
        );
    let url = serve(router).await;
    let bearer = Bearer::new("sws-secret").read_from("--token");
    let client = ApiClient::new(&url, bearer).unwrap();
    let refused = client.list_tasks(&TaskQuery::default()).await.unwrap_err();
    assert!(
        matches!(&refused, ClientError::Status { status: 401, .. }),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.ends_with("missing or invalid credential (credential from --token)"),
        "{message}"
    );
    assert!(!message.contains("sws-secret"), "{message}");
    let forbidden = client.list_agents().await.unwrap_err().to_string();
    assert!(!forbidden.contains("credential from"), "{forbidden}");
    let unnamed = ApiClient::new(&url, Bearer::new("sws-secret")).unwrap();
    let refused = unnamed.list_tasks(&TaskQuery::default()).await.unwrap_err();
    assert!(
        refused.to_string().ends_with("invalid credential"),
        "{refused}"
    );
}

#[test]
fn a_base_url_needs_a_scheme_a_host_and_a_valid_port() {
    assert_eq!(check_base_url("http://127.0.0.1:7700"), Ok(()));
    assert_eq!(check_base_url("https://swarm.example.com/api"), Ok(()));
    let reason = |url: &str| check_base_url(url).unwrap_err();
    assert!(reason("http://127.0.0.1:99999").contains("invalid port number"));
    assert!(reason("notaurl").contains("expected http://host:port"));
    assert!(reason("ftp://x").ends_with("not ftp://"));
    assert!(reason("http://").contains("expected http://host:port"));
    assert!(reason("http://a b").contains("without spaces"));
}

#[test]
fn only_http_and_https_urls_are_accepted_and_bearer_is_hidden() {
    for bad in [
        "ftp://x",
        "x:1",
        "https://",
        "http:// x",
        "http://127.0.0.1:99999",
    ] {
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
    let read = Bearer::new("sws-secret").read_from("--token");
    assert!(!format!("{read:?}").contains("secret"));
}

#[tokio::test]
async fn a_wait_past_the_daemons_300_s_asks_for_300_and_follows_a_spawn() {
    use std::sync::{Arc, Mutex};
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = asked.clone();
    let id = TaskId::new().to_string();
    let created = id.clone();
    let router = Router::new()
        .route(
            "/v1/tasks",
            post(move || async move {
                (
                    StatusCode::CREATED,
                    axum::Json(json!({"task_id": created, "status": "queued"})),
                )
            }),
        )
        .route(
            "/v1/tasks/{id}/wait",
            get(move |uri: axum::http::Uri| async move {
                seen.lock()
                    .unwrap()
                    .push(uri.query().unwrap_or("").to_owned());
                // Answered at once and unfinished: a daemon cutting the
                // wait short, so the client does not ask again.
                axum::Json(json!({"status": "running"}))
            }),
        );
    let url = serve(router).await;
    let client = ApiClient::new(&url, Bearer::new("sws-x")).unwrap();
    let task: TaskId = id.parse().unwrap();
    let waited = client.wait_task(&task, 1_000).await.unwrap();
    assert_eq!(waited["status"], "running");
    assert_eq!(*asked.lock().unwrap(), ["timeout_secs=300"]);

    // A spawn that waits longer than the daemon holds its request waits
    // on for the rest; one within it does not.
    asked.lock().unwrap().clear();
    let request = SpawnRequest {
        agent: "echo".into(),
        prompt: "hi".into(),
        wait_secs: Some(1_000),
        ..SpawnRequest::default()
    };
    client.create_task(&request).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1);
    let request = SpawnRequest {
        wait_secs: Some(60),
        ..request
    };
    client.create_task(&request).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1);
}
