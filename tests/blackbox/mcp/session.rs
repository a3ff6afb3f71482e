//! The operator session `swarmd mcp` holds, seen from the daemon: logged in
//! with the flags' roles while the relay runs and gone once its stdin
//! closes; resumed from its 0600 state file with `--keep-session`; a
//! session token relayed as that session and never left; a loopback login
//! without a credential; a role held by another live session, or a bad
//! role name, refused with one clear line. The helpers here serve
//! `lifecycle` too.

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::process::Command;

use super::{EXTRA, MODERN, Via, run};
use crate::harness::{Daemon, PATIENCE, parts};

/// The environment of a scenario that lists sessions, with the relay's flags.
pub(super) fn relay_env(admin: &str, args: &[&str]) -> Vec<(String, String)> {
    vec![
        ("SWARMD_ADMIN".into(), admin.into()),
        ("SWARMD_MCP_ARGS".into(), json!(args).to_string()),
    ]
}

pub(super) fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The one session a scenario listed: its summary.
pub(super) fn only_session(listed: &Value) -> &Value {
    let sessions = listed.as_array().expect("a session list");
    assert_eq!(sessions.len(), 1, "{listed}");
    &sessions[0]
}

pub(super) async fn sessions(daemon: &Daemon) -> Value {
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
    assert_eq!(
        session["connected"], true,
        "present while it relays: {session}"
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

/// `swarmd mcp` with `flags` and the admin token, stdin closed at once:
/// its exit code and stderr.
async fn refused_relay(daemon: &Daemon, flags: &[&str], file: &std::path::Path) -> (i32, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["mcp", "--url", &daemon.base])
        .args(flags)
        .arg("--session-file")
        .arg(file)
        .env_clear()
        .env("SWARMD_TOKEN", &daemon.admin)
        .stdin(Stdio::null())
        .output();
    let output = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.stdout.is_empty(), "stdout carries only the protocol");
    assert!(!stderr.contains(&daemon.admin), "{stderr}");
    (output.status.code().unwrap_or(-1), stderr)
}

#[tokio::test]
async fn a_role_held_by_a_live_session_or_a_bad_role_fails_the_relay_with_one_clear_line() {
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
    let file = dir.path().join("relay.json");
    for (flags, name, code) in [
        (&["--roles", "main-ai"][..], "main-ai", "(role_taken)"),
        (
            &["--roles", "Not A Role"][..],
            "Not A Role",
            "(bad_request)",
        ),
    ] {
        let (exit, stderr) = refused_relay(&daemon, flags, &file).await;
        assert_eq!(exit, 1, "{stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("swarmd: the daemon at")
                && last.contains("refused the login")
                && last.contains(name)
                && last.ends_with(code),
            "{stderr}"
        );
    }
    assert_eq!(
        only_session(&sessions(&daemon).await)["sid"],
        holder["sid"],
        "the refused relays left nothing behind"
    );
    assert!(!file.exists());
}
