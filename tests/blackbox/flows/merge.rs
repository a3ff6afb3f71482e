//! A flow that fans out three coding agents in worktrees of one repository
//! and merges their branches with a `merge` agent step (docs/branches.md,
//! Merging branches), on the real binary and real `git`.
//!
//! Each coder's step asks for its task's git `changes` (the branch, head
//! and files its attempt's worktree left), so the coders need not report
//! their branches: the flow hands the branches to the merge step.

use serde_json::{Value, json};

use super::{run, start, write_files};
use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo};

/// `coder` writes `file-<prompt>.txt` in its worktree, commits it, and
/// answers `done`; `merge` merges into new branches
/// of the same repository, from `main`.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
n=$(cat)
echo "change $n" > "file-$n.txt"
git add -A
git -c user.name=w -c user.email=w@w commit -qm "coder $n"
printf '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"

[flows_dir]
path = "@DIR@/flows"
"#;

/// Three coders at once, then every branch merged in order.
fn flow() -> Value {
    json!({
        "name": "merge-three",
        "output": {"op": "path", "at": "$.merged"},
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": [1, 2, 3]},
             "bind": {"op": "path", "at": "$.n"}, "concurrency": 3, "join": "all",
             "out": {"op": "path", "at": "$.tries"},
             "body": {"kind": "step", "ref": "coder",
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": {"op": "path", "at": "$.said"},
                      "changes": {"op": "path", "at": "$.git"}}},
            {"kind": "let", "at": {"op": "path", "at": "$.merge_in.branches"},
             "value": {"op": "select", "at": "$.tries[*].git.branch"}},
            {"kind": "let", "at": {"op": "path", "at": "$.merge_in.strategy"},
             "value": {"op": "lit", "value": "sequence"}},
            {"kind": "step", "ref": "merge", "name": "merge",
             "in": {"op": "path", "at": "$.merge_in"},
             "out": {"op": "path", "at": "$.merged"}}
        ]}
    })
}

#[tokio::test]
async fn a_merge_step_joins_the_fanned_out_branches_into_one() {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    write_files(sw.dir(), &[("merge-three", flow())]);
    let sw = sw.start().await;
    let main = git(&repo, &["rev-parse", "main"]);

    let (status, body) = start(&sw, json!({"flow": "merge-three", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run(&sw, &id, 60).await;
    assert_eq!(view["status"], "passed", "{view}");

    let merged = &view["result"];
    let branch = merged["branch"].as_str().unwrap();
    assert!(branch.starts_with("swarmd/merge-"), "{merged}");
    assert_eq!(merged["strategy"], "sequence");
    assert_eq!(merged["base"], main.as_str());
    assert_eq!(merged["conflict"], Value::Null);
    assert_eq!(merged["applied"].as_array().unwrap().len(), 3, "{merged}");

    // The new branch holds all three files; main is where it was.
    assert_eq!(
        git(&repo, &["rev-parse", branch]),
        merged["head"].as_str().unwrap()
    );
    let files = git(&repo, &["ls-tree", "--name-only", branch]);
    for n in 1..=3 {
        assert!(files.contains(&format!("file-{n}.txt")), "{files}");
    }
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
    // One merge commit per branch, each by swarmd.
    let merges = git(
        &repo,
        &[
            "log",
            "--merges",
            "--format=%an",
            &format!("{main}..{branch}"),
        ],
    );
    assert_eq!(
        merges.lines().collect::<Vec<_>>(),
        ["swarmd"; 3],
        "{merges}"
    );
}
