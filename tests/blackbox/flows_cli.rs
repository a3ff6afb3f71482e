//! `swarmd flow …` against a real daemon: the flow list, a lint that
//! prints every problem and exits 1, a run started by name and waited
//! for, its tree and open wait shown, the wait answered with its own
//! token, the run list, and a cancel; a `merge` node's inner steps named
//! by their keys and a conflict it left shown on its line.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::Swarmd;
use crate::flows::{daemon, step, write_files};
use crate::worktrees::make_repo;

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

/// `clasher` writes its prompt to `notes.txt` in its worktree and commits
/// it (so two of them conflict); `judge` names the first candidate;
/// `merge` merges into new branches of the same repository.
const MERGE_AGENTS: &str = r#"
[agents.clasher]
kind = "process"
program = "/bin/sh"
args = ["-c", """
cat > notes.txt
git add -A
git -c user.name=w -c user.email=w@w commit -qm "clasher"
printf '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.judge]
kind = "process"
program = "/bin/sh"
args = ["-c", "cat > /dev/null; printf '{\"winner\": 0, \"reason\": \"first\"}'"]
env = { PATH = "/usr/bin:/bin" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"

[flows_dir]
path = "@DIR@/flows"
"#;

/// Two clashers at once, then a `merge` node with `strategy` and `extra`.
fn merge_flow(name: &str, strategy: &str, extra: Value) -> Value {
    let path = |at: &str| json!({"op": "path", "at": at});
    let mut merge = json!({"kind": "merge", "ref": "merge", "strategy": strategy,
        "branches": {"op": "select", "at": "$.tries[*].git"}, "out": path("$.merged")});
    for (k, v) in extra.as_object().unwrap() {
        merge[k] = v.clone();
    }
    json!({"name": name, "output": path("$.merged"),
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": ["one", "two"]},
             "bind": path("$.n"), "concurrency": 2, "join": "all", "out": path("$.tries"),
             "body": {"kind": "step", "ref": "clasher",
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": path("$.said"), "changes": path("$.git")}},
            merge]}})
}

#[tokio::test]
async fn show_names_a_merges_inner_steps_and_the_conflict_it_left() {
    let sw = Swarmd::new(MERGE_AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    let flows = [
        (
            "best",
            merge_flow("best", "pick_best", json!({"judge": "judge"})),
        ),
        ("all", merge_flow("all", "sequence", json!({}))),
    ];
    write_files(sw.dir(), &flows);
    let sw = sw.start().await;
    let cwd = tempfile::tempdir().unwrap();
    let (dir, admin) = (cwd.path(), sw.admin.clone());

    let best = ["flow", "run", "best", "--wait", "60"];
    let shown = swarmd(&sw, dir, &admin, &best).await;
    assert_eq!(shown.status.code(), Some(0), "{shown:?}\n{}", sw.log());
    let text = stdout(&shown);
    let merge_at = text
        .lines()
        .position(|l| l.trim_start().starts_with("✓ merge  passed"))
        .unwrap_or_else(|| panic!("no merge line in\n{text}"));
    let inner: Vec<&str> = text.lines().skip(merge_at + 1).take(2).collect();
    assert!(inner[0].trim_start().starts_with("judge  task …"), "{text}");
    assert!(inner[1].trim_start().starts_with("merge  task …"), "{text}");
    assert!(!text.contains("try 1"), "{text}");

    let all = ["flow", "run", "all", "--wait", "60"];
    let shown = swarmd(&sw, dir, &admin, &all).await;
    assert_eq!(shown.status.code(), Some(0), "{shown:?}\n{}", sw.log());
    let text = stdout(&shown);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("✓ merge  passed"))
        .unwrap_or_else(|| panic!("no merge line in\n{text}"));
    assert!(
        line.contains("passed, conflict in notes.txt (branch swarmd/"),
        "{line}"
    );
    assert!(line.contains("; work branch "), "{line}");
}
