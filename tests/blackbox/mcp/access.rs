//! Who may call the MCP tools and how a refusal looks: isError results with
//! the daemon's codes, the bearer of `/mcp`, session ownership, cancel (of a
//! task and of a call), and `swarmd mcp` failing clearly.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use super::{EXTRA, LEGACY, MODERN, Via, call, python, run, tool_error, transport};
use crate::daemon::repo_root;
use crate::harness::{Daemon, PATIENCE, expect_error, parts};

#[tokio::test]
async fn bad_calls_are_tool_errors_with_the_daemons_code() {
    let daemon = Daemon::start_with(EXTRA).await;
    for via in [Via::Http, Via::Stdio] {
        let seen = run(&daemon, via, MODERN, "errors", &daemon.admin, &[]).await;
        for (name, code) in [
            ("unknown_agent", "not_found"),
            ("missing_prompt", "bad_request"),
            ("bad_task_id", "bad_request"),
            ("absent_task", "not_found"),
            ("wait_too_long", "bad_request"),
        ] {
            assert_eq!(tool_error(&seen[name])["code"], code, "{via:?} {name}");
        }
        assert!(
            tool_error(&seen["missing_prompt"])["error"]
                .as_str()
                .unwrap()
                .contains("prompt")
        );
        let mixed = &seen["spawn_many_mixed"];
        assert_eq!(mixed["is_error"], false, "{mixed}");
        let results = mixed["structured"]["results"].as_array().unwrap();
        assert_eq!(results[0]["ok"], true, "{mixed}");
        assert_eq!(
            (&results[1]["ok"], &results[1]["code"]),
            (&json!(false), &json!("not_found"))
        );
    }
}

#[tokio::test]
async fn mcp_needs_the_admin_or_a_session_bearer() {
    let daemon = Daemon::start_with(EXTRA).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let post = |bearer: Option<&str>| {
        let request = daemon
            .http
            .post(daemon.url("/mcp"))
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize);
        match bearer {
            Some(b) => request.bearer_auth(b),
            None => request,
        }
    };
    expect_error(post(None).send().await.unwrap(), 401, "unauthorized").await;
    let forged = "sws-0000000000000000000000000000000000000000000000000000000000000000";
    expect_error(
        post(Some(forged)).send().await.unwrap(),
        401,
        "unauthorized",
    )
    .await;
    let observer = daemon.observer_token().await;
    expect_error(
        post(Some(&observer)).send().await.unwrap(),
        403,
        "forbidden",
    )
    .await;
    let answer = post(Some(&daemon.admin)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    // Bodies are bounded like every route's (limits.max_body_bytes, 8 MiB).
    let huge = vec![b' '; 9 << 20];
    let answer = daemon
        .http
        .post(daemon.url("/mcp"))
        .bearer_auth(&daemon.admin)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    expect_error(answer, 413, "payload_too_large").await;

    // The Python client without a bearer gets nowhere either.
    let script = repo_root().join("tests/blackbox/mcp/client.py");
    let output = Command::new(python())
        .arg(script)
        .args([transport(&daemon, Via::Http).as_str(), LEGACY, "tools"])
        .env("SWARMD_TOKEN", "")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(
        !daemon.log().contains(&daemon.admin),
        "the admin token was logged"
    );
}

#[tokio::test]
async fn a_session_owns_what_it_spawns_and_only_it_cancels() {
    let daemon = Daemon::start_with(EXTRA).await;
    let login = |roles: Value| {
        let daemon = &daemon;
        async move {
            let answer = daemon
                .post("/v1/operators", &daemon.admin)
                .json(&json!({ "roles": roles }))
                .send()
                .await
                .unwrap();
            let (status, body) = parts(answer).await;
            assert_eq!(status, 201, "{body}");
            body
        }
    };
    let owner = login(json!(["mcp-a"])).await;
    let other = login(json!(["mcp-b"])).await;
    let owner_token = owner["token"].as_str().unwrap();
    let other_token = other["token"].as_str().unwrap();

    let spawned = call(
        &daemon,
        Via::Http,
        owner_token,
        "spawn",
        json!({"agent": "sleepy", "prompt": "z"}),
    )
    .await;
    let id = spawned["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, task) = parts(
        daemon
            .get(&format!("/v1/tasks/{id}"), &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(task["session"], owner["sid"], "{task}");

    let refused = call(
        &daemon,
        Via::Stdio,
        other_token,
        "cancel",
        json!({"task_id": id}),
    )
    .await;
    // Sessions are isolated: another session's task is unknown to it.
    assert_eq!(tool_error(&refused)["code"], "not_found");
    let cancelled = call(
        &daemon,
        Via::Stdio,
        owner_token,
        "cancel",
        json!({"task_id": id, "reason": "enough"}),
    )
    .await;
    assert_eq!(cancelled["is_error"], false, "{cancelled}");
    let task = &cancelled["structured"]["task"];
    assert_eq!(
        (&task["status"], &task["reason"]),
        (&json!("cancelled"), &json!("enough"))
    );
    assert!(
        !daemon.log().contains(owner_token),
        "a session token was logged"
    );
}

#[tokio::test]
async fn cancel_stops_a_task_and_a_cancelled_call_stops_its_wait() {
    let daemon = Daemon::start_with(EXTRA).await;
    let seen = run(&daemon, Via::Http, LEGACY, "cancel", &daemon.admin, &[]).await;
    assert_eq!(
        seen["cancelled"]["structured"]["task"]["status"], "cancelled",
        "{seen}"
    );
    let waited = &seen["waited"]["structured"];
    assert_eq!(waited["done"], true);
    assert_eq!(waited["tasks"][0]["reason"], "test says stop");

    for (via, mode) in [(Via::Http, LEGACY), (Via::Stdio, MODERN)] {
        let before = daemon.log().matches("wait cancelled by its client").count();
        let seen = run(&daemon, via, mode, "abandon", &daemon.admin, &[]).await;
        assert_eq!(seen["call"], "cancelled", "{seen}");
        assert_eq!(seen["after"]["structured"]["status"], "running", "{seen}");
        // The daemon's wait ends when the client cancels the call.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while daemon.log().matches("wait cancelled by its client").count() == before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{via:?}: the daemon's wait went on\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn swarmd_mcp_fails_clearly_without_a_daemon_or_with_a_bad_token() {
    let daemon = Daemon::start_with(EXTRA).await;
    let forged = "sws-0000000000000000000000000000000000000000000000000000000000000000";
    let absent = "http://127.0.0.1:1";
    // The plain relay meets the MCP endpoint first; the default relay the
    // login routes.
    for (url, token, flags, expected) in [
        (
            absent,
            daemon.admin.as_str(),
            &["--no-login"][..],
            "cannot reach the daemon's MCP endpoint",
        ),
        (
            daemon.base.as_str(),
            forged,
            &["--no-login"][..],
            "cannot reach the daemon's MCP endpoint",
        ),
        (
            absent,
            daemon.admin.as_str(),
            &[][..],
            "cannot reach the daemon at http://127.0.0.1:1",
        ),
        (
            daemon.base.as_str(),
            forged,
            &[][..],
            "refused the credential",
        ),
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(["mcp", "--url", url])
            .args(flags)
            .env_clear()
            .env("SWARMD_TOKEN", token)
            .stdin(Stdio::null())
            .output();
        let output = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url} {flags:?}: {stderr}");
        assert!(output.stdout.is_empty(), "stdout carries only the protocol");
        assert!(stderr.contains(expected), "{flags:?}: {stderr}");
        assert!(
            !stderr.contains(token),
            "the credential was logged: {stderr}"
        );
    }
}

#[tokio::test]
async fn new_sessions_past_the_cap_are_refused_until_one_closes() {
    let daemon = Daemon::start_with(&format!("{EXTRA}max_sessions_per_credential = 2\n")).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let open = || {
        daemon
            .http
            .post(daemon.url("/mcp"))
            .bearer_auth(&daemon.admin)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let answer = open().await.unwrap();
        assert_eq!(answer.status(), 200);
        let id = answer.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        ids.push(id);
    }
    expect_error(open().await.unwrap(), 429, "too_many_sessions").await;

    // A request inside an open session still works at the cap.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let answer = daemon
        .http
        .post(daemon.url("/mcp"))
        .bearer_auth(&daemon.admin)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &ids[0])
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&ping)
        .send()
        .await
        .unwrap();
    assert_ne!(answer.status(), 429);

    let closed = daemon
        .http
        .delete(daemon.url("/mcp"))
        .bearer_auth(&daemon.admin)
        .header("Mcp-Session-Id", &ids[0])
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let mut reopened = false;
    for _ in 0..50 {
        if open().await.unwrap().status() == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened, "a closed session frees its place");
}
