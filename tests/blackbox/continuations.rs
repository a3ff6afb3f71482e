//! Continuations (docs/tasks.md, Continuations) with the real binary and
//! real `git`: a stand-in Claude CLI with a worktree commits a file and
//! reports its session; a task continuing it gets the session in its
//! environment and argv, starts on the first task's head (its branch, or
//! the head recorded in its artifact once the branch is deleted), and
//! shows the chain. The CLI and the MCP `spawn` tool take `continue_from` too, bad
//! continuations are refused with their codes, and a delegated
//! continuation's `spawn` frame names the SubAgent session to resume.

use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::{Swarmd, delegate_frame, repo_root};
use crate::harness::parts;
use crate::worktrees::{git, make_repo, recorded_artifact, recorded_branch};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// The session the replayed transcript reports.
const SESSION: &str = "5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10";

/// `coder` stands in for Claude Code: it writes what it was given to
/// `@DIR@/seen-<task>` (its arguments, the continuation's variables,
/// whether `first.txt` is in its checkout, its base), commits `first.txt`
/// when the prompt is `first`, and replays a recorded Claude transcript.
/// `sleeper` runs until cancelled; `other` is another agent.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
prompt=$(cat)
{
  echo "args=$*"
  echo "resume=${SWARM_RESUME_SESSION-unset}"
  echo "from=${SWARM_CONTINUED_FROM-unset}"
  if [ -e first.txt ]; then echo "first=yes"; else echo "first=no"; fi
  echo "base=$SWARM_BASE"
} > "@DIR@/seen-$SWARM_TASK_ID"
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

[agents.sleeper]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.other]
kind = "process"
program = "/bin/cat"
"#;

async fn daemon() -> Swarmd {
    let fixtures = repo_root().join("tests/fixtures/cli-streams");
    let agents = AGENTS.replace("@FIXTURES@", &fixtures.display().to_string());
    let sw = Swarmd::new(&agents).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    sw.start().await
}

async fn spawn(sw: &Swarmd, body: Value) -> String {
    let (status, created) = sw.create(body).await;
    assert_eq!(status, 201, "{created}\n{}", sw.log());
    created["task_id"].as_str().unwrap().to_owned()
}

/// What the stand-in wrote down for `task`, line by line.
fn seen(sw: &Swarmd, task: &str) -> Vec<String> {
    let text = std::fs::read_to_string(sw.dir().join(format!("seen-{task}"))).unwrap();
    text.lines().map(str::to_owned).collect()
}

/// Runs `first` and returns its id, once it passed.
async fn first_task(sw: &Swarmd) -> String {
    let first = spawn(sw, json!({"agent": "coder", "prompt": "first"})).await;
    let done = sw.finished(&first).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    first
}

/// The branch `task`'s first attempt worked on, as its artifact records.
async fn branch_of(sw: &Swarmd, task: &str) -> String {
    recorded_branch(&recorded_artifact(sw, task).await, task)
}

#[tokio::test]
async fn a_continuation_resumes_the_session_on_the_previous_branch() {
    let sw = daemon().await;
    let first = first_task(&sw).await;
    let base = git(&sw.dir().join("repo"), &["rev-parse", "main"]);
    assert_eq!(
        seen(&sw, &first),
        [
            "args=-p --output-format stream-json --verbose".to_owned(),
            "resume=unset".into(),
            "from=unset".into(),
            "first=no".into(),
            format!("base={base}"),
        ],
        "a first task resumes nothing and gets no resume_args"
    );
    let branch = branch_of(&sw, &first).await;
    let head = git(&sw.dir().join("repo"), &["rev-parse", &branch]);
    assert_ne!(head, base, "task 1 committed on its branch");

    // No agent: the continued task's.
    let second = spawn(
        &sw,
        json!({"continue_from": first, "prompt": "second", "wait_secs": 15}),
    )
    .await;
    let done = sw.finished(&second).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    assert_eq!(
        seen(&sw, &second),
        [
            format!("args=-p --output-format stream-json --verbose --resume {SESSION}"),
            format!("resume={SESSION}"),
            format!("from={first}"),
            "first=yes".into(),
            format!("base={head}"),
        ]
    );
    let view = sw.task(&second).await;
    assert_eq!(view["agent"], "coder", "{view}");
    assert_eq!(view["continued_from"], first.as_str(), "{view}");
    assert!(view.get("parent").is_none(), "{view}");
    assert_eq!(
        view["resume"],
        json!({"attempt": 1, "session_id": SESSION,
               "branch": branch, "head": head}),
        "{view}"
    );
    let listed = sw
        .get("/v1/tasks?agent=coder", &sw.admin)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let row = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == second.as_str())
        .expect("the continuation is listed");
    assert_eq!(row["continued_from"], first.as_str(), "{row}");

    // The first task's continuations are one query away; the second has none.
    for (of, expected) in [
        (first.as_str(), vec![second.as_str()]),
        (second.as_str(), vec![]),
    ] {
        let successors = sw
            .get(&format!("/v1/tasks?continued_from={of}"), &sw.admin)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let ids: Vec<&str> = successors["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, expected, "{successors}");
    }
    let bad = sw
        .get("/v1/tasks?continued_from=nope", &sw.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn with_its_branch_deleted_a_continuation_starts_from_the_recorded_head() {
    let sw = daemon().await;
    let first = first_task(&sw).await;
    let repo = sw.dir().join("repo");
    let branch = branch_of(&sw, &first).await;
    let head = git(&repo, &["rev-parse", &branch]);
    git(&repo, &["branch", "-D", "-q", &branch]);

    let second = spawn(&sw, json!({"continue_from": first, "prompt": "second"})).await;
    let done = sw.finished(&second).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    let saw = seen(&sw, &second);
    assert_eq!(
        (saw[3].as_str(), saw[4].as_str()),
        ("first=yes", format!("base={head}").as_str()),
        "{saw:?}"
    );
    let notes: Vec<Value> = sw
        .output(&second)
        .await
        .into_iter()
        .filter(|r| r["event"]["stage"] == "worktree")
        .collect();
    assert!(
        notes.is_empty(),
        "the head was there: no fallback note {notes:?}"
    );
}

#[tokio::test]
async fn bad_continuations_are_refused_with_their_codes() {
    let sw = daemon().await;
    let first = first_task(&sw).await;
    let running = spawn(&sw, json!({"agent": "sleeper", "prompt": "p"})).await;
    let unknown = "T-0000000000000000000000000000abcd";
    for (body, status, code) in [
        (
            json!({"continue_from": unknown, "prompt": "p"}),
            404,
            "not_found",
        ),
        (
            json!({"continue_from": "T-nope", "prompt": "p"}),
            400,
            "bad_request",
        ),
        (
            json!({"continue_from": running, "prompt": "p"}),
            409,
            "task_not_finished",
        ),
        (
            json!({"agent": "other", "continue_from": first, "prompt": "p"}),
            400,
            "bad_request",
        ),
        (json!({"prompt": "p"}), 400, "bad_request"),
    ] {
        let (got, answer) = sw.create(body.clone()).await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
        assert!(answer["error"].is_string(), "{answer}");
    }
}

#[tokio::test]
async fn the_cli_and_the_mcp_spawn_tool_take_continue_from() {
    let sw = daemon().await;
    let first = first_task(&sw).await;

    let output = Command::new(BINARY)
        .args([
            "task",
            "spawn",
            "--continue-from",
            &first,
            "--prompt",
            "again",
        ])
        .args([
            "--wait", "15", "--url", &sw.base, "--token", &sw.admin, "-o", "json",
        ])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["status"], "pass", "{answer}");
    assert_eq!(answer["continued_from"], first.as_str(), "{answer}");
    assert_eq!(answer["agent"], "coder", "{answer}");

    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", sw.base))
        .auth_header(sw.admin.clone());
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let call = |args: Value| {
        let Value::Object(args) = args else {
            unreachable!("arguments are an object")
        };
        client.call_tool(CallToolRequestParams::new("spawn").with_arguments(args))
    };
    let result = serde_json::to_value(
        call(json!({"continue_from": first, "prompt": "via mcp"}))
            .await
            .unwrap(),
    )
    .unwrap();
    let task = result["structuredContent"]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"))
        .to_owned();
    let done = sw.finished(&task).await;
    assert_eq!(done["continued_from"], first.as_str(), "{done}");
    assert_eq!(
        seen(&sw, &task)[1],
        format!("resume={SESSION}"),
        "the MCP continuation resumes the session too"
    );
    let refused = serde_json::to_value(
        call(json!({"continue_from": "nope", "prompt": "p"}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(refused["isError"], true, "{refused}");
    let body: Value =
        serde_json::from_str(refused["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "bad_request", "{body}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_delegated_continuation_names_the_subagent_session_in_its_spawn_frame() {
    let sw = Swarmd::new("").start().await;
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&main_ai).await;
    ws.send(delegate_frame("r-1", "researcher", "look")).await;
    let spawn = ws.recv_type("spawn").await;
    assert!(spawn.get("continued_from").is_none(), "{spawn}");
    let first = spawn["task_id"].as_str().unwrap().to_owned();
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    // The SubAgent reports its session as a CLI adapter's usage note would.
    let usage = json!({"type": "progress", "stage": "usage",
                       "note": r#"{"session_id":"agent-7f3a"}"#});
    for (path, body) in [
        (
            format!("/v1/worker/output?task_id={first}"),
            usage.to_string(),
        ),
        (
            format!("/v1/worker/submit?task_id={first}"),
            "\"found it\"".into(),
        ),
    ] {
        let (status, answer) = parts(
            sw.http
                .post(sw.url(&path))
                .bearer_auth(&handle)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    assert_eq!(sw.finished(&first).await["status"], "pass");

    ws.send(
        json!({"type": "spawn_task", "req_id": "r-2", "continue_from": first,
                   "prompt": "now the tests", "delegate": true}),
    )
    .await;
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["agent"], "researcher", "{spawn}");
    assert_eq!(spawn["continued_from"], first.as_str(), "{spawn}");
    assert_eq!(spawn["resume_session"], "agent-7f3a", "{spawn}");
    let directive = spawn["directive"].as_str().unwrap();
    assert!(
        directive.contains(&format!("continues swarmd task {first}"))
            && directive.contains("`agent-7f3a`"),
        "{directive}"
    );
}
