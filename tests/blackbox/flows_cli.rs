//! `swarmd flow …` against a real daemon: the flow list, a lint that
//! prints every problem and exits 1, a run started by name and waited
//! for, its tree and open wait shown, the wait answered with its own
//! token, the run list, and a cancel; a `merge` node's inner steps named
//! by their keys and a conflict it left shown on its line; lint refusing
//! what a run would (timeouts, retries, node instances) and passing a
//! variable only tested for.

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
    // The next page starts before a run named by the tail a table prints.
    let tail = format!("…{}", &second_id[second_id.len() - 8..]);
    let older = ["flow", "runs", "--before", &tail, "-o", "json"];
    let older = swarmd(&sw, dir, &admin, &older).await;
    assert!(older.status.success(), "{older:?}");
    let older: Value = serde_json::from_slice(&older.stdout).unwrap();
    let ids: Vec<&str> = older["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "{older}");
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

/// Lints `flow` from a file in `dir`: (exit code, stdout).
async fn lint_file(sw: &Swarmd, dir: &Path, name: &str, flow: &Value) -> (Option<i32>, String) {
    std::fs::write(dir.join(name), flow.to_string()).unwrap();
    let lint = swarmd(sw, dir, &sw.admin, &["flow", "lint", name]).await;
    (lint.status.code(), stdout(&lint))
}

#[tokio::test]
async fn lint_refuses_what_a_run_would_and_passes_a_variable_tested_for() {
    let sw = daemon(&[]).start().await;
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let path = |at: &str| json!({"op": "path", "at": at});
    let with = |extra: Value| {
        let mut step = step("echo", "x", "$.y");
        for (k, v) in extra.as_object().unwrap() {
            step[k] = v.clone();
        }
        step
    };

    // Timeouts a task's policy refuses, each named with its range.
    let timeouts = json!({"name": "t", "body": {"kind": "seq", "children": [
        with(json!({"timeout_secs": 0})), with(json!({"queue_timeout_secs": 0})),
        with(json!({"timeout_secs": 99_999_999}))]}});
    let (code, printed) = lint_file(&sw, dir, "timeouts.json", &timeouts).await;
    assert_eq!(code, Some(1), "{printed}");
    for line in [
        "/body/children/0/timeout_secs  bad_timeout  timeout_secs is 0, not 1 to 604800  (",
        "/body/children/1/queue_timeout_secs  bad_timeout  queue_timeout_secs is 0, not 1 to 604800  (",
        "/body/children/2/timeout_secs  bad_timeout  timeout_secs is 99999999, not 1 to 604800  (",
    ] {
        assert!(printed.lines().any(|l| l.starts_with(line)), "{printed}");
    }
    // Past what the IR reads: the field and its maximum, not serde's u32.
    let huge = json!({"name": "t", "body": with(json!({"timeout_secs": 5_000_000_000_u64}))});
    let (code, printed) = lint_file(&sw, dir, "huge.json", &huge).await;
    assert_eq!(code, Some(1), "{printed}");
    assert!(
        printed.starts_with("/body/timeout_secs  invalid_flow  ") && printed.contains("604800"),
        "{printed}"
    );
    assert!(!printed.contains("u32"), "{printed}");

    // Each try of a retried step counts against max_steps.
    let flaky = json!({"name": "t", "limits": {"max_steps": 2},
        "body": with(json!({"name": "flaky", "retry": {"attempts": 3}}))});
    let (code, printed) = lint_file(&sw, dir, "flaky.json", &flaky).await;
    assert_eq!(code, Some(1), "{printed}");
    assert!(printed.starts_with("/body  too_many_steps  "), "{printed}");

    // Nested loops past the node instance bound.
    let endless = |counter: &str, body: Value| {
        json!({"kind": "loop", "counter": path(counter), "max": 10_000,
            "cond": {"op": "lit", "value": true}, "body": body})
    };
    let let_x = json!({"kind": "let", "at": path("$.x"), "value": {"op": "lit", "value": 1}});
    let nested = json!({"name": "t", "body": endless("$.i", endless("$.j", let_x))});
    let (code, printed) = lint_file(&sw, dir, "nested.json", &nested).await;
    assert_eq!(code, Some(1), "{printed}");
    assert!(printed.starts_with("/body  too_many_nodes  "), "{printed}");

    // A write target names its op.
    let lit_target = json!({"name": "t", "body": {"kind": "let",
        "at": {"op": "lit", "value": "x"}, "value": {"op": "lit", "value": 1}}});
    let (code, printed) = lint_file(&sw, dir, "target.json", &lit_target).await;
    assert_eq!(code, Some(1), "{printed}");
    assert!(
        printed.starts_with(
            r#"/body/at  bad_write_path  a write target must be a "path", not a "lit"  ("#
        ),
        "{printed}"
    );

    // A variable written on one side of a branch may be tested for after
    // it; the run answers false where the other side ran.
    let maybe = json!({"name": "maybe", "output": path("$.seen"),
        "body": {"kind": "seq", "children": [
        {"kind": "branch", "cond": {"op": "exists", "at": "$.input.go"},
         "then": {"kind": "let", "at": path("$.maybe"), "value": {"op": "lit", "value": 1}},
         "else": {"kind": "seq", "children": []}},
        {"kind": "let", "at": path("$.seen"), "value": {"op": "template",
         "text": "{% if maybe is defined %}yes{% else %}no{% endif %}"}}]}});
    let (code, printed) = lint_file(&sw, dir, "maybe.json", &maybe).await;
    assert_eq!(
        (code, printed.starts_with("ok  sha256:")),
        (Some(0), true),
        "{printed}"
    );
    let run = ["flow", "run", "maybe.json", "--wait", "10", "-o", "json"];
    let ran = swarmd(&sw, dir, &sw.admin, &run).await;
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    let view: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(view["result"], "no", "{view}");
}
