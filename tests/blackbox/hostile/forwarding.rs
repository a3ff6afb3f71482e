//! Hostile clients of cluster forwarding: two nodes, a live task node A
//! holds, and a client of node B that sends paths which only normalise to
//! another route (`/v1/worker/%2e%2e/tasks`), a cancel whose task id is
//! percent-encoded, and forged or unknown credentials. Node B answers each
//! itself (404, 400 or 401) and forwards nothing; only the exact routes
//! with a credential B verified reach node A.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster::{Cluster, forwarded};
use crate::daemon::{Swarmd, delegate_frame};
use crate::harness::{PATIENCE, parts};

/// The header that names the node that served a forwarded request.
const FORWARDED_TO: &str = "x-swarmd-forwarded-to";

/// Delegated to the session holding `main-ai`: its attempt stays live until
/// the SubAgent the test plays answers.
const CODER: &str = r#"
[agents.coder]
kind = "operator"
operator_role = "main-ai"
"#;

/// One HTTP/1.1 request written byte for byte (an HTTP client would
/// normalise the path first); the status and the lower-cased head.
async fn raw(node: &Swarmd, method: &str, path: &str, bearer: &str, body: &str) -> (u16, String) {
    let addr = node.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("no answer")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text}"));
    (status, head)
}

/// A task delegated on node A to a MainAI connected there, live until
/// answered, and the `spawn` frame with its SubAgent's credentials.
async fn live_delegated(a: &Swarmd) -> (String, Value, crate::daemon::Ws) {
    let login = a.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = a.connect(&login).await;
    ws.send(delegate_frame("r-1", "coder", "fix it")).await;
    let accepted = ws.recv().await;
    assert_eq!(accepted["type"], "task_accepted", "{accepted}");
    let task = accepted["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    (task, spawn, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_only_normalises_to_a_route_is_answered_where_it_arrives() {
    let cluster = Cluster::start(2, CODER).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let (task, spawn, _ws) = live_delegated(a).await;
    let handle = spawn["worker_handle"].as_str().unwrap();
    let token = spawn["capability_token"].as_str().unwrap();
    let child = json!({"agent": "coder", "prompt": "child"}).to_string();

    // Each would reach `/v1/tasks` (or another route) on node A once a
    // client normalised it; node B serves none of them as a route and
    // forwards none.
    let hex = task.trim_start_matches("T-");
    let encoded_cancel = format!("/v1/tasks/%54-{hex}/cancel");
    let tries: [(&str, &str, &str); 8] = [
        ("GET", "/v1/worker/%2e%2e/tasks", handle),
        ("POST", "/v1/worker/%2e%2e/tasks", handle),
        ("POST", "/v1/worker/%2E%2E/tasks", token),
        ("GET", "/v1/worker/../tasks", handle),
        ("GET", "/v1/worker/./prompt", handle),
        ("GET", "/v1/worker/%2fprompt", handle),
        ("POST", "/v1/worker/result/..", token),
        ("POST", &encoded_cancel, &b.admin),
    ];
    for (method, path, bearer) in tries {
        let (status, head) = raw(b, method, path, bearer, &child).await;
        assert!(
            matches!(status, 400 | 404),
            "{method} {path}: {status}\n{head}"
        );
        assert!(!head.contains(FORWARDED_TO), "{method} {path}:\n{head}");
    }
    assert_eq!(forwarded(b).await, 0);
    // Nothing created a task, and A's task still waits for its SubAgent.
    let listed = a.get("/v1/tasks", &a.admin).send().await.unwrap();
    let (_, listed) = parts(listed).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(a.task(&task).await["status"], "running");

    // The exact route is forwarded.
    let (status, head) = raw(b, "GET", "/v1/worker/prompt", handle, "").await;
    assert_eq!(status, 200, "{head}");
    assert!(head.contains(FORWARDED_TO), "{head}");
    assert_eq!(forwarded(b).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_the_receiving_node_cannot_verify_is_refused_there() {
    let cluster = Cluster::start(2, CODER).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let (task, spawn, _ws) = live_delegated(a).await;
    let token = spawn["capability_token"].as_str().unwrap();

    // The token's claims name A's task; its tag is not the signature.
    let (head, tag) = token.rsplit_once('.').unwrap();
    let first = if tag.starts_with('A') { 'B' } else { 'A' };
    let forged = format!("{head}.{first}{}", &tag[1..]);
    let cancel = format!("/v1/tasks/{task}/cancel");
    let unknown_secret = format!("sws-{}", "0".repeat(64));
    let result = r#"{"value":"forged"}"#;
    let child = r#"{"agent":"coder","prompt":"child"}"#;
    let tries: [(&str, &str, &str, &str); 5] = [
        ("GET", "/v1/worker/prompt", &forged, ""),
        ("POST", "/v1/worker/result", &forged, result),
        ("POST", "/v1/tasks", &forged, child),
        ("POST", &cancel, &forged, "{}"),
        ("POST", &cancel, &unknown_secret, "{}"),
    ];
    for (method, path, bearer, body) in tries {
        let (status, head) = raw(b, method, path, bearer, body).await;
        assert!(
            matches!(status, 401 | 403),
            "{method} {path}: {status}\n{head}"
        );
        assert!(!head.contains(FORWARDED_TO), "{method} {path}:\n{head}");
    }
    assert_eq!(forwarded(b).await, 0);
    assert_eq!(a.task(&task).await["status"], "running");

    // The real token is verified, then forwarded to the owner.
    let (status, head) = raw(b, "GET", "/v1/worker/prompt", token, "").await;
    assert_eq!(status, 200, "{head}");
    assert!(head.contains(FORWARDED_TO), "{head}");
}
