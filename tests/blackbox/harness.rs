//! Runs the real `swarmd` binary: a temp directory with a config and a state
//! directory, `swarmd serve` bound to `127.0.0.1:0`, the address read from
//! its stderr, the admin token read from the state directory. The child is
//! killed when the `Daemon` is dropped.
//!
//! Agents of the test config:
//! - `hold`: a process that writes its worker handle to
//!   `<hold>/<task>.<attempt>.handle` and waits until `<hold>/<task>.done`
//!   exists — the test plays the SubAgent with that handle;
//! - `flaky`: like `hold`, but its first attempt exits 1 at once (a
//!   `blocked` verdict, retried when the policy retries `blocked`);
//! - `cat`: a plain process agent that prints its prompt;
//! - `worker-cat`: `swarmd worker -- /bin/cat`, a SubAgent that fetches its
//!   prompt and submits it over HTTP.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{RequestBuilder, Response};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

/// How long anything that should happen promptly may take.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// A running daemon.
#[derive(Debug)]
pub(crate) struct Daemon {
    child: Child,
    pub base: String,
    pub admin: String,
    pub http: reqwest::Client,
    dir: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Daemon {
    /// Kills the daemon; a failing test also gets the end of its log.
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!("{}", log_tail(&self.log()));
        }
    }
}

/// Lines of a daemon's log a failing test prints.
const LOG_TAIL_LINES: usize = 400;

/// The last [`LOG_TAIL_LINES`] lines of `log`, headed for a failure report.
pub(crate) fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    format!(
        "--- the daemon's log, last {} of {} lines:\n{}",
        lines.len() - start,
        lines.len(),
        lines[start..].join("\n")
    )
}

impl Daemon {
    pub(crate) async fn start() -> Daemon {
        Self::start_with("").await
    }

    /// Starts the daemon with `extra` appended to the test config.
    pub(crate) async fn start_with(extra: &str) -> Daemon {
        Self::start_configured(r#"backend = "sqlite""#, extra).await
    }

    /// Starts the daemon with `store` as the `[store]` table's lines (besides
    /// `state_dir`) and `extra` appended to the test config.
    pub(crate) async fn start_configured(store: &str, extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let hold = dir.path().join("hold");
        std::fs::create_dir_all(&hold).unwrap();
        let config = dir.path().join("swarmd.toml");
        std::fs::write(&config, config_text(dir.path(), &hold, store, extra)).unwrap();

        let mut child = Command::new(BINARY)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
            )
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (_, addr_rx) = follow_stderr(stderr, log.clone());
        let addr = match tokio::time::timeout(PATIENCE, addr_rx).await {
            Ok(Ok(addr)) => addr,
            _ => panic!(
                "swarmd did not report its address; stderr:\n{}",
                log.lock().unwrap().join("\n")
            ),
        };
        let admin = std::fs::read_to_string(dir.path().join("state/admin.token"))
            .unwrap()
            .trim()
            .to_owned();
        Daemon {
            child,
            base: format!("http://{addr}"),
            admin,
            http: reqwest::Client::new(),
            dir,
            log,
        }
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.path().join("swarmd.toml")
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn get(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(bearer)
    }

    pub(crate) fn post(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(bearer)
    }

    /// The `/metrics` scrape as text.
    pub(crate) async fn metrics(&self) -> String {
        let response = self.get("/metrics", &self.admin).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET /metrics");
        response.text().await.unwrap()
    }

    /// Everything the daemon wrote to stderr so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether the child is still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Creates a task as the admin and returns its id.
    pub(crate) async fn spawn(&self, body: Value) -> String {
        let (status, answer) = parts(
            self.post("/v1/tasks", &self.admin)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{answer}\n{}", self.log());
        answer["task_id"].as_str().unwrap().to_owned()
    }

    /// The handle the `hold`/`flaky` process of this attempt wrote.
    pub(crate) async fn handle(&self, task: &str, attempt: u32) -> String {
        let path = self
            .dir
            .path()
            .join(format!("hold/{task}.{attempt}.handle"));
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(handle) = std::fs::read_to_string(&path) {
                return handle.trim().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no handle for {task}/{attempt}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the `hold` process of `task` exit 0.
    pub(crate) fn release(&self, task: &str) {
        std::fs::write(self.dir.path().join(format!("hold/{task}.done")), b"").unwrap();
    }

    /// Waits for the task to finish and returns it.
    pub(crate) async fn finished(&self, task: &str) -> Value {
        let path = format!("/v1/tasks/{task}/wait?timeout_secs=20");
        let (status, body) = parts(self.get(&path, &self.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            matches!(
                body["status"].as_str(),
                Some("pass" | "blocked" | "failed" | "cancelled")
            ),
            "{body}\n{}",
            self.log()
        );
        body
    }

    /// `swarmd token mint --role observer` against this daemon's keys.
    pub(crate) async fn observer_token(&self) -> String {
        let output = Command::new(BINARY)
            .args([
                "token", "mint", "--role", "observer", "--ttl", "600", "--config",
            ])
            .arg(self.config_path())
            .env_clear()
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }
}

fn config_text(dir: &Path, hold: &Path, store: &str, extra: &str) -> String {
    let state = dir.join("state");
    let hold = hold.display();
    let holder = r#"out="$HOLD_DIR/$SWARM_TASK_ID.$SWARM_ATTEMPT"; printf '%s' "$SWARM_WORKER_HANDLE" > "$out.tmp" && mv "$out.tmp" "$out.handle"; "#;
    // Bounded, and ends with the test's directory: a daemon killed by the
    // test leaves its children behind, and they must not outlive the test.
    let wait = r#"i=0; while [ ! -e "$HOLD_DIR/$SWARM_TASK_ID.done" ] && [ -d "$HOLD_DIR" ] && [ "$i" -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"#;
    let fail_first = r#"if [ "$SWARM_ATTEMPT" = 1 ]; then exit 1; fi; "#;
    format!(
        r#"
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 2

[store]
state_dir = "{state}"
{store}

[spawner]
kill_grace_secs = 1

[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", {hold_script}]
stdin = "none"
env = {{ HOLD_DIR = "{hold}", PATH = "/usr/bin:/bin" }}

[agents.flaky]
kind = "process"
program = "/bin/sh"
args = ["-c", {flaky_script}]
stdin = "none"
env = {{ HOLD_DIR = "{hold}", PATH = "/usr/bin:/bin" }}

[agents.cat]
kind = "process"
program = "/bin/cat"

[agents.worker-cat]
kind = "process"
program = "{BINARY}"
args = ["worker", "--", "/bin/cat"]
stdin = "none"
{extra}
"#,
        state = state.display(),
        hold_script = toml_string(&format!("{holder}{wait}")),
        flaky_script = toml_string(&format!("{holder}{fail_first}{wait}")),
    )
}

/// Reads a daemon's stderr into `log`, line by line, until it closes; the
/// receiver gets the address its `listening on http://…` line names.
pub(crate) fn follow_stderr(
    stderr: ChildStderr,
    log: Arc<Mutex<Vec<String>>>,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<String>,
) {
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut addr_tx = Some(addr_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            // The address ends where its characters do: a JSON log line
            // goes on after it.
            if let Some(rest) = line.split("listening on http://").nth(1)
                && let Some(tx) = addr_tx.take()
            {
                let addr: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || ".:[]".contains(*c))
                    .collect();
                let _ = tx.send(addr);
            }
            log.lock().unwrap().push(line);
        }
    });
    (reader, addr_rx)
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// Status and JSON body (`null` when the body is not JSON).
pub(crate) async fn parts(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Asserts an error answer with our `{error, code}` body.
pub(crate) async fn expect_error(response: Response, status: u16, code: &str) {
    let (got, body) = parts(response).await;
    assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    assert!(body["error"].is_string(), "{body}");
}
