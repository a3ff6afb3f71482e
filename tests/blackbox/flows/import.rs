//! An upstream Blueprint runs on the daemon: `swarmd flow import` turns
//! mlua-swarm's verdict-loop sample into swarmd IR, which the daemon runs
//! with stand-in Lua agents of the Blueprint's names.

use serde_json::{Value, json};
use tokio::process::Command;

use super::{run, start};
use crate::daemon::{Swarmd, repo_root};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

#[tokio::test]
async fn an_imported_upstream_blueprint_runs_to_its_end() {
    let fixture = repo_root().join("crates/flow/tests/fixtures/blueprints/02-verdict-loop.json");
    let output = Command::new(BINARY)
        .args(["flow", "import"])
        .arg(&fixture)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let flow: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(flow["name"], "sample-verdict-loop", "{flow}");

    let mut agents = String::new();
    for name in [
        "mock-scout",
        "mock-planner",
        "mock-resolver",
        "mock-gate",
        "mock-commit",
        "mock-escalate",
    ] {
        agents.push_str(&format!(
            "[agents.{name}]\nkind = \"lua\"\nscript = \"@DIR@/{name}.lua\"\n\n"
        ));
    }
    let sw = Swarmd::new(&agents);
    for name in [
        "mock-scout",
        "mock-planner",
        "mock-resolver",
        "mock-commit",
        "mock-escalate",
    ] {
        std::fs::write(
            sw.dir().join(format!("{name}.lua")),
            format!("return \"{name} ok\"\n"),
        )
        .unwrap();
    }
    std::fs::write(sw.dir().join("mock-gate.lua"), "return \"PASS\"\n").unwrap();
    let sw = sw.start().await;
    let (status, body) = start(&sw, json!({"flow": flow, "input": {"verdict": "BLOCKED"}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"]["commit"], "mock-commit ok", "{view}");

    // What cannot be converted is named, and the command fails.
    let bad = sw.dir().join("bad.json");
    std::fs::write(&bad, r#"{"id": "x", "flow": {"kind": "nope"}}"#).unwrap();
    let output = Command::new(BINARY)
        .args(["flow", "import"])
        .arg(&bad)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/flow/kind") && stderr.contains("unknown_kind"),
        "{stderr}"
    );
}
