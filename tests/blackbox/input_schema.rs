//! Agents with an `input_schema` (docs/tasks.md, Agents): every way a task
//! is created checks its input against the schema and refuses a mismatch
//! with `400 invalid_input` naming the JSON pointer of the failing value.
//! A Claude Code agent file (with its `color` key) loads as is.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::Swarmd;

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

const AGENTS: &str = r#"
[agents.typed]
kind = "process"
program = "/bin/cat"
description = "Prints its prompt."
input_schema = { type = "object", required = ["files"], properties = { files = { type = "array", items = { type = "string" } } } }

[agents_dir]
path = "@DIR@/agents"
"#;

/// A Claude Code agent definition, as `.claude/agents/*.md` holds it, with
/// an `input_schema` added.
const REVIEWER: &str = "---
name: reviewer
description: Reviews a diff.
tools: Read, Grep
model: sonnet
color: purple
input_schema:
  type: object
  required: [diff]
---
You review diffs.
";

async fn started() -> Swarmd {
    let sw = Swarmd::new(AGENTS);
    let agents = sw.dir().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("reviewer.md"), REVIEWER).unwrap();
    sw.start().await
}

fn assert_refused(status: u16, body: &Value, pointer: &str) {
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_input")),
        "{body}"
    );
    let error = body["error"].as_str().unwrap();
    assert!(error.contains(&format!("at `{pointer}`")), "{error}");
}

#[tokio::test]
async fn http_checks_input_against_the_schema_and_names_the_pointer() {
    let sw = started().await;
    let (status, body) = sw
        .create(json!({"agent": "typed", "prompt": "p", "input": {"files": ["a.rs", 7]}}))
        .await;
    assert_refused(status, &body, "/files/1");
    let (status, body) = sw.create(json!({"agent": "typed", "prompt": "p"})).await;
    assert_refused(status, &body, "");
    // The agent file's schema applies as well.
    let (status, body) = sw
        .create(json!({"agent": "reviewer", "prompt": "p", "input": {"patch": "x"}}))
        .await;
    assert_refused(status, &body, "");

    let (status, body) = sw
        .create(
            json!({"agent": "typed", "prompt": "hello", "input": {"files": ["a.rs"]},
                       "wait_secs": 20}),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let task = body["task_id"].as_str().unwrap();
    let done = sw.finished(task).await;
    assert_eq!(done["status"], "pass", "{done}");
}

#[tokio::test]
async fn a_websocket_spawn_task_with_bad_input_gets_an_error_frame() {
    let sw = started().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    ws.send(
        json!({"type": "spawn_task", "req_id": "r-1", "agent": "typed",
                   "prompt": "p", "input": {"files": "a.rs"}}),
    )
    .await;
    let error = ws.recv_type("error").await;
    assert_eq!(error["req_id"], "r-1", "{error}");
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("`/files`"),
        "{error}"
    );
    // The socket stays up and a good spawn goes through.
    ws.send(
        json!({"type": "spawn_task", "req_id": "r-2", "agent": "typed",
                   "prompt": "p", "input": {"files": []}}),
    )
    .await;
    let accepted = ws.recv_type("task_accepted").await;
    assert_eq!(accepted["req_id"], "r-2", "{accepted}");
}

#[tokio::test]
async fn the_cli_reports_the_refusal_and_fails() {
    let sw = started().await;
    let output = Command::new(BINARY)
        .args(["task", "spawn", "--agent", "typed", "--prompt", "p"])
        .args(["--input", r#"{"files": [1]}"#])
        .args(["--url", &sw.base, "--token", &sw.admin])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("/files/0"), "{stderr}");
}

#[tokio::test]
async fn a_schema_that_is_not_one_stops_the_configuration() {
    let sw = Swarmd::new(
        r#"
[agents.broken]
kind = "process"
program = "/bin/cat"
input_schema = { type = "no-such-type" }
"#,
    );
    let output = Command::new(BINARY)
        .args(["check-config", "--config"])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("broken") && stderr.contains("input_schema"),
        "{stderr}"
    );
}
