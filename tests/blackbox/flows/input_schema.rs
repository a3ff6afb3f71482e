//! `swarmd flow lint` against a daemon whose agent has an `input_schema`:
//! a step whose literal `in` the schema refuses, or whose string `in`
//! leaves the task without an input, is refused as `input_schema` at its
//! pointer with the schema's message, a run of it is refused as the lint
//! is, and a step whose literal fits lints clean and runs.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use super::write_files;
use crate::daemon::Swarmd;

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// `typed` prints its prompt and wants `{files: [string, …]}`.
const AGENTS: &str = r#"
[agents.typed]
kind = "process"
program = "/bin/cat"
input_schema = { type = "object", required = ["files"], properties = { files = { type = "array", items = { type = "string" } } } }

[flows_dir]
path = "@DIR@/flows"
"#;

/// The CLI in `cwd` with no environment, as the admin.
async fn swarmd(sw: &Swarmd, cwd: &Path, args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .args(["--url", &sw.base, "--token", &sw.admin])
        .current_dir(cwd)
        .env_clear()
        .output()
        .await
        .unwrap()
}

fn typed(input: Value, out: &str) -> Value {
    json!({"kind": "step", "ref": "typed", "in": {"op": "lit", "value": input},
           "out": {"op": "path", "at": out}})
}

/// Writes `flow` to `name` in `dir` and runs `swarmd flow <verb> name …`:
/// (exit code, stdout, stderr).
async fn flow(
    sw: &Swarmd,
    dir: &Path,
    name: &str,
    flow: &Value,
    args: &[&str],
) -> (Option<i32>, String, String) {
    std::fs::write(dir.join(name), flow.to_string()).unwrap();
    let mut command = vec!["flow"];
    command.extend_from_slice(&args[..1]);
    command.push(name);
    command.extend_from_slice(&args[1..]);
    let output = swarmd(sw, dir, &command).await;
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn lint_refuses_a_literal_input_the_agent_schema_refuses_and_passes_one_that_fits() {
    let sw = Swarmd::new(AGENTS);
    write_files(sw.dir(), &[]);
    let sw = sw.start().await;
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();

    let bad = json!({"name": "bad", "body": {"kind": "seq", "children": [
        typed(json!({"files": ["a.rs", 7]}), "$.a"),
        typed(json!("fix the parser"), "$.b"),
        typed(json!({"files": ["a.rs"]}), "$.c")]}});
    let (code, printed, _) = flow(&sw, dir, "bad.json", &bad, &["lint"]).await;
    assert_eq!(code, Some(1), "{printed}");
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 2, "{printed}");
    assert!(
        lines[0].starts_with(
            "/body/children/0/in/value/files/1  input_schema  agent `typed`'s input_schema \
             refuses the input at `/files/1`: 7 is not of type \"string\"  ("
        ),
        "{printed}"
    );
    assert!(
        lines[1]
            .starts_with("/body/children/1/in  input_schema  a string `in` (a literal or a template) is the task's prompt")
            && lines[1].contains("null is not of type \"object\""),
        "{printed}"
    );

    // A run of it is refused as the lint is, before any task starts.
    let (code, _, refused) = flow(&sw, dir, "bad.json", &bad, &["run", "--wait", "5"]).await;
    assert_eq!(code, Some(1), "{refused}");
    assert!(refused.contains("input_schema"), "{refused}");

    let good = json!({"name": "good", "output": {"op": "path", "at": "$.c"},
        "body": typed(json!({"files": ["a.rs", "b.rs"]}), "$.c")});
    let (code, printed, _) = flow(&sw, dir, "good.json", &good, &["lint"]).await;
    assert_eq!(
        (code, printed.starts_with("ok  sha256:")),
        (Some(0), true),
        "{printed}"
    );
    let (code, shown, stderr) = flow(
        &sw,
        dir,
        "good.json",
        &good,
        &["run", "--wait", "20", "-o", "json"],
    )
    .await;
    assert_eq!(code, Some(0), "{shown}{stderr}");
    let view: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(view["status"], "passed", "{view}");
}
