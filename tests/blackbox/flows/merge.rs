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

/// `clasher` writes its prompt to `notes.txt` (so two of them conflict);
/// `resolver` notes how many conflict markers its checkout started with,
/// drops the marker lines (keeping both sides) and commits.
const CONFLICT_AGENTS: &str = r#"
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

[agents.resolver]
kind = "process"
program = "/bin/sh"
args = ["-c", """
grep -c '^<<<<<<<' notes.txt > "@DIR@/markers-seen"
grep -v -e '^<<<<<<<' -e '^=======' -e '^>>>>>>>' notes.txt > resolved.txt
mv resolved.txt notes.txt
git add -A
git -c user.name=w -c user.email=w@w commit -qm "resolve"
printf '"resolved"'
"""]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"

[flows_dir]
path = "@DIR@/flows"
"#;

/// Two clashing coders, merged in sequence; on a conflict a resolver starts
/// from the conflict's work branch.
fn resolve_flow() -> Value {
    let path = |at: &str| json!({"op": "path", "at": at});
    json!({
        "name": "merge-or-resolve",
        "output": path("$.done"),
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": ["one", "two"]},
             "bind": path("$.n"), "concurrency": 2, "join": "all", "out": path("$.tries"),
             "body": {"kind": "step", "ref": "clasher",
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": path("$.said"), "changes": path("$.git")}},
            {"kind": "let", "at": path("$.merge_in.branches"),
             "value": {"op": "select", "at": "$.tries[*].git.branch"}},
            {"kind": "step", "ref": "merge", "name": "merge",
             "in": path("$.merge_in"), "out": path("$.merged")},
            {"kind": "branch",
             "cond": {"op": "exists", "at": "$.merged.conflict.work_branch"},
             "then": {"kind": "step", "ref": "resolver", "name": "resolve",
                      "in": {"op": "template", "text": "resolve {{ merged.conflict.files }}"},
                      "start_from": path("$.merged.conflict.work_branch"),
                      "out": path("$.said"), "changes": path("$.done")},
             "else": {"kind": "let", "at": path("$.done"), "value": path("$.merged")}}
        ]}
    })
}

#[tokio::test]
async fn a_conflict_is_resolved_by_a_step_that_starts_from_its_work_branch() {
    let sw = Swarmd::new(CONFLICT_AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    write_files(sw.dir(), &[("merge-or-resolve", resolve_flow())]);
    let sw = sw.start().await;
    let main = git(&repo, &["rev-parse", "main"]);

    let (status, body) = start(&sw, json!({"flow": "merge-or-resolve", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let done = &view["result"];
    let work_head = {
        let merge_node = super::node(&view, "/body/children/2");
        let merged = &merge_node["tries"][0]["output"];
        let conflict = &merged["conflict"];
        assert_eq!(conflict["files"], json!(["notes.txt"]), "{merged}");
        let work = conflict["work_branch"].as_str().unwrap();
        assert_eq!(
            work,
            format!("{}-conflict", merged["branch"].as_str().unwrap())
        );
        conflict["work_head"].as_str().unwrap().to_owned()
    };
    // The resolver's checkout started at the conflict, markers and all.
    assert_eq!(done["base"], work_head.as_str(), "{done}");
    let seen = std::fs::read_to_string(sw.dir().join("markers-seen")).unwrap();
    assert_eq!(seen.trim(), "1");
    // Its branch holds both sides, no markers, and both coders' commits.
    let branch = done["branch"].as_str().unwrap();
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    let mut lines: Vec<&str> = notes.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["one", "two"], "{notes}");
    let subjects = git(&repo, &["log", "--format=%s", branch]);
    let clashers = subjects.lines().filter(|s| *s == "clasher").count();
    assert_eq!(clashers, 2, "{subjects}");
    assert_eq!(git(&repo, &["rev-parse", "main"]), main, "main never moves");
}

/// The `merge` node over a fan-out's changes: `flow` with its `merge`
/// node's strategy and extra fields.
fn merge_node_flow(name: &str, coder: &str, strategy: &str, extra: Value) -> Value {
    let path = |at: &str| json!({"op": "path", "at": at});
    let mut merge = json!({"kind": "merge", "ref": "merge", "strategy": strategy,
        "branches": {"op": "select", "at": "$.tries[*].git"}, "out": path("$.merged")});
    for (k, v) in extra.as_object().unwrap() {
        merge[k] = v.clone();
    }
    json!({
        "name": name,
        "output": path("$.merged"),
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": ["one", "two", "three"]},
             "bind": path("$.n"), "concurrency": 3, "join": "all", "out": path("$.tries"),
             "body": {"kind": "step", "ref": coder,
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": path("$.said"), "changes": path("$.git")}},
            merge
        ]}
    })
}

#[tokio::test]
async fn a_merge_node_asks_its_judge_and_merges_the_winner() {
    // The judge names the second candidate, by index, with its reason.
    let agents = format!(
        "{AGENTS}\n{}",
        r#"
[agents.judge]
kind = "process"
program = "/bin/sh"
args = ["-c", "cat > /dev/null; printf '{\"winner\": 1, \"reason\": \"the second reads best\"}'"]
env = { PATH = "/usr/bin:/bin" }
"#
    );
    let sw = Swarmd::new(&agents).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    let flow = merge_node_flow("best", "coder", "pick_best", json!({"judge": "judge"}));
    write_files(sw.dir(), &[("best", flow)]);
    let sw = sw.start().await;
    let (status, body) = start(&sw, json!({"flow": "best", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let merged = &view["result"];
    assert_eq!(merged["verdict"]["reason"], "the second reads best");
    assert_eq!(merged["strategy"], "pick_best");
    let winner = merged["merge"]["applied"][0]["branch"].as_str().unwrap();
    // The judge saw every candidate in item order; the winner is item 1's.
    let node = super::node(&view, "/body/children/1");
    let tries: Vec<&str> = node["tries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(tries, ["/body/children/1/judge", "/body/children/1/merge"]);
    let second = super::node(&view, "/body/children/0/body[1]")["tries"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let short = &second[second.len() - 8..];
    assert!(winner.contains(short), "{winner} is not {second}'s branch");
    let branch = merged["branch"].as_str().unwrap();
    assert_eq!(
        git(&repo, &["rev-parse", branch]),
        merged["head"].as_str().unwrap()
    );
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:file-two.txt")]),
        "change two"
    );
}

#[tokio::test]
async fn a_merge_node_resolves_its_conflict_with_its_on_conflict_agent() {
    let sw = Swarmd::new(CONFLICT_AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    let flow = merge_node_flow(
        "merge-all",
        "clasher",
        "sequence",
        json!({"on_conflict": "resolver"}),
    );
    write_files(sw.dir(), &[("merge-all", flow)]);
    let sw = sw.start().await;
    let main = git(&repo, &["rev-parse", "main"]);
    let (status, body) = start(&sw, json!({"flow": "merge-all", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let merged = &view["result"];
    let conflict = &merged["merge"]["conflict"];
    assert_eq!(conflict["files"], json!(["notes.txt"]), "{merged}");
    // The resolver started at the conflict.
    assert_eq!(
        merged["resolved"]["base"], conflict["work_head"],
        "{merged}"
    );
    // All three clash: round 1 stops at the second, round 2 (onto the
    // resolved head) at the third, and the last resolution is the result.
    let rounds = merged["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{merged}");
    assert_eq!(rounds[0]["resolved"], merged["resolved"]);
    assert_eq!(rounds[1]["merge"]["base"], merged["resolved"]["head"]);
    assert_eq!(merged["branch"], rounds[1]["resolved"]["branch"]);
    assert_eq!(merged["head"], rounds[1]["resolved"]["head"]);
    let branch = merged["branch"].as_str().unwrap();
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    assert!(!notes.contains("<<<<<<<"), "{notes}");
    let mut lines: Vec<&str> = notes.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["one", "three", "two"], "{notes}");
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
}
