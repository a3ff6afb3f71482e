//! The MCP server driven by the official TypeScript SDK
//! (`@modelcontextprotocol/sdk` from npm, the client Claude Code and the MCP
//! Inspector are built on, installed by `scripts/ts-mcp-env.sh`): node runs
//! `tests/blackbox/mcp/ts_client.mjs` against the real binary, over
//! Streamable HTTP at `/mcp` and over stdio through `swarmd mcp`. The SDK
//! checks the tool list against its own schema and compiles every output
//! schema, and refuses the whole list when one tool's schema is of a form it
//! does not take (a boolean subschema such as `"input": true` was one): the
//! client then fails, and so does the test. Its calls (`agents`, a `spawn`
//! of `cat` and a `wait` on it) are checked by the SDK against each tool's
//! output schema, and here against what the daemon should answer.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::repo_root;
use crate::harness::Daemon;

/// The directory whose `node_modules` holds the SDK, installed once per
/// test run; a missing npm or a failed install fails the test.
fn sdk() -> PathBuf {
    static SDK: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::installed(&SDK, "scripts/ts-mcp-env.sh", "the TypeScript MCP SDK")
}

/// Runs the client over `transport` and returns what it printed; fails with
/// its stderr (and the relay's, over stdio) unless it succeeded.
async fn run(daemon: &Daemon, transport: &str) -> Value {
    let state = tempfile::tempdir().unwrap();
    let output = Command::new("node")
        .arg(repo_root().join("tests/blackbox/mcp/ts_client.mjs"))
        .arg(sdk())
        .arg(transport)
        .env("SWARMD_TOKEN", &daemon.admin)
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("the TypeScript client finished in time")
        .expect("node ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ts_client.mjs {transport} failed: {}\n{}\ndaemon:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The listing and the three calls, as the client saw them.
fn check(seen: &Value) {
    assert_eq!(seen["sdk_version"], "1.32.2", "the version the script pins");
    assert_eq!(seen["server"], "swarmd", "{seen}");
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // These output schemas held `"input": true`, which the SDK refused.
    for name in [
        "agents",
        "spawn",
        "wait",
        "run",
        "start_run",
        "worker_prompt",
    ] {
        assert!(tools.contains(&name), "no tool `{name}`: {tools:?}");
    }
    // Every tool has an output schema, so the SDK compiled each of them.
    assert_eq!(seen["with_output_schema"], seen["tools"], "{seen}");

    let agents = &seen["agents"];
    assert_eq!(agents["is_error"], false, "{agents}");
    let listed = agents["structured"]["agents"].as_array().unwrap();
    let cat = listed.iter().find(|a| a["name"] == "cat").expect("cat");
    assert_eq!(cat["kind"], "process", "{cat}");

    let spawned = &seen["spawned"];
    assert_eq!(spawned["is_error"], false, "{spawned}");
    let id = &spawned["structured"]["task_id"];
    assert!(id.as_str().unwrap().starts_with("T-"), "{spawned}");

    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{waited}");
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(true), &json!(1)),
        "{waited}"
    );
    let task = &waited["tasks"][0];
    assert_eq!(
        (&task["task_id"], &task["status"]),
        (id, &json!("pass")),
        "{task}"
    );
    assert_eq!(task["value"], json!({"n": 1}), "{task}");
}

#[tokio::test]
async fn typescript_sdk_over_http() {
    let daemon = Daemon::start().await;
    let seen = run(&daemon, &format!("http:{}", daemon.base)).await;
    check(&seen);
    // The SDK's newest revision: it knows none without `initialize`.
    assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
}

#[tokio::test]
async fn typescript_sdk_over_stdio() {
    let daemon = Daemon::start().await;
    let binary = env!("CARGO_BIN_EXE_swarmd");
    let seen = run(&daemon, &format!("stdio:{binary}:{}", daemon.base)).await;
    check(&seen);
}
