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
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use swarmd_types::ids::TaskId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use swarmd_client::{ApiClient, Bearer, ClientError, REQUEST_TIMEOUT, is_transient};

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

    let heartbeat = (options.heartbeat_secs > 0).then(|| {
        let client = client.clone();
        let task_id = options.task_id;
        let every = Duration::from_secs(options.heartbeat_secs);
        tokio::spawn(async move { heartbeat_loop(&client, task_id, every).await })
    });
    let outcome = run_command(&options.command, &prompt.prompt).await;
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }

    let (body, ok, code) = match outcome {
        Ok((stdout, status)) => (stdout, status.success(), exit_code(status)),
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

/// The command, with the handle removed from its environment.
fn command_for(argv: &[String]) -> Command {
    let (program, args) = argv
        .split_first()
        .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    let mut command = Command::new(program);
    command
        .args(args)
        .env_remove(HANDLE_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command
}

/// Runs `argv` with `prompt` on stdin; returns its whole stdout and status.
/// Stdin is written while stdout is read, so a command that prints before it
/// has read all its input cannot deadlock.
async fn run_command(argv: &[String], prompt: &str) -> io::Result<(Vec<u8>, ExitStatus)> {
    let mut child = command_for(argv).spawn()?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let prompt = prompt.as_bytes().to_vec();
    let feed = async move {
        if let Some(stdin) = &mut stdin {
            // A command that exits without reading its input is not an error.
            let _ = stdin.write_all(&prompt).await;
        }
        drop(stdin);
    };
    let mut output = Vec::new();
    let read = async {
        match &mut stdout {
            Some(stdout) => stdout.read_to_end(&mut output).await.map(drop),
            None => Ok(()),
        }
    };
    let ((), read) = tokio::join!(feed, read);
    read?;
    let status = child.wait().await?;
    Ok((output, status))
}

fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
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

    #[test]
    fn the_command_never_inherits_the_handle() {
        let command = command_for(&["env".to_owned()]);
        let removed = command
            .as_std()
            .get_envs()
            .any(|(name, value)| name == HANDLE_VAR && value.is_none());
        assert!(removed);
    }

    #[tokio::test]
    async fn command_gets_the_prompt_and_its_status_is_mirrored() {
        let argv = ["sh", "-c", "tr a-z A-Z; exit 3"].map(String::from);
        let (stdout, status) = run_command(&argv, "hello").await.unwrap();
        assert_eq!(stdout, b"HELLO");
        assert_eq!(exit_code(status), 3);
    }

    #[tokio::test]
    async fn command_that_ignores_stdin_still_completes() {
        let argv = ["sh", "-c", "echo done"].map(String::from);
        let big_prompt = "x".repeat(1 << 20);
        let (stdout, status) = run_command(&argv, &big_prompt).await.unwrap();
        assert_eq!(stdout, b"done\n");
        assert!(status.success());
    }
}
