//! The MCP server driven by a client we did not write: the official Python
//! SDK (`mcp` from PyPI, in the venv `scripts/mcp-client-env.sh` prepares)
//! runs `tests/blackbox/mcp/client.py` against the real binary, over
//! Streamable HTTP at `/mcp` and over stdio through `swarmd mcp`, on the
//! current protocol revision (2026-07-28) and the initialize-era one
//! (2025-11-25). The script prints what it saw as JSON; the tests assert on
//! it: `flows` the tools at work (listing, fan-out, progress, modes, a
//! drain), `access` who may call them and how refusals look, `delegate`
//! a MainAI acting on delegated work through MCP alone, `agent_tools` and
//! `long_wait` agents as tools and a 60 s wait, `rmcp_client` rmcp's own
//! client, `session` the operator session `swarmd mcp` holds (login,
//! leave, resume, a role taken), `lifecycle` the relay over time (pings,
//! a daemon restart, signals, a refusal through the relay), `ts_client`
//! the official TypeScript SDK (Claude Code's) over both transports,
//! `large_values` and `large_runs` answers bounded whatever a task or a
//! flow run holds, `restart_wait` and `resume_ids` streams across a
//! daemon restart. This file holds what they share.
//!
//! Over stdio, every run gets a state directory of its own
//! (`XDG_STATE_HOME`), so the relay's session file never outlives the test.
//!
//! The test config adds `slow` (answers after 1.5 s), `sleepy` (runs 30 s)
//! and `mcp.progress_ms = 200`, so a wait longer than the progress interval
//! takes seconds.

mod access;
mod agent_tools;
mod delegate;
mod flow_tools;
mod flows;
mod large_runs;
mod large_values;
mod lifecycle;
mod long_wait;
mod output_cursor;
mod restart_wait;
mod resume_ids;
mod rmcp_client;
mod session;
mod ts_client;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::daemon::{Swarmd, repo_root};
use crate::harness::Daemon;

pub(super) const MODERN: &str = "2026-07-28";
pub(super) const LEGACY: &str = "legacy";

pub(super) const EXTRA: &str = r#"
[agents.slow]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 1.5; cat"]
env = { PATH = "/usr/bin:/bin" }
description = "Answers its prompt after 1.5 s"
input_schema = { type = ["object", "null"] }

[agents.sleepy]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[mcp]
progress_ms = 200
upstream_aliases = true
"#;

/// The venv's python, prepared once per test run; a missing python3 or a
/// failed install fails the test that needs it, with the script's message.
pub(super) fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::installed(
        &PYTHON,
        "scripts/mcp-client-env.sh",
        "the Python MCP client",
    )
}

/// How the client reaches the daemon.
#[derive(Debug, Clone, Copy)]
pub(super) enum Via {
    Http,
    Stdio,
}

/// A running daemon of either launcher.
pub(super) trait Served {
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

pub(super) fn transport(daemon: &impl Served, via: Via) -> String {
    match via {
        Via::Http => format!("http:{}", daemon.base()),
        Via::Stdio => format!("stdio:{}:{}", env!("CARGO_BIN_EXE_swarmd"), daemon.base()),
    }
}

/// The client script running one scenario; `env` is added last. The
/// returned directory is the relay's `XDG_STATE_HOME`: keep it alive.
pub(super) fn client(
    daemon: &impl Served,
    via: Via,
    mode: &str,
    scenario: &str,
    token: &str,
    env: &[(&str, &str)],
) -> (Command, tempfile::TempDir) {
    let script = repo_root().join("tests/blackbox/mcp/client.py");
    let state = tempfile::tempdir().unwrap();
    let mut command = Command::new(python());
    command
        .arg(script)
        .args([transport(daemon, via).as_str(), mode, scenario])
        .env("SWARMD_TOKEN", token)
        .env("XDG_STATE_HOME", state.path())
        .env("SWARMD_BASE", daemon.base())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    (command, state)
}

/// Runs one scenario of the client script and returns what it printed.
pub(super) async fn run(
    daemon: &impl Served,
    via: Via,
    mode: &str,
    scenario: &str,
    token: &str,
    env: &[(&str, &str)],
) -> Value {
    let (mut command, _state) = client(daemon, via, mode, scenario, token, env);
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("the MCP client finished in time")
        .expect("the MCP client ran");
    printed(daemon, scenario, &output)
}

/// What a finished client printed; fails with its stderr unless it succeeded.
pub(super) fn printed(daemon: &impl Served, scenario: &str, output: &Output) -> Value {
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
pub(super) async fn call(
    daemon: &impl Served,
    via: Via,
    token: &str,
    tool: &str,
    args: Value,
) -> Value {
    let args = args.to_string();
    let env = [("MCP_TOOL", tool), ("MCP_ARGS", args.as_str())];
    run(daemon, via, MODERN, "call", token, &env).await
}

/// The `{error, code}` of an isError result.
pub(super) fn tool_error(outcome: &Value) -> Value {
    assert_eq!(outcome["is_error"], true, "{outcome}");
    let text = outcome["text"][0].as_str().expect("a text block");
    let body: Value = serde_json::from_str(text).expect("the daemon's JSON error");
    assert!(body["error"].is_string(), "{body}");
    body
}
