//! Sessions as values and budgets in flows (docs/flows.md, Sessions and
//! budgets) on the real binary, real `git` and a stand-in Claude CLI that
//! replays a recorded transcript (its session, its usage and its cost):
//! a later step continues an earlier step's agent in its CLI session and on
//! its branch, and a fan-out's budget stops the fan-out and hands the run to
//! the `try` around it.

use serde_json::{Value, json};

use super::{node, run, start, write_files};
use crate::daemon::{Swarmd, repo_root};
use crate::worktrees::{git, make_repo};

/// The session the replayed transcript reports.
const SESSION: &str = "5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10";
/// What one replay costs, as its `result` line says.
const COST: f64 = 0.0421;

/// `coder` stands in for Claude Code in a worktree: it writes down the
/// session it resumes and whether `first.txt` is in its checkout, commits
/// `first.txt` when its prompt is `first`, and replays a recorded
/// transcript. `note` prints its prompt (as `{raw, stderr}`).
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
prompt=$(cat)
if [ -e first.txt ]; then first=yes; else first=no; fi
echo "resume=${SWARM_RESUME_SESSION-unset} first=$first" > "@DIR@/seen-$SWARM_TASK_ID"
if [ "$prompt" = first ]; then
  echo one > first.txt
  git add first.txt
  git -c user.name=w -c user.email=w@w commit -qm "first"
fi
cat "@FIXTURES@/claude-tool-run.jsonl"
''', "claude", "-p", "--output-format", "stream-json", "--verbose"]
resume_args = ["--resume", "{resume_session}"]
stream = "claude"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.note]
kind = "process"
program = "/bin/cat"

[flows_dir]
path = "@DIR@/flows"
"#;

fn path(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

/// Write, review, then fix in the writer's own session.
fn review_then_fix() -> Value {
    json!({
        "name": "review-then-fix",
        "body": {"kind": "seq", "children": [
            {"kind": "step", "ref": "coder", "in": {"op": "lit", "value": "first"},
             "out": path("$.said"), "session": path("$.writer")},
            {"kind": "step", "ref": "note",
             "in": {"op": "template", "text": "review {{ writer.branch }}"},
             "out": path("$.review")},
            {"kind": "step", "ref": "coder",
             "in": {"op": "template", "text": "fix: {{ review }}"},
             "out": path("$.fixed"), "continue": path("$.writer"),
             "session": path("$.fixer")}
        ]}
    })
}

/// Three coders one at a time under a budget of two and a half replays.
fn over_budget() -> Value {
    json!({
        "name": "over-budget",
        "body": {"kind": "try",
            "body": {"kind": "fanout", "items": {"op": "lit", "value": [1, 2, 3]},
                "bind": path("$.n"), "join": "all", "concurrency": 1,
                "budget": {"max_cost_usd": COST * 2.5},
                "out": path("$.all"),
                "body": {"kind": "step", "ref": "coder", "name": "try",
                         "in": {"op": "template", "text": "{{ n }}"}, "out": path("$.r")}},
            "catch": {"kind": "step", "ref": "note",
                      "in": {"op": "template", "text": "over: {{ why }}"}, "out": path("$.note")},
            "err_at": path("$.why")}
    })
}

async fn daemon() -> Swarmd {
    let fixtures = repo_root().join("tests/fixtures/cli-streams");
    let agents = AGENTS.replace("@FIXTURES@", &fixtures.display().to_string());
    let sw = Swarmd::new(&agents).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    write_files(
        sw.dir(),
        &[
            ("review-then-fix", review_then_fix()),
            ("over-budget", over_budget()),
        ],
    );
    sw.start().await
}

/// The tries' task ids of node `key`, in order.
fn tasks_of(view: &Value, key: &str) -> Vec<String> {
    node(view, key)["tries"]
        .as_array()
        .unwrap_or_else(|| panic!("no tries at {key}: {view}"))
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_later_step_continues_an_earlier_steps_agent_in_its_session() {
    let sw = daemon().await;
    let (status, body) = start(&sw, json!({"flow": "review-then-fix", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let result = &view["result"];
    let writer = &result["writer"];
    let first = tasks_of(&view, "/body/children/0")[0].clone();
    let fix = tasks_of(&view, "/body/children/2")[0].clone();
    assert_eq!(writer["task"], first.as_str(), "{writer}");
    assert_eq!(writer["agent"], "coder");
    assert_eq!(writer["session_id"], SESSION, "{writer}");
    let branch = writer["branch"].as_str().unwrap();
    let repo = sw.dir().join("repo");
    assert_eq!(
        git(&repo, &["rev-parse", branch]),
        writer["head"].as_str().unwrap()
    );
    assert_eq!(result["review"]["raw"], format!("review {branch}"));

    // The fix ran in the writer's session, in a checkout holding its commit.
    let seen = std::fs::read_to_string(sw.dir().join(format!("seen-{fix}"))).unwrap();
    assert_eq!(seen.trim(), format!("resume={SESSION} first=yes"));
    let task = sw.task(&fix).await;
    assert_eq!(task["continued_from"], first.as_str(), "{task}");
    assert_eq!(result["fixer"]["task"], fix.as_str());
}

#[tokio::test]
async fn a_fanout_past_its_budget_fails_into_the_catch_and_the_last_step_gets_what_is_left() {
    let sw = daemon().await;
    let (status, body) = start(&sw, json!({"flow": "over-budget", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());
    let note = view["result"]["note"]["raw"].as_str().unwrap();
    assert!(note.starts_with("over: "), "{note}");
    assert!(note.contains("budget_exceeded"), "{note}");

    // The third coder started with half a replay left as its own budget,
    // and its task stopped there.
    let third = tasks_of(&view, "/body/body/body[2]")[0].clone();
    let task = sw.task(&third).await;
    let cap = task["policy"]["max_cost_usd"].as_f64().unwrap();
    assert!((cap - COST * 0.5).abs() < 1e-9, "{task}");
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["reason"]
            .as_str()
            .unwrap()
            .starts_with("budget_exceeded"),
        "{task}"
    );
    for first_two in ["/body/body/body[0]", "/body/body/body[1]"] {
        let id = tasks_of(&view, first_two)[0].clone();
        let task = sw.task(&id).await;
        assert_eq!(task["status"], "pass", "{task}");
    }
}
