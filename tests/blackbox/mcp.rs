//! The MCP server driven by a client we did not write: the official Python
//! SDK (`mcp` from PyPI, in the venv `scripts/mcp-client-env.sh` prepares)
//! runs `tests/blackbox/mcp/client.py` against the real binary, over
//! Streamable HTTP at `/mcp` and over stdio through `swarmd mcp`, on the
//! current protocol revision (2026-07-28) and the initialize-era one
//! (2025-11-25). The script prints what it saw as JSON; the assertions are
//! here.
//!
//! The test config adds `slow` (answers after 1.5 s), `sleepy` (runs 30 s)
//! and `mcp.progress_ms = 200`, so a wait longer than the progress interval
//! takes seconds.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::{Swarmd, repo_root};
use crate::harness::{Daemon, PATIENCE, expect_error, parts};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "legacy";

const EXTRA: &str = r#"
[agents.slow]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 1.5; cat"]
env = { PATH = "/usr/bin:/bin" }
description = "Answers its prompt after 1.5 s"

[agents.sleepy]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[mcp]
progress_ms = 200
"#;

/// The venv's python, prepared once per test run; a missing python3 or a
/// failed install fails the test that needs it, with the script's message.
fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let script = repo_root().join("scripts/mcp-client-env.sh");
            let output = std::process::Command::new("bash")
                .arg(&script)
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if !output.status.success() {
                return Err(format!(
                    "{} failed:\n{}",
                    script.display(),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            Ok(PathBuf::from(path))
        })
        .clone()
        .unwrap_or_else(|e| panic!("the Python MCP client is not available: {e}"))
}

/// How the client reaches the daemon.
#[derive(Debug, Clone, Copy)]
enum Via {
    Http,
    Stdio,
}

/// A running daemon of either launcher.
trait Served {
    fn base(&self) -> &str;
    fn log(&self) -> String;
}

impl Served for Daemon {
    fn base(&self) -> &str {
        &self.base
    }
    fn log(&self) -> String {
        Daemon::log(self)
    }
}

impl Served for Swarmd {
    fn base(&self) -> &str {
        &self.base
    }
    fn log(&self) -> String {
        Swarmd::log(self)
    }
}

fn transport(daemon: &impl Served, via: Via) -> String {
    match via {
        Via::Http => format!("http:{}", daemon.base()),
        Via::Stdio => format!("stdio:{}:{}", env!("CARGO_BIN_EXE_swarmd"), daemon.base()),
    }
}

/// Runs one scenario of the client script and returns what it printed.
async fn run(
    daemon: &impl Served,
    via: Via,
    mode: &str,
    scenario: &str,
    token: &str,
    env: &[(&str, &str)],
) -> Value {
    let script = repo_root().join("tests/blackbox/mcp/client.py");
    let mut command = Command::new(python());
    command
        .arg(script)
        .args([transport(daemon, via).as_str(), mode, scenario])
        .env("SWARMD_TOKEN", token)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("the MCP client finished in time")
        .expect("the MCP client ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client.py {scenario} failed: {}\n{}\ndaemon:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// One tool call through the client.
async fn call(daemon: &impl Served, via: Via, token: &str, tool: &str, args: Value) -> Value {
    let args = args.to_string();
    let env = [("MCP_TOOL", tool), ("MCP_ARGS", args.as_str())];
    run(daemon, via, MODERN, "call", token, &env).await
}

/// The `{error, code}` of an isError result.
fn tool_error(outcome: &Value) -> Value {
    assert_eq!(outcome["is_error"], true, "{outcome}");
    let text = outcome["text"][0].as_str().expect("a text block");
    let body: Value = serde_json::from_str(text).expect("the daemon's JSON error");
    assert!(body["error"].is_string(), "{body}");
    body
}

#[tokio::test]
async fn tools_are_listed_with_input_and_output_schemas_on_both_revisions() {
    let daemon = Daemon::start_with(EXTRA).await;
    for (via, mode, version) in [
        (Via::Http, MODERN, MODERN),
        (Via::Http, LEGACY, "2025-11-25"),
        (Via::Stdio, MODERN, MODERN),
        (Via::Stdio, LEGACY, "2025-11-25"),
    ] {
        let seen = run(&daemon, via, mode, "tools", &daemon.admin, &[]).await;
        assert_eq!(seen["protocol_version"], version, "{via:?}");
        let tools = seen["tools"].as_object().unwrap();
        let mut names: Vec<_> = tools.keys().cloned().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "agents",
                "cancel",
                "output",
                "spawn",
                "spawn_many",
                "task",
                "tasks",
                "wait"
            ],
            "{via:?} {mode}"
        );
        for (name, tool) in tools {
            assert_eq!(tool["input"]["type"], "object", "{name}");
            assert_eq!(tool["output"]["type"], "object", "{name}");
            assert!(tool["description"].as_str().unwrap().len() > 40, "{name}");
        }
        assert_eq!(
            tools["spawn"]["input"]["required"],
            json!(["agent", "prompt"])
        );
        assert_eq!(tools["wait"]["input"]["required"], json!(["task_ids"]));
    }
}

/// spawn_many of five `cat` tasks, wait(all), and the read tools on them.
async fn fan_out_and_collect(via: Via, mode: &str) {
    let daemon = Daemon::start_with(EXTRA).await;
    let seen = run(&daemon, via, mode, "fanout", &daemon.admin, &[]).await;
    let spawned = &seen["spawned"]["structured"];
    assert_eq!(spawned["created"], 5, "{seen}");
    let ids = seen["ids"].as_array().unwrap();

    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{waited}");
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(true), &json!(5))
    );
    let tasks = waited["tasks"].as_array().unwrap();
    for (n, (task, id)) in tasks.iter().zip(ids).enumerate() {
        assert_eq!(&task["task_id"], id);
        assert_eq!(task["status"], "pass", "{task}");
        assert_eq!(task["ok"], true, "{task}");
        assert_eq!(task["value"], json!({ "n": n }), "{task}");
    }

    let task = &seen["task"]["structured"];
    assert_eq!((&task["id"], &task["status"]), (&ids[0], &json!("pass")));
    assert_eq!(task["attempts"].as_array().unwrap().len(), 1, "{task}");
    let output = &seen["output"]["structured"];
    assert_eq!(output["task_id"], ids[0]);
    assert!(
        !output["records"].as_array().unwrap().is_empty(),
        "{output}"
    );
    let listed = seen["tasks"]["structured"]["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(
        listed
            .iter()
            .all(|t| t["agent"] == "cat" && t["status"] == "pass")
    );

    let agents = seen["agents"]["structured"]["agents"].as_array().unwrap();
    let slow = agents.iter().find(|a| a["name"] == "slow").expect("slow");
    assert_eq!(slow["kind"], "process");
    assert_eq!(slow["description"], "Answers its prompt after 1.5 s");
    assert!(agents.iter().any(|a| a["name"] == "cat"));
}

#[tokio::test]
async fn fan_out_and_collect_over_http() {
    fan_out_and_collect(Via::Http, LEGACY).await;
}

#[tokio::test]
async fn fan_out_and_collect_over_stdio() {
    fan_out_and_collect(Via::Stdio, MODERN).await;
}

/// A 1.5 s wait with a 200 ms progress interval: several notifications,
/// growing, saying how many tasks are done, then the result.
async fn wait_reports_progress(via: Via, mode: &str) {
    let daemon = Daemon::start_with(EXTRA).await;
    let seen = run(&daemon, via, mode, "progress", &daemon.admin, &[]).await;
    let waited = &seen["waited"]["structured"];
    assert_eq!(waited["done"], true, "{seen}");
    assert_eq!(waited["tasks"][0]["value"], json!({ "slow": 1 }), "{seen}");
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 3, "{progress:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    for p in progress {
        assert_eq!(p["total"], 1.0, "{p}");
        assert!(
            p["message"].as_str().unwrap().starts_with("0/1 done"),
            "{p}"
        );
    }
}

#[tokio::test]
async fn wait_reports_progress_over_http() {
    wait_reports_progress(Via::Http, MODERN).await;
}

#[tokio::test]
async fn wait_reports_progress_over_stdio() {
    wait_reports_progress(Via::Stdio, LEGACY).await;
}

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
    assert_eq!(tool_error(&refused)["code"], "forbidden");
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
async fn wait_modes_and_its_timeout_return_what_they_have() {
    let daemon = Daemon::start_with(EXTRA).await;
    let admin = daemon.admin.as_str();
    let spawn = |agent: &'static str| {
        let daemon = &daemon;
        async move {
            let body = json!({"agent": agent, "prompt": "{\"k\": 1}"});
            daemon.spawn(body).await
        }
    };
    let quick = spawn("cat").await;
    let sleepy = spawn("sleepy").await;

    let agents = call(&daemon, Via::Http, admin, "agents", json!({})).await;
    let agents = agents["structured"]["agents"].as_array().unwrap().clone();
    let counts = agents.iter().find(|a| a["name"] == "sleepy").unwrap();
    assert_eq!(
        (&counts["running"], &counts["queued"]),
        (&json!(1), &json!(0)),
        "{counts}"
    );

    let started = tokio::time::Instant::now();
    let args = json!({"task_ids": [&sleepy, &quick], "mode": "any", "timeout_secs": 20});
    let any = call(&daemon, Via::Http, admin, "wait", args).await["structured"].clone();
    assert_eq!(
        (&any["done"], &any["finished"]),
        (&json!(true), &json!(1)),
        "{any}"
    );
    assert_eq!(any["tasks"][0]["status"], "running", "{any}");
    assert_eq!(any["tasks"][1]["value"], json!({"k": 1}), "{any}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "any waited for both"
    );

    let args = json!({"task_ids": [&quick, &sleepy], "timeout_secs": 1});
    let all = call(&daemon, Via::Stdio, admin, "wait", args).await["structured"].clone();
    assert_eq!(
        (&all["done"], &all["finished"]),
        (&json!(false), &json!(1)),
        "{all}"
    );
    assert_eq!(all["tasks"][1]["status"], "running", "{all}");

    let args = json!({"task_ids": [&quick, &sleepy], "mode": "first", "n": 1, "timeout_secs": 5});
    let first = call(&daemon, Via::Http, admin, "wait", args).await["structured"].clone();
    assert_eq!(first["done"], true, "{first}");

    let args = json!({"agent": "cat", "prompt": "x", "policy": {"max_attempts": 0}});
    let refused = call(&daemon, Via::Http, admin, "spawn", args).await;
    let error = tool_error(&refused);
    assert_eq!(error["code"], "bad_request");
    assert!(
        error["error"].as_str().unwrap().contains("max_attempts"),
        "{error}"
    );
}

#[tokio::test]
async fn swarmd_mcp_fails_clearly_without_a_daemon_or_with_a_bad_token() {
    let daemon = Daemon::start_with(EXTRA).await;
    let forged = "sws-0000000000000000000000000000000000000000000000000000000000000000";
    for (url, token) in [
        ("http://127.0.0.1:1", daemon.admin.as_str()),
        (daemon.base.as_str(), forged),
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(["mcp", "--url", url])
            .env_clear()
            .env("SWARMD_TOKEN", token)
            .stdin(Stdio::null())
            .output();
        let output = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url}: {stderr}");
        assert!(output.stdout.is_empty(), "stdout carries only the protocol");
        assert!(
            stderr.contains("cannot reach the daemon's MCP endpoint"),
            "{stderr}"
        );
        assert!(
            !stderr.contains(token),
            "the credential was logged: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_draining_daemon_ends_a_wait_with_what_it_has() {
    let mut daemon = Swarmd::new(EXTRA).start().await;
    let (status, body) = parts(
        daemon
            .post("/v1/tasks", &daemon.admin)
            .json(&json!({"agent": "sleepy", "prompt": "z"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap().to_owned();
    let args = json!({"task_ids": [&id], "timeout_secs": 300});
    let waiting = call(&daemon, Via::Http, &daemon.admin, "wait", args);
    let stop = async {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !daemon.log().contains("wait started") {
            assert!(tokio::time::Instant::now() < deadline, "{}", daemon.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        daemon.sigterm();
    };
    let (waited, ()) = tokio::join!(waiting, stop);
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(false), &json!(0)),
        "{waited}"
    );
    assert_eq!(waited["tasks"][0]["status"], "running", "{waited}");
    assert!(daemon.exited().await.success());
}
