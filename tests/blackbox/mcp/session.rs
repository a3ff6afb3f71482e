//! The operator session `swarmd mcp` holds, seen from the daemon: logged in
//! with the flags' roles while the relay runs and gone once its stdin
//! closes; resumed from its 0600 state file with `--keep-session`; kept
//! across a daemon restart, with a call made while the daemon is away
//! waiting for it (or answering `unavailable` past `--daemon-wait-secs`);
//! a role held by another live session refused with one clear line; an
//! idle relay's pings, and SIGTERM or SIGINT leaving the session.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::Command;

use super::{EXTRA, MODERN, Via, client, printed, run, tool_error};
use crate::daemon::{Swarmd, eventually};
use crate::harness::{Daemon, PATIENCE, parts};

/// The environment of a scenario that lists sessions, with the relay's flags.
fn relay_env(admin: &str, args: &[&str]) -> Vec<(String, String)> {
    vec![
        ("SWARMD_ADMIN".into(), admin.into()),
        ("SWARMD_MCP_ARGS".into(), json!(args).to_string()),
    ]
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The one session a scenario listed: its summary.
fn only_session(listed: &Value) -> &Value {
    let sessions = listed.as_array().expect("a session list");
    assert_eq!(sessions.len(), 1, "{listed}");
    &sessions[0]
}

async fn sessions(daemon: &Daemon) -> Value {
    let (status, body) = parts(
        daemon
            .get("/v1/operators", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Runs the `session` scenario through `swarmd mcp` with `args`; the sid
/// the relay acted as (the owner of the task it spawned).
async fn session_run(daemon: &Daemon, args: &[&str]) -> String {
    let env = relay_env(&daemon.admin, args);
    let seen = run(
        daemon,
        Via::Stdio,
        MODERN,
        "session",
        &daemon.admin,
        &pairs(&env),
    )
    .await;
    let sid = only_session(&seen["operators"])["sid"]
        .as_str()
        .unwrap()
        .to_owned();
    let task_id = seen["spawned"]["structured"]["task_id"].as_str().unwrap();
    let (_, task) = parts(
        daemon
            .get(&format!("/v1/tasks/{task_id}"), &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        task["session"], sid,
        "the relay acts as its session: {task}"
    );
    sid
}

#[tokio::test]
async fn the_relay_holds_a_session_with_its_roles_and_leaves_it_when_stdin_closes() {
    let daemon = Daemon::start_with(EXTRA).await;
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("relay.log");
    let args = [
        "--roles",
        "mcp-test,reviewer",
        "--kind",
        "automate",
        "--desc",
        "relay under test",
    ];
    let mut env = relay_env(&daemon.admin, &args);
    env.push(("SWARMD_MCP_LOG".into(), log.display().to_string()));
    env.push(("RUST_LOG".into(), "trace".into()));
    let seen = run(
        &daemon,
        Via::Stdio,
        MODERN,
        "session",
        &daemon.admin,
        &pairs(&env),
    )
    .await;

    let session = only_session(&seen["operators"]);
    let mut roles: Vec<&str> = session["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    roles.sort_unstable();
    assert_eq!(roles, ["mcp-test", "reviewer"], "{session}");
    assert_eq!(session["kind"], "automate", "{session}");
    assert_eq!(session["description"], "relay under test", "{session}");
    let task_id = seen["spawned"]["structured"]["task_id"].as_str().unwrap();
    let (_, task) = parts(
        daemon
            .get(&format!("/v1/tasks/{task_id}"), &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(task["session"], session["sid"], "{task}");

    // The client closed the relay's stdin on its way out: the session is gone.
    assert_eq!(sessions(&daemon).await, json!([]));
    let relay_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        relay_log.contains("left the operator session"),
        "{relay_log}"
    );
    assert!(
        !relay_log.contains("sws-") && !relay_log.contains(&daemon.admin),
        "a secret was logged at trace level:\n{relay_log}"
    );
}

#[tokio::test]
async fn keep_session_resumes_one_session_from_a_private_state_file() {
    let daemon = Daemon::start_with(EXTRA).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state/relay.json");
    let path = file.to_str().unwrap();
    let kept = [
        "--keep-session",
        "--session-file",
        path,
        "--roles",
        "keeper",
    ];

    let first = session_run(&daemon, &kept).await;
    assert_eq!(
        only_session(&sessions(&daemon).await)["sid"],
        first.as_str()
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "the state file is private");
    let dir_mode = std::fs::metadata(file.parent().unwrap()).unwrap().mode();
    assert_eq!(dir_mode & 0o777, 0o700, "its directory is private");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        (&saved["sid"], &saved["url"]),
        (&json!(first), &json!(daemon.base))
    );

    let second = session_run(&daemon, &kept).await;
    assert_eq!(second, first, "the second run resumed the session");

    // Other roles: the saved session does not fit, so it is left and replaced.
    let other = [
        "--keep-session",
        "--session-file",
        path,
        "--roles",
        "keeper,extra",
    ];
    let third = session_run(&daemon, &other).await;
    assert_ne!(third, first);
    assert_eq!(
        only_session(&sessions(&daemon).await)["sid"],
        third.as_str()
    );

    // Without --keep-session the run resumes it, then leaves it.
    let last = session_run(
        &daemon,
        &["--session-file", path, "--roles", "keeper,extra"],
    )
    .await;
    assert_eq!(last, third);
    assert_eq!(sessions(&daemon).await, json!([]));
    assert!(!file.exists(), "the state file went with the session");
}

#[tokio::test]
async fn a_session_token_is_relayed_as_that_session_and_never_left() {
    let daemon = Daemon::start_with(EXTRA).await;
    let (status, own) = parts(
        daemon
            .post("/v1/operators", &daemon.admin)
            .json(&json!({"roles": ["mine"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{own}");
    let token = own["token"].as_str().unwrap();
    let env = relay_env(&daemon.admin, &[]);
    let seen = run(&daemon, Via::Stdio, MODERN, "session", token, &pairs(&env)).await;
    assert_eq!(
        only_session(&seen["operators"])["sid"],
        own["sid"],
        "{seen}"
    );
    let task_id = seen["spawned"]["structured"]["task_id"].as_str().unwrap();
    let (_, task) = parts(
        daemon
            .get(&format!("/v1/tasks/{task_id}"), &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(task["session"], own["sid"], "{task}");
    // The relay did not make that session: it is still there.
    assert_eq!(only_session(&sessions(&daemon).await)["sid"], own["sid"]);
}

#[tokio::test]
async fn without_a_credential_the_relay_logs_in_from_loopback_when_allowed() {
    let config = format!("{EXTRA}\n[auth]\nloopback_login = true\n");
    let daemon = Daemon::start_with(&config).await;
    let env = relay_env(&daemon.admin, &["--roles", "local"]);
    let seen = run(&daemon, Via::Stdio, MODERN, "session", "", &pairs(&env)).await;
    assert_eq!(
        only_session(&seen["operators"])["roles"],
        json!(["local"]),
        "{seen}"
    );
    assert_eq!(seen["spawned"]["is_error"], false, "{seen}");
    assert_eq!(sessions(&daemon).await, json!([]));
}

/// A daemon with `cat`, restartable on the same port and state directory.
async fn restartable() -> Swarmd {
    Swarmd::new(
        r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#,
    )
    .start()
    .await
}

/// Starts the `restart` scenario through `swarmd mcp` with `args` (and
/// `more_env` for the client); the client, its pause directory and the
/// relay's state directory, once the first call is done.
async fn pausing_client(
    daemon: &Swarmd,
    args: &[&str],
    more_env: &[(&str, &str)],
) -> (tokio::process::Child, tempfile::TempDir, tempfile::TempDir) {
    let pause = tempfile::tempdir().unwrap();
    let mut env = relay_env(&daemon.admin, args);
    env.push(("MCP_PAUSE".into(), pause.path().display().to_string()));
    env.extend(
        more_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let (mut command, state) = client(
        daemon,
        Via::Stdio,
        MODERN,
        "restart",
        &daemon.admin,
        &pairs(&env),
    );
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = pause.path().join("ready");
    eventually("the client's first call", || ready.exists()).await;
    (child, pause, state)
}

async fn finish(daemon: &Swarmd, child: tokio::process::Child) -> Value {
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the MCP client finished in time")
        .unwrap();
    printed(daemon, "restart", &output)
}

fn go(pause: &Path) {
    std::fs::write(pause.join("go"), b"").unwrap();
}

#[tokio::test]
async fn a_call_made_while_the_daemon_restarts_waits_for_it_as_the_same_session() {
    let mut daemon = restartable().await;
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("relay.log");
    let log_arg = log.display().to_string();
    let (child, pause, _state) = pausing_client(
        &daemon,
        &["--roles", "survivor"],
        &[("SWARMD_MCP_LOG", &log_arg)],
    )
    .await;
    daemon.kill9().await;
    // The client's next call reaches a relay whose daemon is away.
    go(pause.path());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    daemon.restart().await;
    let seen = finish(&daemon, child).await;

    assert_eq!(seen["before"]["is_error"], false, "{seen}");
    assert_eq!(seen["after"]["is_error"], false, "{seen}");
    let waited = &seen["waited"]["structured"];
    assert_eq!(waited["tasks"][0]["status"], "pass", "{seen}");
    assert_eq!(waited["tasks"][0]["value"], json!({"n": 2}), "{seen}");
    let before = only_session(&seen["operators_before"]);
    let after = only_session(&seen["operators_after"]);
    assert_eq!(before["sid"], after["sid"], "{seen}");
    assert_eq!(after["roles"], json!(["survivor"]), "{seen}");
    let task = daemon
        .task(seen["after"]["structured"]["task_id"].as_str().unwrap())
        .await;
    assert_eq!(task["session"], before["sid"], "{task}");
    let relay_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        relay_log.contains("reconnected to the daemon's MCP endpoint"),
        "{relay_log}"
    );
}

#[tokio::test]
async fn a_call_while_the_daemon_stays_away_answers_unavailable() {
    let mut daemon = restartable().await;
    let (child, pause, state) = pausing_client(&daemon, &["--daemon-wait-secs", "2"], &[]).await;
    daemon.kill9().await;
    go(pause.path());
    let seen = finish(&daemon, child).await;

    let body = tool_error(&seen["after"]);
    assert_eq!(body["code"], "unavailable", "{seen}");
    let waited = seen["after_secs"].as_f64().unwrap();
    assert!((1.9..15.0).contains(&waited), "the call waited {waited} s");
    assert!(
        body["error"].as_str().unwrap().contains(&daemon.base),
        "{body}"
    );
    // The relay could not leave the session: its state file stays, so the
    // next run finds the session.
    let files: Vec<_> = std::fs::read_dir(state.path().join("swarmd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("mcp-") && f.ends_with(".json")),
        "{files:?}"
    );
}

#[tokio::test]
async fn a_role_held_by_a_live_session_fails_the_relay_with_one_clear_line() {
    let daemon = Daemon::start_with(EXTRA).await;
    let (status, holder) = parts(
        daemon
            .post("/v1/operators", &daemon.admin)
            .json(&json!({"roles": ["main-ai"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{holder}");
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["mcp", "--url", &daemon.base, "--roles", "main-ai"])
        .arg("--session-file")
        .arg(dir.path().join("relay.json"))
        .env_clear()
        .env("SWARMD_TOKEN", &daemon.admin)
        .stdin(Stdio::null())
        .output();
    let output = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty(), "stdout carries only the protocol");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("swarmd: the daemon at")
            && last.contains("refused the login")
            && last.contains("main-ai")
            && last.ends_with("(role_taken)"),
        "{stderr}"
    );
    assert!(!stderr.contains(&daemon.admin), "{stderr}");
    assert_eq!(
        only_session(&sessions(&daemon).await)["sid"],
        holder["sid"],
        "the refused relay left nothing behind"
    );
    assert!(!dir.path().join("relay.json").exists());
}

/// The last `last_seen` of the session holding `role`, once it exists.
async fn last_seen(daemon: &Daemon, role: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = sessions(daemon).await;
        let holder = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["roles"] == json!([role]));
        if let Some(holder) = holder {
            return holder["last_seen"].as_u64().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session for {role}: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_idle_relay_pings_the_daemon_and_a_signal_leaves_its_session() {
    let daemon = Daemon::start_with(EXTRA).await;
    for (signal, role) in [(Signal::SIGTERM, "term"), (Signal::SIGINT, "int")] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("relay.json");
        let log = dir.path().join("relay.log");
        // No MCP client ever speaks: stdin stays open and silent.
        let mut child = Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(["mcp", "--url", &daemon.base, "--roles", role])
            .args(["--heartbeat-secs", "1", "--session-file"])
            .arg(&file)
            .env_clear()
            .env("SWARMD_TOKEN", &daemon.admin)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let _stdin = child.stdin.take();
        let first = last_seen(&daemon, role).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let later = last_seen(&daemon, role).await;
        assert!(
            later >= first + 1000,
            "{role}: the idle relay's pings keep the session seen ({first} then {later})"
        );

        let pid = i32::try_from(child.id().unwrap()).unwrap();
        kill(Pid::from_raw(pid), signal).unwrap();
        let status = tokio::time::timeout(PATIENCE, child.wait())
            .await
            .expect("the relay stopped on the signal")
            .unwrap();
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(status.success(), "{signal}: {stderr}");
        assert!(!stderr.contains("ERROR"), "{signal}: {stderr}");
        assert_eq!(sessions(&daemon).await, json!([]), "{signal}: {stderr}");
        assert!(
            !file.exists(),
            "{signal}: the state file went with the session"
        );
    }
}

/// The children of process `pid` (from `/proc`).
fn children(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

#[tokio::test]
async fn sigterm_mid_session_leaves_the_session() {
    let daemon = restartable().await;
    let (mut child, _pause, _state) = pausing_client(&daemon, &["--roles", "mid"], &[]).await;
    let (status, listed) = parts(
        daemon
            .get("/v1/operators", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, listed.as_array().map(Vec::len)), (200, Some(1)));
    // The client's only child is the relay, between two calls.
    let relays = children(child.id().unwrap());
    assert_eq!(relays.len(), 1, "{relays:?}");
    kill(Pid::from_raw(relays[0]), Signal::SIGTERM).unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (_, listed) = parts(
            daemon
                .get("/v1/operators", &daemon.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        if listed == json!([]) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session outlived SIGTERM: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill().await;
}
