//! `swarmd worker -- CMD ARGS…`: turns any command into a SubAgent.
//!
//! It fetches the prompt with the worker handle, runs the command with the
//! prompt on stdin, and submits the command's stdout with `ok` = exit status
//! 0. The handle is removed from the command's environment, so the command
//! cannot act as the worker on its own. While the command runs, heartbeats
//! keep the attempt's lease alive; a worker given a token rather than a
//! handle adopts the fresh token a heartbeat returns (a handle's expiry
//! moves by itself). Stdout that is not UTF-8 is submitted with its invalid
//! bytes replaced by U+FFFD, since results are text or JSON.

use std::io;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use swarmd_types::ids::TaskId;

use swarmd_client::{ApiClient, Bearer, ClientError, REQUEST_TIMEOUT, is_transient};

use crate::command::{MAX_STDOUT, Ran, exit_code, run_command};

/// Environment variable holding the handle; never passed to the command.
pub(crate) const HANDLE_VAR: &str = "SWARM_WORKER_HANDLE";

/// Submit attempts before giving up (transport errors and 502/503/504 only).
const SUBMIT_ATTEMPTS: u32 = 3;
const SUBMIT_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What `swarmd worker` runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The daemon's base URL (`SWARM_BASE_URL`).
    pub base_url: String,
    /// The worker handle or token (`SWARM_WORKER_HANDLE`).
    pub handle: Bearer,
    /// The task (`SWARM_TASK_ID`); unset: the one the handle is bound to.
    pub task_id: Option<TaskId>,
    /// Seconds between heartbeats while the command runs; 0 disables them.
    pub heartbeat_secs: u64,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// The prompt route's answer; only the prompt is used.
#[derive(Debug, Deserialize)]
struct PromptResponse {
    prompt: String,
}

/// Runs the whole worker cycle and returns the exit code to mirror: the
/// command's code, 128 + signal if it was killed, 126/127 if it could not
/// start (the failure is still submitted with `ok=false`).
///
/// # Errors
/// `Request`/`Status` if the prompt cannot be fetched (the command is not run)
/// or the result cannot be submitted.
pub async fn run_worker(options: &WorkerOptions) -> Result<u8, ClientError> {
    let client = ApiClient::new(&options.base_url, options.handle.clone())?;
    let task_query = options.task_id.map(|id| format!("task_id={id}"));
    let prompt_path = match &task_query {
        Some(query) => format!("/v1/worker/prompt?{query}"),
        None => "/v1/worker/prompt".to_owned(),
    };
    let url = client.url(&prompt_path);
    let prompt: PromptResponse = serde_json::from_value(
        client
            .send_json(client.get(&prompt_path).timeout(REQUEST_TIMEOUT), &url)
            .await?,
    )
    .map_err(|error| ClientError::Decode {
        url,
        reason: error.to_string(),
    })?;

    // The heartbeats end when the attempt does (cancelled, or decided
    // elsewhere), and the command with them.
    let ended = async {
        if options.heartbeat_secs == 0 {
            return std::future::pending().await;
        }
        let every = Duration::from_secs(options.heartbeat_secs);
        heartbeat_loop(&client, options.task_id, every).await;
    };
    let outcome = run_command(&options.command, &prompt.prompt, ended).await;

    let (body, ok, code) = match outcome {
        Ok(Ran::Exited { stdout, status }) => (stdout, status.success(), exit_code(status)),
        Ok(Ran::TooLarge) => {
            let message = format!(
                "swarmd worker: `{}` wrote more than {MAX_STDOUT} bytes to stdout; it was stopped",
                options.command.join(" ")
            );
            eprintln!("{message}");
            (message.into_bytes(), false, 1)
        }
        Ok(Ran::Ended) => {
            eprintln!(
                "swarmd worker: the attempt ended (cancelled, or decided elsewhere); \
                 the command was stopped"
            );
            return Ok(1);
        }
        Err(error) => {
            let code = if error.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let message = format!(
                "swarmd worker: cannot run `{}`: {error}",
                options.command.join(" ")
            );
            eprintln!("{message}");
            (message.into_bytes(), false, code)
        }
    };
    submit(&client, task_query.as_deref(), utf8_lossy(body), ok).await?;
    Ok(code)
}

/// `bytes` as UTF-8 text, invalid sequences replaced by U+FFFD (with a
/// warning on stderr), so that a result is never refused for its encoding.
fn utf8_lossy(bytes: Vec<u8>) -> Vec<u8> {
    match String::from_utf8(bytes) {
        Ok(text) => text.into_bytes(),
        Err(error) => {
            eprintln!("swarmd worker: stdout is not UTF-8; invalid bytes are submitted as U+FFFD");
            String::from_utf8_lossy(error.as_bytes())
                .into_owned()
                .into_bytes()
        }
    }
}

/// `POST /v1/worker/submit`: JSON stdout is sent as JSON, anything else as text.
async fn submit(
    client: &ApiClient,
    task_query: Option<&str>,
    body: Vec<u8>,
    ok: bool,
) -> Result<(), ClientError> {
    let path = match task_query {
        Some(query) => format!("/v1/worker/submit?ok={ok}&{query}"),
        None => format!("/v1/worker/submit?ok={ok}"),
    };
    let url = client.url(&path);
    let content_type = match serde_json::from_slice::<Value>(&body) {
        Ok(_) => "application/json",
        Err(_) => "text/plain; charset=utf-8",
    };
    // The same key on every try: a retry after a lost reply replays it.
    let key = uuid::Uuid::new_v4().to_string();
    let mut attempt = 1;
    loop {
        let request = client
            .post(&path)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .header("Idempotency-Key", key.as_str())
            .body(body.clone())
            .timeout(REQUEST_TIMEOUT);
        let error = match client.send(request, &url).await {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let retryable = match &error {
            ClientError::Request { .. } => true,
            ClientError::Status { status, .. } => {
                reqwest::StatusCode::from_u16(*status).is_ok_and(is_transient)
            }
            _ => false,
        };
        if !retryable || attempt >= SUBMIT_ATTEMPTS {
            return Err(error);
        }
        tracing::warn!(%error, attempt, "submit failed; retrying");
        attempt += 1;
        tokio::time::sleep(SUBMIT_RETRY_DELAY).await;
    }
}

/// Heartbeats every `every` until the daemon answers that the attempt is
/// over: `409 attempt_superseded` or `410 task_terminal` (cancelled, or
/// decided elsewhere), never another `409` or `410`. The answer's clock is
/// never compared with this machine's, which may differ.
async fn heartbeat_loop(client: &ApiClient, task_id: Option<TaskId>, every: Duration) {
    let body = match task_id {
        Some(id) => serde_json::json!({ "task_id": id.to_string() }),
        None => serde_json::json!({}),
    };
    let url = client.url("/v1/worker/heartbeat");
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        ticks.tick().await;
        let request = client
            .post("/v1/worker/heartbeat")
            .json(&body)
            .timeout(REQUEST_TIMEOUT);
        let answer = match client.send(request, &url).await {
            Ok(response) => response.json::<Value>().await.ok(),
            // Only these two say the attempt is over: a `410 node_fenced`
            // is the node going away, and the attempt goes on elsewhere.
            Err(ClientError::Status {
                code: Some(code), ..
            }) if code == "attempt_superseded" || code == "task_terminal" => return,
            Err(error) => {
                tracing::warn!(%error, "heartbeat failed");
                None
            }
        };
        if let Some(token) = answer.as_ref().and_then(fresh_token)
            && !client.sends_handle()
        {
            client.set_bearer(token);
        }
    }
}

/// The fresh token in a heartbeat's answer, if it carries one.
fn fresh_token(answer: &Value) -> Option<Bearer> {
    answer
        .get("token")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .map(Bearer::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        assert_eq!(
            utf8_lossy(b"ok \xe2\x9c\x93".to_vec()),
            "ok \u{2713}".as_bytes()
        );
        assert_eq!(
            utf8_lossy(b"\xff\xfebin".to_vec()),
            "\u{fffd}\u{fffd}bin".as_bytes()
        );
    }

    #[test]
    fn a_worker_on_a_token_adopts_the_heartbeats_fresh_token() {
        let client = ApiClient::new("http://127.0.0.1:1", Bearer::new("swc1.old")).unwrap();
        let answer = serde_json::json!({"deadline": 1, "token": "swc1.new", "handle_expires": 2});
        let token = fresh_token(&answer).unwrap();
        assert!(!client.sends_handle());
        let clone = client.clone();
        client.set_bearer(token);
        let request = clone.post("/x").build().unwrap();
        assert_eq!(request.headers()["authorization"], "Bearer swc1.new");
        assert!(fresh_token(&serde_json::json!({"deadline": 1, "handle_expires": 2})).is_none());
        let handle = ApiClient::new("http://127.0.0.1:1", Bearer::new("wh-0123")).unwrap();
        assert!(handle.sends_handle());
    }

    #[tokio::test]
    async fn heartbeats_end_when_the_daemon_says_the_attempt_is_over() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        let beats = Arc::new(AtomicU32::new(0));
        let counted = beats.clone();
        let router = axum::Router::new().route(
            "/v1/worker/heartbeat",
            axum::routing::post(move || async move {
                // A fenced node's 410 goes on; the third heartbeat finds
                // the task cancelled.
                let (status, code) = match counted.fetch_add(1, Ordering::SeqCst) {
                    0 => (axum::http::StatusCode::OK, None),
                    1 => (axum::http::StatusCode::GONE, Some("node_fenced")),
                    _ => (axum::http::StatusCode::GONE, Some("task_terminal")),
                };
                let body = match code {
                    None => serde_json::json!({"deadline": 1, "handle_expires": 2}),
                    Some(code) => serde_json::json!({"error": code, "code": code}),
                };
                (status, axum::Json(body))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        let client = ApiClient::new(&url, Bearer::new("wh-x")).unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            heartbeat_loop(&client, None, Duration::from_millis(50)),
        )
        .await
        .expect("the loop ends at the 410");
        assert_eq!(beats.load(Ordering::SeqCst), 3);
    }
}
