//! A second launcher for the real `swarmd` binary, for tests that need more
//! than `harness::Daemon` gives: the whole agent configuration written by
//! the test (`@DIR@` stands for the test's temp directory), extra
//! environment (a test-owned `NOTIFY_SOCKET`), the example configuration of
//! the repository, the child's pid, SIGTERM and SIGKILL, and a restart on the
//! same state directory and address. Also a tokio-tungstenite MainAI client
//! and a few HTTP helpers.
//!
//! Every wait is bounded by `harness::PATIENCE`; nothing sleeps to wait for
//! a timer, it polls.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use reqwest::RequestBuilder;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::harness::{PATIENCE, follow_stderr, parts};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// The repository root (the example configuration's paths are relative to it).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the configuration comes from.
#[derive(Debug)]
enum Source {
    /// `<dir>/swarmd.toml`, written from the test's text.
    Written,
    /// `config/swarmd.toml` of the repository, run from the repository root.
    Example,
}

/// A daemon that can be stopped, killed and started again on the same
/// state directory. The child is killed (SIGKILL) when this is dropped.
#[derive(Debug)]
pub(crate) struct Swarmd {
    dir: tempfile::TempDir,
    source: Source,
    env: Vec<(String, String)>,
    /// Where the admin token is read from (`auth.admin_token_file` set by
    /// the test); unset: `<state>/admin.token`.
    admin_file: Option<PathBuf>,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` of the running (or last) child.
    pub base: String,
    pub admin: String,
    pub http: reqwest::Client,
    log: Arc<Mutex<Vec<String>>>,
    /// The task copying the running child's stderr into `log`.
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// How long an exited child's last lines may take to reach `log` (a
/// process the daemon started may hold its stderr open longer).
const LOG_DRAIN: Duration = Duration::from_secs(2);

impl Drop for Swarmd {
    /// Kills the daemon; a failing test also gets the end of its log, so a
    /// failure seen only in CI can be read there.
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
        if std::thread::panicking() {
            eprintln!("{}", crate::harness::log_tail(&self.log()));
        }
    }
}

impl Swarmd {
    /// A daemon whose configuration is a fixed `[server]`/`[store]`/`[spawner]`
    /// head plus `body` (agents, `[defaults]`, `[senior]`, …); `@DIR@` in
    /// `body` is replaced by the temp directory. Not started yet.
    pub(crate) fn new(body: &str) -> Swarmd {
        Swarmd::with_store(body, "backend = \"sqlite\"")
    }

    /// Like `new`, on a fresh PostgreSQL database of the test cluster
    /// (`scripts/pg-env.sh`), the password read from the cluster's file.
    pub(crate) async fn on_postgres(body: &str) -> Swarmd {
        let database = swarmd_postgres::testing::fresh_database().await;
        Swarmd::on_database(body, &database)
    }

    /// Like `new`, on the test database `database` (shared by every daemon
    /// built on it), with a state directory of its own.
    pub(crate) fn on_database(
        body: &str,
        database: &swarmd_postgres::testing::TestDatabase,
    ) -> Swarmd {
        let store = format!(
            "backend = \"postgres\"\nurl = \"{}\"\npassword_file = \"{}\"",
            database.url,
            database.cluster.password_file.display()
        );
        Swarmd::with_store(body, &store)
    }

    /// A daemon whose `[store]` table holds `store` plus the state directory.
    pub(crate) fn with_store(body: &str, store: &str) -> Swarmd {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        let text = format!(
            r#"
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 3

[store]
{store}
state_dir = "{root}/state"

[spawner]
kill_grace_secs = 1
{body}
"#,
            body = body.replace("@DIR@", &root),
        );
        std::fs::write(dir.path().join("swarmd.toml"), text).unwrap();
        Swarmd::with_source(dir, Source::Written)
    }

    /// The repository's `config/swarmd.toml`, run from the repository root,
    /// with `--bind 127.0.0.1:0` and a temp state directory. Not started yet.
    pub(crate) fn example() -> Swarmd {
        Swarmd::with_source(tempfile::tempdir().unwrap(), Source::Example)
    }

    fn with_source(dir: tempfile::TempDir, source: Source) -> Swarmd {
        Swarmd {
            dir,
            source,
            env: Vec::new(),
            admin_file: None,
            child: None,
            base: String::new(),
            admin: String::new(),
            http: reqwest::Client::new(),
            log: Arc::new(Mutex::new(Vec::new())),
            reader: None,
        }
    }

    /// Adds a variable to the daemon's (otherwise cleared) environment.
    pub(crate) fn env(mut self, key: &str, value: &str) -> Swarmd {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Reads the admin token from `path` (the test's `auth.admin_token_file`).
    pub(crate) fn admin_token_file(mut self, path: &Path) -> Swarmd {
        self.admin_file = Some(path.to_owned());
        self
    }

    /// The test's temp directory (`@DIR@`).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts the daemon on a free port and waits for `listening on`.
    pub(crate) async fn start(mut self) -> Swarmd {
        self.launch("127.0.0.1:0").await;
        self
    }

    /// Starts the daemon again on the same state directory and address.
    pub(crate) async fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill the daemon first");
        let addr = self.base.trim_start_matches("http://").to_owned();
        self.launch(&addr).await;
    }

    async fn launch(&mut self, bind: &str) {
        let state = self.dir.path().join("state");
        let mut command = Command::new(BINARY);
        command.arg("serve");
        match self.source {
            Source::Written => {
                command
                    .arg("--config")
                    .arg(self.dir.path().join("swarmd.toml"));
            }
            Source::Example => {
                command
                    .current_dir(repo_root())
                    .args(["--config", "config/swarmd.toml", "--state-dir"])
                    .arg(&state);
            }
        }
        command
            .args(["--bind", bind])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env(
                "RUST_LOG",
                "info,swarmd_server=debug,swarmd_mcp=debug,swarmd_api=debug,swarmd_sessions=debug,swarmd_config=debug,swarmd_engine=debug,swarmd_spawner=debug,swarmd_flow_run=debug",
            )
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let first_try = Instant::now();
        let addr = loop {
            let mut child = command.spawn().unwrap();
            let stderr = child.stderr.take().unwrap();
            let start = {
                let mut lines = self.log.lock().unwrap();
                lines.push(format!("--- swarmd serve --bind {bind}"));
                lines.len()
            };
            let (reader, addr_rx) = follow_stderr(stderr, self.log.clone());
            self.reader = Some(reader);
            self.child = Some(child);
            match tokio::time::timeout(PATIENCE, addr_rx).await {
                Ok(Ok(addr)) => break addr,
                // A restart binds the address it had; a test's client may
                // hold that port as its own end of a connection for a
                // moment after the kill. The daemon said so and exited
                // (its stderr closed): try again, within the patience.
                Ok(Err(_))
                    if bind != "127.0.0.1:0"
                        && first_try.elapsed() < PATIENCE
                        && self.log.lock().unwrap()[start..]
                            .iter()
                            .any(|line| line.contains("Address already in use")) =>
                {
                    if let Some(mut child) = self.child.take() {
                        let _ = child.wait().await;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => panic!("swarmd did not report its address; stderr:\n{}", self.log()),
            }
        };
        self.base = format!("http://{addr}");
        let admin = self
            .admin_file
            .clone()
            .unwrap_or_else(|| state.join("admin.token"));
        self.admin = match std::fs::read_to_string(admin) {
            Ok(token) => token.trim().to_owned(),
            // On PostgreSQL the admin token is in the database.
            Err(_) => self.cli(&["admin-token"]).await,
        };
    }

    /// Runs `swarmd <args> --config <the test's swarmd.toml>` and returns
    /// its stdout, trimmed; panics with its stderr when it fails.
    pub(crate) async fn cli(&self, args: &[&str]) -> String {
        let output = Command::new(BINARY)
            .args(args)
            .arg("--config")
            .arg(self.dir.path().join("swarmd.toml"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "swarmd {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// The running child's pid.
    pub(crate) fn pid(&self) -> i32 {
        let pid = self
            .child
            .as_ref()
            .and_then(Child::id)
            .expect("not running");
        i32::try_from(pid).unwrap()
    }

    /// SIGKILL, then reaps the child.
    pub(crate) async fn kill9(&mut self) {
        let mut child = self.child.take().expect("not running");
        child.start_kill().unwrap();
        let status = tokio::time::timeout(PATIENCE, child.wait())
            .await
            .expect("the killed daemon was not reaped in time")
            .unwrap();
        assert!(!status.success());
    }

    /// Sends SIGTERM (the child keeps running until it drains).
    pub(crate) fn sigterm(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGTERM).unwrap();
    }

    /// Waits for the child to exit and returns its status.
    pub(crate) async fn exited(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("not running");
        let status = tokio::time::timeout(PATIENCE, child.wait())
            .await
            .unwrap_or_else(|_| panic!("the daemon did not exit in time\n{}", self.log()))
            .unwrap();
        self.child = None;
        // Its last lines (what it printed on the way out) are in the log
        // once the reader saw the end of its stderr.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(LOG_DRAIN, reader).await;
        }
        status
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `ws://…` for a path.
    pub(crate) fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    pub(crate) fn get(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(bearer)
    }

    /// The `/metrics` scrape as text; panics unless it answers 200.
    pub(crate) async fn metrics(&self) -> String {
        let response = self
            .get("/metrics", &self.admin)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET /metrics");
        response.text().await.unwrap()
    }

    pub(crate) fn post(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(bearer)
    }

    /// Everything the daemon wrote to stderr so far, over all its runs.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Logs a session in with the admin token.
    pub(crate) async fn login(&self, body: Value) -> Login {
        let (status, answer) = parts(
            self.post("/v1/operators", &self.admin)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        Login {
            sid: answer["sid"].as_str().unwrap().to_owned(),
            token: answer["token"].as_str().unwrap().to_owned(),
        }
    }

    /// Opens the session's socket with its bearer token.
    pub(crate) async fn connect(&self, login: &Login) -> Ws {
        self.dial(login)
            .await
            .unwrap_or_else(|e| panic!("ws connect: {e}\n{}", self.log()))
    }

    /// Opens the session's socket; the error when the upgrade is refused.
    pub(crate) async fn dial(&self, login: &Login) -> Result<Ws, tungstenite::Error> {
        let url = self.ws_url(&format!("/v1/operators/{}/ws", login.sid));
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", login.token).parse().unwrap(),
        );
        let (ws, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Ws { ws })
    }

    /// Creates a task as the admin; the status and the answer.
    pub(crate) async fn create(&self, body: Value) -> (u16, Value) {
        self.create_with(&self.admin, body).await
    }

    /// Creates a task with `bearer`, which must be accepted; its id.
    pub(crate) async fn create_as(&self, bearer: &str, body: Value) -> String {
        let (status, answer) = self.create_with(bearer, body).await;
        assert_eq!(status, 201, "{answer}");
        answer["task_id"].as_str().unwrap().to_owned()
    }

    async fn create_with(&self, bearer: &str, body: Value) -> (u16, Value) {
        parts(
            self.post("/v1/tasks", bearer)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// `GET /v1/tasks/{id}` as the admin.
    pub(crate) async fn task(&self, task: &str) -> Value {
        let (status, body) = parts(
            self.get(&format!("/v1/tasks/{task}"), &self.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the task is terminal and returns it.
    pub(crate) async fn finished(&self, task: &str) -> Value {
        let path = format!("/v1/tasks/{task}/wait?timeout_secs=15");
        let (status, body) = parts(self.get(&path, &self.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            matches!(
                body["status"].as_str(),
                Some("pass" | "blocked" | "failed" | "cancelled")
            ),
            "not finished: {body}\n{}",
            self.log()
        );
        body
    }

    /// `GET /v1/tasks/{id}/output` records as the admin.
    pub(crate) async fn output(&self, task: &str) -> Vec<Value> {
        let path = format!("/v1/tasks/{task}/output");
        let (status, body) = parts(self.get(&path, &self.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        body["records"].as_array().unwrap().clone()
    }
}

/// A logged-in session.
#[derive(Debug, Clone)]
pub(crate) struct Login {
    pub sid: String,
    pub token: String,
}

/// A MainAI's socket speaking JSON frames.
#[derive(Debug)]
pub(crate) struct Ws {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Ws {
    pub(crate) async fn send(&mut self, frame: Value) {
        self.send_message(Message::text(frame.to_string())).await;
    }

    pub(crate) async fn send_message(&mut self, message: Message) {
        self.ws.send(message).await.unwrap();
    }

    /// Sends a frame the daemon may refuse while it is still being written
    /// (it closes the socket, and the rest of the write meets a reset).
    pub(crate) async fn try_send_message(&mut self, message: Message) -> bool {
        self.ws.send(message).await.is_ok()
    }

    /// The next JSON frame; fails on a close or after `PATIENCE`.
    pub(crate) async fn recv(&mut self) -> Value {
        match self.next_within(PATIENCE).await {
            Incoming::Frame(frame) => frame,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// The next frame, a close, or nothing within `wait`.
    pub(crate) async fn next_within(&mut self, wait: Duration) -> Incoming {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(next) = tokio::time::timeout(left, self.ws.next()).await else {
                return Incoming::Nothing;
            };
            match next {
                Some(Ok(Message::Text(text))) => {
                    return Incoming::Frame(serde_json::from_str(text.as_str()).unwrap());
                }
                Some(Ok(Message::Close(frame))) => return Incoming::Closed(frame),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Binary(data))) => panic!("binary frame from swarmd: {data:?}"),
                Some(Err(_)) | None => return Incoming::Closed(None),
            }
        }
    }

    /// The first frame for which `wanted` holds, skipping (and returning)
    /// the others.
    pub(crate) async fn recv_until(
        &mut self,
        wanted: impl Fn(&Value) -> bool,
    ) -> (Value, Vec<Value>) {
        let mut skipped = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_within(left).await {
                Incoming::Frame(frame) if wanted(&frame) => return (frame, skipped),
                Incoming::Frame(frame) => skipped.push(frame),
                other => panic!("wanted frame not received ({other:?}); skipped: {skipped:#?}"),
            }
        }
    }

    /// The next frame of `kind`, skipping others.
    pub(crate) async fn recv_type(&mut self, kind: &str) -> Value {
        self.recv_until(|f| f["type"] == kind).await.0
    }

    /// The `task_done` of `task`.
    pub(crate) async fn done(&mut self, task: &str) -> Value {
        self.recv_until(|f| f["type"] == "task_done" && f["task_id"] == task)
            .await
            .0
    }
}

/// What `Ws::next_within` saw.
#[derive(Debug)]
pub(crate) enum Incoming {
    Frame(Value),
    Closed(Option<CloseFrame>),
    Nothing,
}

/// `spawn_task` with `delegate = true`.
pub(crate) fn delegate_frame(req_id: &str, agent: &str, prompt: &str) -> Value {
    json!({"type": "spawn_task", "req_id": req_id, "agent": agent, "prompt": prompt,
           "delegate": true})
}

/// Whether a process is gone (no `/proc` entry, or a zombie waiting for
/// its reaper).
pub(crate) fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Polls `check` every 20 ms until it holds, failing after `PATIENCE`.
pub(crate) async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a pid a process agent wrote to `path`, waiting for it to appear.
pub(crate) async fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    eventually(&format!("pid file {}", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.unwrap()
}
