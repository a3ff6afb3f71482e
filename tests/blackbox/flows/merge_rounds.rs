//! The `merge` node past its first conflict and through its inner steps'
//! failures (docs/flows.md, Merging coding branches), on the real binary
//! and real `git`: a resolved `sequence` conflict leaves the later
//! branches to another round onto the resolved head, the keys of every
//! round are the same when the run is read back after a kill -9, and the
//! node's `retry` and `timeout_secs` reach each inner step.

use serde_json::{Value, json};

use super::{node, run, start, write_files};
use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `clasher` writes its prompt to `notes.txt` (so `one` and `two`
/// conflict), except `three`, which writes `three.txt`; `resolver` drops
/// the conflict marker lines (keeping both sides) and commits; `flaky`
/// fails its first run and names candidate 0 after.
const AGENTS: &str = r#"
[agents.clasher]
kind = "process"
program = "/bin/sh"
args = ["-c", """
n=$(cat)
if [ "$n" = three ]; then f=three.txt; else f=notes.txt; fi
echo "$n" > "$f"
git add -A
git -c user.name=w -c user.email=w@w commit -qm "clasher $n"
printf '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.resolver]
kind = "process"
program = "/bin/sh"
args = ["-c", """
grep -v -e '^<<<<<<<' -e '^=======' -e '^>>>>>>>' notes.txt > resolved.txt
mv resolved.txt notes.txt
git add -A
git -c user.name=w -c user.email=w@w commit -qm "resolve"
printf '"resolved"'
"""]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.flaky]
kind = "process"
program = "/bin/sh"
args = ["-c", """
cat > /dev/null
if [ ! -e "@DIR@/judged-once" ]; then touch "@DIR@/judged-once"; echo "not yet" >&2; exit 1; fi
printf '{"winner": 0, "reason": "the first"}'
"""]
env = { PATH = "/usr/bin:/bin" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"

[flows_dir]
path = "@DIR@/flows"
"#;

/// Three clashers fanned out, then a `merge` node over their changes with
/// `strategy` and `extra` fields.
fn flow(name: &str, strategy: &str, extra: Value) -> Value {
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
             "body": {"kind": "step", "ref": "clasher",
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": path("$.said"), "changes": path("$.git")}},
            merge
        ]}
    })
}

/// The merge node's tries: (key, task id).
fn tries(view: &Value) -> Vec<(String, String)> {
    node(view, "/body/children/1")["tries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let text = |f: &str| t[f].as_str().unwrap_or_default().to_owned();
            (text("key"), text("task_id"))
        })
        .collect()
}

#[tokio::test]
async fn a_resolved_conflict_merges_the_remaining_branches_in_another_round() {
    let sw = Swarmd::new(AGENTS).env("PATH", PATH);
    let repo = make_repo(sw.dir());
    let merge_all = flow("merge-all", "sequence", json!({"on_conflict": "resolver"}));
    write_files(sw.dir(), &[("merge-all", merge_all)]);
    let mut sw = sw.start().await;
    let main = git(&repo, &["rev-parse", "main"]);
    let (status, body) = start(&sw, json!({"flow": "merge-all", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run(&sw, &id, 90).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let merged = &view["result"];
    let rounds = merged["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{merged}");
    // Round 1 stopped at `two`, which the resolver resolved; round 2
    // merged `three` onto the resolved head, cleanly.
    let first = &rounds[0]["merge"];
    assert_eq!(first["applied"].as_array().unwrap().len(), 1, "{merged}");
    assert_eq!(first["conflict"]["files"], json!(["notes.txt"]));
    let resolved = &rounds[0]["resolved"];
    assert_eq!(resolved["base"], first["conflict"]["work_head"], "{merged}");
    let second = &rounds[1]["merge"];
    assert_eq!(second["base"], resolved["head"], "{merged}");
    assert_eq!(second["applied"].as_array().unwrap().len(), 1, "{merged}");
    assert_eq!(second["conflict"], Value::Null);
    assert!(rounds[1].get("resolved").is_none(), "{merged}");
    assert!(merged.get("conflict").is_none(), "{merged}");
    assert_eq!(merged["merge"], *first);
    assert_eq!(merged["resolved"], *resolved);
    assert_eq!(merged["branch"], second["branch"]);
    assert_eq!(merged["head"], second["head"]);

    // The final branch holds all three: both sides of notes.txt, no
    // markers, and three.txt.
    let branch = merged["branch"].as_str().unwrap();
    assert_eq!(
        git(&repo, &["rev-parse", branch]),
        merged["head"].as_str().unwrap()
    );
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    let mut lines: Vec<&str> = notes.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["one", "two"], "{notes}");
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:three.txt")]),
        "three"
    );
    let subjects = git(&repo, &["log", "--format=%s", branch]);
    for n in ["one", "two", "three"] {
        let commits = subjects.lines().filter(|s| *s == format!("clasher {n}"));
        assert_eq!(commits.count(), 1, "{subjects}");
    }
    assert_eq!(git(&repo, &["rev-parse", "main"]), main, "main never moves");

    let keys = tries(&view);
    let names: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(
        names,
        [
            "/body/children/1/merge",
            "/body/children/1/resolve",
            "/body/children/1/merge-2"
        ]
    );

    // Read back from its journal after a kill -9, the run replays to the
    // same keys, tasks and result.
    sw.kill9().await;
    sw.restart().await;
    let again = run(&sw, &id, 30).await;
    assert_eq!(again["status"], "passed", "{again}");
    assert_eq!(tries(&again), keys);
    assert_eq!(again["result"], *merged);
}

#[tokio::test]
async fn a_merge_nodes_retry_and_timeout_reach_its_inner_steps() {
    let sw = Swarmd::new(AGENTS).env("PATH", PATH);
    let repo = make_repo(sw.dir());
    let extra = json!({"judge": "flaky", "retry": {"attempts": 2}, "timeout_secs": 120});
    let best = flow("best", "pick_best", extra);
    write_files(sw.dir(), &[("best", best)]);
    let sw = sw.start().await;
    let file = sw.dir().join("flows/best.json").display().to_string();
    let linted = sw
        .cli(&[
            "flow", "lint", &file, "--url", &sw.base, "--token", &sw.admin,
        ])
        .await;
    assert!(linted.starts_with("ok"), "{linted}");

    let (status, body) = start(&sw, json!({"flow": "best", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 90).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());
    assert_eq!(view["result"]["verdict"]["reason"], "the first");

    // The judge failed once and its retry passed; each inner task runs
    // with the node's timeout.
    let keys = tries(&view);
    let names: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(
        names,
        [
            "/body/children/1/judge",
            "/body/children/1/judge~2",
            "/body/children/1/merge"
        ]
    );
    for (key, task) in &keys {
        let task = sw.task(task).await;
        assert_eq!(task["policy"]["attempt_timeout_secs"], 120, "{key}: {task}");
    }
    let branch = view["result"]["branch"].as_str().unwrap();
    assert_eq!(git(&repo, &["show", &format!("{branch}:notes.txt")]), "one");
}
