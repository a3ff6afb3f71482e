//! The relay over time: an idle relay's pings, a daemon restart under a
//! call made while the daemon is away (the same session afterwards), a
//! daemon that stays away past `--daemon-wait-secs` (`unavailable`),
//! SIGTERM or SIGINT leaving the session before the MCP handshake and
//! between two calls, and a session deleted under the relay replaced by a
//! new login (recorded in the state file, left on exit unless kept), or,
//! when the daemon refuses that login, calls answering `unauthorized`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::Command;

use super::session::{only_session, pairs, relay_env, sessions};
use super::{MODERN, Via, client, printed, tool_error};
use crate::daemon::{Swarmd, eventually};
use crate::harness::{Daemon, PATIENCE, parts};

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
    paused_scenario(daemon, Via::Stdio, MODERN, "restart", args, more_env).await
}

/// Starts `scenario` via `via` in protocol `mode` (with the relay's `args`
/// and `more_env` for the client), which pauses once its first call is
/// done; the client, its pause directory and the relay's state directory,
/// once it paused.
pub(super) async fn paused_scenario(
    daemon: &Swarmd,
    via: Via,
    mode: &str,
    scenario: &str,
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
    let (mut command, state) = client(daemon, via, mode, scenario, &daemon.admin, &pairs(&env));
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
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains(&daemon.base) && message.contains("(last: "),
        "the message names the daemon and why it is away: {body}"
    );
    // Why, in words: no client library's type names.
    assert!(
        !message.contains("rmcp::") && !message.contains('<'),
        "{message}"
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

/// The summary of the session holding `role`, once it exists.
async fn holder(daemon: &Daemon, role: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = sessions(daemon).await;
        let holder = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["roles"] == json!([role]));
        if let Some(holder) = holder {
            return holder.clone();
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
    // Presence lasts 5 s after a request: only the pings keep it longer.
    let daemon = Daemon::start_with("[mcp]\npresence_secs = 5\n").await;
    for (signal, role, idle_ms) in [
        (Signal::SIGTERM, "term", 6500),
        (Signal::SIGINT, "int", 4500),
    ] {
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
        let first = holder(&daemon, role).await["last_seen"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(idle_ms)).await;
        let later = holder(&daemon, role).await;
        let seen = later["last_seen"].as_u64().unwrap();
        // Pings come every second; a loaded machine may delay the last ones
        // by up to 3 s, which each round's idle time exceeds by 1.5 s or
        // more, so a relay that never pings fails both.
        assert!(
            seen >= first + idle_ms - 3000,
            "{role}: the idle relay's pings keep the session seen ({first} then {later})"
        );
        assert_eq!(later["connected"], true, "{role}: present: {later}");

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

#[tokio::test]
async fn a_call_the_daemon_refuses_gets_its_answer_through_the_relay_at_once() {
    let daemon = Swarmd::new(
        r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#,
    )
    .env("SWARMD_LIMITS__MAX_BODY_BYTES", "8192")
    .start()
    .await;
    // Over the body limit: the daemon answers 413, which no retry mends.
    let args = json!({"agent": "cat", "prompt": "x".repeat(20 * 1024)});
    let started = std::time::Instant::now();
    let outcome = super::call(&daemon, Via::Stdio, &daemon.admin, "spawn", args).await;
    let error = tool_error(&outcome);
    assert_eq!(error["code"], "payload_too_large", "{error}");
    assert!(started.elapsed() < Duration::from_secs(20), "{error}");
    assert!(!daemon.log().contains("panicked"));
}

/// Deletes, as the admin, the one operator session (the relay's); its sid.
async fn delete_the_only_session(daemon: &Swarmd) -> String {
    let listed = operators(daemon).await;
    let old = only_session(&listed)["sid"].as_str().unwrap().to_owned();
    let deleted = daemon
        .http
        .delete(daemon.url(&format!("/v1/operators/{old}")))
        .bearer_auth(&daemon.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204, "{listed}");
    old
}

/// The daemon's operator sessions, listed as the admin.
async fn operators(daemon: &Swarmd) -> Value {
    let (status, listed) = parts(
        daemon
            .get("/v1/operators", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    listed
}

/// The sid the relay's state file (under the client's `XDG_STATE_HOME`)
/// records, if the file exists.
fn recorded_sid(state: &Path) -> Option<String> {
    let dir = std::fs::read_dir(state.join("swarmd")).ok()?;
    let file = dir
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))?;
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    saved["sid"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn a_session_deleted_under_the_relay_is_replaced_by_a_new_login() {
    let daemon = restartable().await;
    for (role, keep) in [("phoenix", false), ("kept-phoenix", true)] {
        let logs = tempfile::tempdir().unwrap();
        let log = logs.path().join("relay.log");
        let log_arg = log.display().to_string();
        let mut args = vec!["--roles", role];
        if keep {
            args.push("--keep-session");
        }
        let (child, pause, state) =
            pausing_client(&daemon, &args, &[("SWARMD_MCP_LOG", &log_arg)]).await;
        let old = delete_the_only_session(&daemon).await;
        // The next call finds the session gone: the relay logs in anew.
        go(pause.path());
        let seen = finish(&daemon, child).await;
        let relay_log = std::fs::read_to_string(&log).unwrap();

        assert_eq!(
            seen["after"]["is_error"], false,
            "{role}: {seen}\n{relay_log}"
        );
        let waited = &seen["waited"]["structured"];
        assert_eq!(waited["tasks"][0]["status"], "pass", "{role}: {seen}");
        let new = only_session(&seen["operators_after"]);
        assert_ne!(new["sid"], old.as_str(), "{role}: {seen}");
        assert_eq!(new["roles"], json!([role]), "{role}: {seen}");
        let task = daemon
            .task(seen["after"]["structured"]["task_id"].as_str().unwrap())
            .await;
        assert_eq!(task["session"], new["sid"], "{role}: {task}");
        let relogged = relay_log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("logged in a new one"))
            .collect::<Vec<_>>();
        assert_eq!(relogged.len(), 1, "{role}: {relay_log}");
        assert!(
            relogged[0].contains(&old) && relogged[0].contains(new["sid"].as_str().unwrap()),
            "{role}: the line names the old and the new sid: {relay_log}"
        );
        assert!(
            !relay_log.contains("sws-") && !relay_log.contains(&daemon.admin),
            "{role}: a secret was logged:\n{relay_log}"
        );

        // On exit the relay leaves the new session, or keeps it recorded.
        let after_exit = operators(&daemon).await;
        if keep {
            assert_eq!(only_session(&after_exit)["sid"], new["sid"], "{relay_log}");
            assert_eq!(
                recorded_sid(state.path()).as_deref(),
                new["sid"].as_str(),
                "the state file records the new session"
            );
        } else {
            assert_eq!(after_exit, json!([]), "{relay_log}");
            assert_eq!(recorded_sid(state.path()), None, "{relay_log}");
        }
    }
}

#[tokio::test]
async fn a_relay_whose_new_login_is_refused_answers_unauthorized_saying_why() {
    let daemon = restartable().await;
    let (child, pause, _state) = pausing_client(
        &daemon,
        &["--roles", "contested", "--daemon-wait-secs", "2"],
        &[],
    )
    .await;
    delete_the_only_session(&daemon).await;
    // Another session takes the role before the relay logs in again.
    let (status, other) = parts(
        daemon
            .post("/v1/operators", &daemon.admin)
            .json(&json!({"roles": ["contested"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{other}");
    go(pause.path());
    let seen = finish(&daemon, child).await;

    let body = tool_error(&seen["after"]);
    assert_eq!(body["code"], "unauthorized", "{seen}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("no longer accepts this relay's session")
            && message.contains("a new login failed")
            && message.contains("(role_taken)"),
        "{body}"
    );
    assert_eq!(
        only_session(&operators(&daemon).await)["sid"],
        other["sid"],
        "the relay left nothing behind"
    );
}
