//! A `wait` in flight across a quick daemon restart (kill -9, back within
//! the relay's ping interval, on the same state directory): over Streamable
//! HTTP the Python SDK's call fails with an error in bounded time (the
//! daemon answers the resume of the lost stream `404`), and through
//! `swarmd mcp` the relay sends the read-only `wait` again, so the stdio
//! client gets the task's real end. Also: a stdin line the relay's rmcp
//! cannot read (nested past 128 levels, or not JSON) is answered with a
//! JSON-RPC parse error, never dropped.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::lifecycle::paused_scenario;
use super::{LEGACY, MODERN, Via, printed};
use crate::daemon::Swarmd;

/// A daemon whose `slow20` runs 20 s.
async fn daemon() -> Swarmd {
    Swarmd::new(
        r#"
[agents.slow20]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 20"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.cat]
kind = "process"
program = "/bin/cat"
"#,
    )
    .start()
    .await
}

/// Runs `wait_restart` via `via`, restarting the daemon 3 s into the wait
/// and 4 s after the kill; what the client saw.
async fn wait_across_a_restart(via: Via, mode: &str) -> (Swarmd, Value) {
    let mut daemon = daemon().await;
    let (child, _pause, _state) = paused_scenario(
        &daemon,
        via,
        mode,
        "wait_restart",
        &[],
        &[("MCP_AGENT", "slow20")],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    daemon.kill9().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    daemon.restart().await;
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the wait came back: the client finished in time")
        .unwrap();
    let seen = printed(&daemon, "wait_restart", &output);
    (daemon, seen)
}

#[tokio::test]
async fn over_http_a_wait_cut_by_a_quick_restart_fails_and_the_session_goes_on() {
    let (daemon, seen) = wait_across_a_restart(Via::Http, LEGACY).await;
    let failed = seen["failed"].as_str().unwrap_or_else(|| panic!("{seen}"));
    assert!(failed.contains("MCPError"), "{seen}");
    let waited = seen["waited_secs"].as_f64().unwrap();
    assert!(
        waited < 30.0,
        "the wait failed only after {waited} s: {seen}"
    );
    assert_eq!(seen["agents_after"]["is_error"], false, "{seen}");
    // The client stopped resuming the lost stream: rmcp saw a few resumes
    // (answered 404), not one every second or two.
    let resumes = daemon.log().matches("Resume failed").count();
    assert!(resumes <= 4, "{resumes} resumes");
}

#[tokio::test]
async fn through_the_relay_a_wait_cut_by_a_quick_restart_gets_the_tasks_end() {
    let (_daemon, seen) = wait_across_a_restart(Via::Stdio, MODERN).await;
    assert!(seen["failed"].is_null(), "{seen}");
    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{seen}");
    let task = &waited["structured"]["tasks"][0];
    assert_eq!(task["task_id"], seen["task_id"], "{seen}");
    assert_eq!(task["status"], "failed", "{seen}");
    assert_eq!(task["reason"], "interrupted", "{seen}");
    let secs = seen["waited_secs"].as_f64().unwrap();
    assert!(secs < 40.0, "the wait answered after {secs} s: {seen}");
    assert_eq!(seen["agents_after"]["is_error"], false, "{seen}");
}

/// A `tools/call` of `lint_flow` with id `id` whose flow nests `levels`
/// objects (written out: serde_json cannot build what it cannot read).
fn nested_call(id: u64, levels: usize) -> String {
    let flow = format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"lint_flow","arguments":{{"flow":{flow}}}}}}}"#
    )
}

#[tokio::test]
async fn the_relay_answers_a_line_it_cannot_read_with_a_parse_error() {
    let daemon = daemon().await;
    let state = tempfile::tempdir().unwrap();
    let mut relay = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["mcp", "--url", &daemon.base])
        .env("SWARMD_TOKEN", &daemon.admin)
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = relay.stdin.take().unwrap();
    let mut lines = BufReader::new(relay.stdout.take().unwrap()).lines();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}},
    });
    let agents = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "agents", "arguments": {}},
    });
    let input = [
        initialize.to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        nested_call(2, 130),
        "this is not json".to_owned(),
        nested_call(4, 70),
        agents.to_string(),
    ];
    for line in input {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut answers = std::collections::HashMap::new();
    let mut anonymous = Vec::new();
    let read = async {
        while answers.len() < 4 || anonymous.is_empty() {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the relay answered");
            let answer: Value = serde_json::from_str(&line).unwrap();
            match answer["id"].as_u64() {
                Some(id) => {
                    answers.insert(id, answer);
                }
                None => anonymous.push(answer),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("not every line was answered: {answers:?} {anonymous:?}"));
    drop(stdin);

    let deep = &answers[&2]["error"];
    assert_eq!(deep["code"], -32700, "{deep}");
    let message = deep["message"].as_str().unwrap();
    assert!(
        message.contains("nested deeper than 64 levels"),
        "{message}"
    );
    // Less deep, the daemon refuses it in the same words, as a tool error.
    let refused = &answers[&4]["result"];
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("nested deeper than 64 levels"), "{text}");
    assert_eq!(anonymous[0]["error"]["code"], -32700, "{anonymous:?}");
    assert!(anonymous[0]["id"].is_null(), "{anonymous:?}");
    let listed = &answers[&3]["result"];
    assert_ne!(listed["isError"], true, "{listed}");
    assert!(listed["structuredContent"]["agents"].is_array(), "{listed}");
}
