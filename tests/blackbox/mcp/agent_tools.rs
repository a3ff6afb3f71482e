//! Agents as tools through the Python SDK, which checks a result's
//! structured content against the tool's output schema: an `[agents.NAME]`
//! process agent and a Claude Code agent file, both with
//! `expose_as_tool`, listed with their schemas on both revisions and
//! called; and `check-config` refusing a tool name a client cannot take.

use serde_json::json;
use tokio::process::Command;

use super::{LEGACY, MODERN, Via, call, run, tool_error};
use crate::daemon::Swarmd;

const AGENTS: &str = r#"
[agents.summarize]
kind = "process"
program = "/bin/cat"
description = "Summarizes a list of files."
expose_as_tool = true
tool_timeout_secs = 30
input_schema = { type = "object", required = ["files"], properties = { files = { type = "array", items = { type = "string" } } } }

[agents.hidden]
kind = "process"
program = "/bin/cat"

[agents_dir]
path = "@DIR@/agents"
"#;

/// A Claude Code agent definition with the two keys added; no MainAI is
/// connected, so its tasks wait in the queue past the 1 s tool timeout.
const REVIEWER: &str = "---
name: reviewer
description: Reviews a diff.
tools: Read, Grep
model: sonnet
color: purple
expose_as_tool: true
tool_timeout_secs: 1
input_schema:
  type: object
  required: [diff]
  properties:
    diff: {type: string}
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

#[tokio::test]
async fn exposed_agents_are_tools_with_their_schemas_on_both_revisions() {
    let sw = started().await;
    for (via, mode) in [(Via::Http, MODERN), (Via::Stdio, LEGACY)] {
        let seen = run(&sw, via, mode, "tools", &sw.admin, &[]).await;
        let tools = seen["tools"].as_object().unwrap();
        assert!(!tools.contains_key("hidden"), "{via:?}");
        let summarize = &tools["summarize"];
        assert_eq!(summarize["input"]["required"], json!(["files"]), "{via:?}");
        assert_eq!(
            summarize["output"]["required"],
            json!(["task_id", "status", "done"])
        );
        let description = summarize["description"].as_str().unwrap();
        assert!(
            description.starts_with("Summarizes a list"),
            "{description}"
        );
        assert!(description.contains("30s"), "{description}");
        let reviewer = &tools["reviewer"];
        assert_eq!(reviewer["input"]["required"], json!(["diff"]), "{via:?}");
        assert_eq!(reviewer["output"]["type"], "object");
    }
}

#[tokio::test]
async fn an_agent_tool_call_returns_the_result_or_the_task_still_waiting() {
    let sw = started().await;
    let admin = sw.admin.as_str();
    // An operator agent with no MainAI connected (first, before a relay of
    // `swarmd mcp` has logged in): queued at the timeout.
    let queued = call(&sw, Via::Http, admin, "reviewer", json!({"diff": "+x"})).await;
    let result = &queued["structured"];
    assert_eq!(
        (&result["status"], &result["done"]),
        (&json!("queued"), &json!(false))
    );
    let task = sw.task(result["task_id"].as_str().unwrap()).await;
    assert_eq!(task["prompt"], "{\"diff\":\"+x\"}", "{task}");

    let args = json!({"files": ["a.rs", "b.rs"]});
    let done = call(&sw, Via::Stdio, admin, "summarize", args).await;
    assert_eq!(done["is_error"], false, "{done}");
    let result = &done["structured"];
    assert_eq!(
        (&result["status"], &result["done"]),
        (&json!("pass"), &json!(true))
    );
    assert_eq!(
        result["value"],
        json!({"files": ["a.rs", "b.rs"]}),
        "{result}"
    );
    let id = result["task_id"].as_str().unwrap();
    let task = sw.task(id).await;
    assert_eq!(task["agent"], "summarize", "{task}");
    assert_eq!(task["input"], json!({"files": ["a.rs", "b.rs"]}), "{task}");

    let bad = call(&sw, Via::Http, admin, "summarize", json!({"files": "a.rs"})).await;
    let error = tool_error(&bad);
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("/files"),
        "{error}"
    );
}

async fn check_config(sw: &Swarmd) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["check-config", "--config"])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), stderr)
}

#[tokio::test]
async fn check_config_refuses_tool_names_clients_cannot_take() {
    for (name, says) in [("spawn", "built-in"), ("v1.2", "no dots")] {
        let body = format!(
            "[agents.\"{name}\"]\nkind = \"process\"\nprogram = \"/bin/cat\"\nexpose_as_tool = true\n"
        );
        let (ok, stderr) = check_config(&Swarmd::new(&body)).await;
        assert!(!ok, "{stderr}");
        let key = format!("agents.{name}.expose_as_tool");
        assert!(stderr.contains(&key) && stderr.contains(says), "{stderr}");
    }
    let body = "[agents.spawn]\nkind = \"process\"\nprogram = \"/bin/cat\"\n";
    let (ok, stderr) = check_config(&Swarmd::new(body)).await;
    assert!(
        ok,
        "an agent that is no tool may share a tool's name: {stderr}"
    );
}
