//! Credentials, ownership and state files against the real binary: a
//! worker's sub-tasks stop with its attempt, only a task's owner (or the
//! admin) cancels it on either surface, no credential reaches the log even
//! at `RUST_LOG=trace`, and every state file is private whatever the umask
//! and the state directory's mode.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};

use crate::daemon::{Login, Swarmd, Ws, delegate_frame};
use crate::harness::{expect_error, parts};

/// `planner` is delegated to the session holding `main-ai` and may create
/// sub-tasks; its blocked attempts are retried once. `cat` prints its prompt.
const AGENTS: &str = r#"
[agents.planner]
kind = "operator"
operator_role = "main-ai"
allow_subtasks = true

[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// Sends a delegated `spawn_task` and returns (task id, the `spawn` frame).
async fn delegate(ws: &mut Ws, req_id: &str, agent: &str, body: Value) -> (String, Value) {
    let mut frame = delegate_frame(req_id, agent, "plan it");
    if let (Value::Object(frame), Value::Object(extra)) = (&mut frame, body) {
        frame.extend(extra);
    }
    ws.send(frame).await;
    let accepted = ws
        .recv_until(|f| f["type"] == "task_accepted" && f["req_id"] == req_id)
        .await
        .0;
    let task = accepted["task_id"].as_str().unwrap().to_owned();
    let spawn = ws
        .recv_until(|f| f["type"] == "spawn" && f["task_id"] == task.as_str())
        .await
        .0;
    (task, spawn)
}

fn handle_of(spawn: &Value) -> String {
    spawn["worker_handle"].as_str().unwrap().to_owned()
}

/// `POST /v1/tasks` with a worker's credential.
async fn sub_task(sw: &Swarmd, bearer: &str) -> reqwest::Response {
    sw.post("/v1/tasks", bearer)
        .json(&json!({"agent": "cat", "prompt": "child"}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_worker_creates_sub_tasks_only_while_its_attempt_is_open() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    let (task, spawn) = delegate(&mut ws, "p-1", "planner", json!({})).await;
    let handle = handle_of(&spawn);
    let token = spawn["capability_token"].as_str().unwrap().to_owned();
    let (status, child) = parts(sub_task(&sw, &handle).await).await;
    assert_eq!(status, 201, "{child}\n{}", sw.log());
    let child = sw.task(child["task_id"].as_str().unwrap()).await;
    assert_eq!(
        (&child["parent"], &child["session"]),
        (&json!(task), &json!(login.sid)),
        "the sub-task inherits the parent's owning session: {child}"
    );

    let (status, cancelled) = parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &login.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &cancelled["status"]), (200, &json!("cancelled")));
    expect_error(sub_task(&sw, &handle).await, 410, "task_terminal").await;
    expect_error(sub_task(&sw, &token).await, 410, "task_terminal").await;
}

#[tokio::test]
async fn a_superseded_attempt_creates_no_sub_task() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    let policy = json!({"policy": {"max_attempts": 2, "retry_on": ["blocked"],
                                   "retry_backoff_ms": 0}});
    let (task, first) = delegate(&mut ws, "p-2", "planner", policy).await;
    let old = handle_of(&first);

    let (status, body) = parts(
        sw.post("/v1/worker/result", &old)
            .json(&json!({"task_id": task, "value": "cannot", "ok": false}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let second = ws
        .recv_until(|f| f["type"] == "spawn" && f["task_id"] == task.as_str() && f["attempt"] == 2)
        .await
        .0;
    expect_error(sub_task(&sw, &old).await, 409, "attempt_superseded").await;
    let (status, body) = parts(sub_task(&sw, &handle_of(&second)).await).await;
    assert_eq!(status, 201, "the open attempt still may: {body}");
}

/// A session's view of `task`'s cancel over HTTP: status and body.
async fn http_cancel(sw: &Swarmd, bearer: &str, task: &str) -> (u16, Value) {
    parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), bearer)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// A task created by `login` over HTTP that runs until cancelled.
async fn owned_task(sw: &Swarmd, login: &Login) -> String {
    sw.create_as(&login.token, json!({"agent": "planner", "prompt": "hold"}))
        .await
}

#[tokio::test]
async fn only_the_owner_or_the_admin_cancels_a_task_over_http() {
    let sw = Swarmd::new(AGENTS).start().await;
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let other = sw.login(json!({"roles": ["other"]})).await;

    let task = owned_task(&sw, &owner).await;
    // Another session's task is an unknown task to it.
    let (status, body) = http_cancel(&sw, &other.token, &task).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    // The refused cancel changed nothing (the task may still be queued on
    // a loaded machine).
    let view = sw.task(&task).await;
    assert!(
        matches!(view["status"].as_str(), Some("running" | "queued")),
        "{view}"
    );
    let (status, body) = http_cancel(&sw, &other.token, "T-00000000000000000000000000").await;
    assert!(matches!(status, 400 | 404), "{status} {body}");
    let observer = sw_observer(&sw).await;
    let (status, _) = http_cancel(&sw, &observer, &task).await;
    assert_eq!(status, 403);

    let (status, body) = http_cancel(&sw, &owner.token, &task).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("cancelled")),
        "{body}"
    );
    let task = owned_task(&sw, &owner).await;
    let (status, body) = http_cancel(&sw, &sw.admin, &task).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("cancelled")),
        "{body}"
    );
}

/// An observer token for the daemon's keys.
async fn sw_observer(sw: &Swarmd) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args([
            "token", "mint", "--role", "observer", "--ttl", "600", "--config",
        ])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn only_the_owner_cancels_a_task_over_the_socket() {
    let sw = Swarmd::new(AGENTS).start().await;
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let other = sw.login(json!({"roles": ["other"]})).await;
    let mut owner_ws = sw.connect(&owner).await;
    let mut other_ws = sw.connect(&other).await;

    let (task, _) = delegate(&mut owner_ws, "c-1", "planner", json!({})).await;
    other_ws
        .send(json!({"type": "cancel_task", "req_id": "x-1", "task_id": task}))
        .await;
    let refused = other_ws.recv_type("error").await;
    assert_eq!(
        (&refused["code"], &refused["req_id"]),
        (&json!("not_found"), &json!("x-1")),
        "{refused}"
    );
    assert_eq!(sw.task(&task).await["status"], "running");

    owner_ws
        .send(json!({"type": "cancel_task", "req_id": "x-2", "task_id": task}))
        .await;
    let done = owner_ws.done(&task).await;
    assert_eq!(done["status"], "cancelled", "{done}");
}

#[tokio::test]
async fn no_credential_reaches_the_log_even_at_trace() {
    let sw = Swarmd::new(AGENTS).env("RUST_LOG", "trace").start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    let (task, spawn) = delegate(&mut ws, "t-1", "planner", json!({})).await;
    let handle = handle_of(&spawn);
    let token = spawn["capability_token"].as_str().unwrap().to_owned();
    let (status, _) = parts(
        sw.get(&format!("/v1/worker/prompt?task_id={task}"), &handle)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = parts(
        sw.post("/v1/worker/heartbeat", &token)
            .json(&json!({"task_id": task}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = parts(
        sw.post(&format!("/v1/worker/submit?task_id={task}"), &handle)
            .body("done")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    ws.done(&task).await;
    let log = sw.log();
    assert!(
        log.contains("TRACE") || log.contains("trace"),
        "the daemon did not log at trace:\n{log}"
    );
    for secret in [
        handle.as_str(),
        &handle[3..],
        token.as_str(),
        login.token.as_str(),
        &login.token[4..],
        sw.admin.as_str(),
        "wh-",
        "swc1",
        "sws-",
    ] {
        assert!(
            !log.contains(secret),
            "the log holds `{secret}`:\n{}",
            log.lines()
                .filter(|l| l.contains(secret))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Every file under `dir`, recursively, with its mode.
fn modes(dir: &Path, found: &mut Vec<(String, u32)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        found.push((entry.path().display().to_string(), mode));
        if entry.file_type().unwrap().is_dir() {
            modes(&entry.path(), found);
        }
    }
}

#[tokio::test]
async fn state_files_are_private_in_a_pre_existing_open_directory() {
    // The usual login umask, which would make new files 0644.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let sw = Swarmd::new(AGENTS);
    let state = sw.dir().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sw = sw.start().await;
    // Something in every store: a session, a task with an output spilled
    // to a blob.
    sw.login(json!({"roles": ["main-ai"]})).await;
    let (status, body) = sw
        .create(json!({"agent": "cat", "prompt": "x".repeat(300_000), "wait_secs": 20}))
        .await;
    assert_eq!((status, &body["status"]), (201, &json!("pass")), "{body}");

    let mut found = Vec::new();
    modes(&state, &mut found);
    let names: Vec<_> = found.iter().map(|(p, _)| p.as_str()).collect();
    for needed in [
        "swarmd.db",
        "swarmd.db-wal",
        "keys.json",
        "admin.token",
        "blobs/",
    ] {
        assert!(
            names.iter().any(|n| n.contains(needed)),
            "no {needed} in {names:?}"
        );
    }
    let dir_mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "the state directory is made private");
    for (path, mode) in found {
        assert_eq!(mode & 0o077, 0, "{path} is {mode:o}");
    }
}

#[tokio::test]
async fn a_workers_handle_off_the_worker_routes_is_forbidden_not_malformed() {
    let daemon = crate::harness::Daemon::start().await;
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    let handle = daemon.handle(&task, 1).await;
    let answer = daemon.get("/v1/tasks", &handle).send().await.unwrap();
    crate::harness::expect_error(answer, 403, "forbidden").await;
    // A handle no node holds is refused as unknown.
    let unknown = format!("wh-{}", "0".repeat(handle.len() - 3));
    let answer = daemon.get("/v1/tasks", &unknown).send().await.unwrap();
    crate::harness::expect_error(answer, 401, "unauthorized").await;
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains("reason=\"unknown_handle\""),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("token"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    daemon.release(&task);
}
