//! `swarmd flow …` against a real daemon: the flow list, a lint that
//! prints every problem and exits 1, a run started by name and waited
//! for, its tree and open wait shown, the wait answered with its own
//! token, the run list, and a cancel.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::Swarmd;
use crate::flows::{daemon, step};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// The CLI in `cwd` with no environment, the daemon's URL and `token`.
async fn swarmd(sw: &Swarmd, cwd: &Path, token: &str, args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .args(["--url", &sw.base, "--token", token])
        .current_dir(cwd)
        .env_clear()
        .output()
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Echo a step, then wait for an approval.
fn approval() -> Value {
    json!({"name": "approval", "description": "Echo, then ask.",
    "body": {"kind": "seq", "children": [
        step("echo", "{{ input.task }}", "$.said"),
        {"kind": "wait", "name": "approve",
         "prompt": {"op": "lit", "value": "Ship it?"}, "out": {"op": "path", "at": "$.ok"}},
    ]}})
}

#[tokio::test]
async fn a_flow_is_linted_run_shown_answered_listed_and_cancelled_from_the_cli() {
    let sw = daemon(&[("approval", approval())]).start().await;
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let admin = sw.admin.clone();

    let list = swarmd(&sw, dir, &admin, &["flow", "list"]).await;
    assert!(list.status.success(), "{list:?}");
    assert!(stdout(&list).contains("approval") && stdout(&list).contains("Echo, then ask."));

    let bad = json!({"name": "Bad Name", "body": step("nobody", "x", "$.y")});
    std::fs::write(dir.join("bad.json"), bad.to_string()).unwrap();
    let lint = swarmd(&sw, dir, &admin, &["flow", "lint", "bad.json"]).await;
    assert_eq!(lint.status.code(), Some(1), "{lint:?}");
    let problems = stdout(&lint);
    assert!(
        problems.lines().any(|l| l.starts_with("/name  bad_name  ")),
        "{problems}"
    );
    assert!(
        problems
            .lines()
            .any(|l| l.starts_with("/body/ref  unknown_agent  ")),
        "{problems}"
    );

    let input = r#"{"task": "hello"}"#;
    let run = ["flow", "run", "approval", "--input", input, "--wait", "1"];
    let waited = swarmd(&sw, dir, &admin, &run).await;
    assert_eq!(waited.status.code(), Some(3), "{waited:?}");
    let shown = stdout(&waited);
    let id = shown
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("id"))
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("R-"), "{shown}");
    assert!(shown.contains("  ✓ step  passed  task …"), "{shown}");
    assert!(shown.contains("approve  open  Ship it?"), "{shown}");
    assert!(
        shown.contains(&format!("answer: swarmd flow answer {id} approve")),
        "{shown}"
    );

    let view = swarmd(&sw, dir, &admin, &["flow", "show", &id, "-o", "json"]).await;
    let view: Value = serde_json::from_slice(&view.stdout).unwrap();
    let token = view["waits"][0]["token"].as_str().unwrap().to_owned();
    let answered = swarmd(
        &sw,
        dir,
        &token,
        &["flow", "answer", &id, "approve", "true"],
    )
    .await;
    assert!(answered.status.success(), "{answered:?}");
    let done = swarmd(&sw, dir, &admin, &["flow", "show", &id, "--wait", "10"]).await;
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    assert!(
        stdout(&done).contains("status    passed"),
        "{}",
        stdout(&done)
    );

    let second = swarmd(
        &sw,
        dir,
        &admin,
        &["flow", "run", "approval", "--input", input],
    )
    .await;
    let second_id = stdout(&second).trim().to_owned();
    assert!(second_id.starts_with("R-"), "{second:?}");
    let cancel = ["flow", "cancel", &second_id, "--reason", "enough"];
    let cancelled = swarmd(&sw, dir, &admin, &cancel).await;
    assert!(
        stdout(&cancelled).contains("status    cancelled"),
        "{cancelled:?}"
    );

    let runs = swarmd(
        &sw,
        dir,
        &admin,
        &["flow", "runs", "--status", "passed", "-o", "json"],
    )
    .await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let table = swarmd(&sw, dir, &admin, &["flow", "runs"]).await;
    assert!(stdout(&table).starts_with("ID "), "{table:?}");
    assert_eq!(stdout(&table).lines().count(), 3, "{}", stdout(&table));
}
