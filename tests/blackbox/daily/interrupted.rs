//! Restarts that keep the work (docs/tasks.md, Restarts), with the real
//! binary and real `git`: a stand-in Claude CLI on a worktree reports its
//! session, commits, and hangs; the daemon is stopped with SIGTERM (its
//! terminal says what the drain waits for, a second signal stops it at
//! once, and a drain logs no ERROR, with an MCP `wait` pending) or killed
//! with SIGKILL, then started again. The task's next attempt runs on the
//! same branch, in the same checkout, with `--resume <session>` in its
//! argv, and passes; the task records the restart. An attempt that
//! reported no session fails `interrupted`, as before.

use std::path::Path;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::daemon::{Swarmd, eventually, repo_root};
use crate::worktrees::{git, make_repo};

/// The session the replayed transcript reports.
const SESSION: &str = "5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10";

/// `coder` stands in for Claude Code. It writes what it was given to
/// `@DIR@/seen-<task>-<attempt>`. Resuming a session, it commits
/// `second.txt` and replays a whole recorded transcript (a passing run).
/// Otherwise it prints the transcript's `init` line when the prompt is
/// `resumable` (so the attempt has a session), commits `first.txt`, marks
/// `@DIR@/committed-<task>` and hangs.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
prompt=$(cat)
{
  echo "args=$*"
  echo "resume=${SWARM_RESUME_SESSION-unset}"
  echo "branch=$SWARM_BRANCH"
  echo "dir=$PWD"
  if [ -e first.txt ]; then echo "first=yes"; else echo "first=no"; fi
} > "@DIR@/seen-$SWARM_TASK_ID-$SWARM_ATTEMPT"
if [ -n "${SWARM_RESUME_SESSION-}" ]; then
  echo two > second.txt
  git add second.txt
  git -c user.name=w -c user.email=w@w commit -qm second
  cat "@FIXTURES@/claude-tool-run.jsonl"
  exit 0
fi
if [ "$prompt" = resumable ]; then head -n 1 "@FIXTURES@/claude-tool-run.jsonl"; fi
echo one > first.txt
git add first.txt
git -c user.name=w -c user.email=w@w commit -qm first
touch "@DIR@/committed-$SWARM_TASK_ID"
exec sleep 60
''', "claude", "-p", "--output-format", "stream-json", "--verbose"]
resume_args = ["--resume", "{resume_session}"]
stream = "claude"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

/// How the daemon is stopped mid-attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Sigterm,
    Kill9,
}

async fn daemon() -> Swarmd {
    let fixtures = repo_root().join("tests/fixtures/cli-streams");
    let agents = AGENTS.replace("@FIXTURES@", &fixtures.display().to_string());
    let sw = Swarmd::new(&agents).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    sw.start().await
}

/// What the stand-in wrote down for `task`'s attempt `n`, by key.
fn seen(dir: &Path, task: &str, n: u32) -> Vec<(String, String)> {
    let path = dir.join(format!("seen-{task}-{n}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn field<'a>(seen: &'a [(String, String)], key: &str) -> &'a str {
    seen.iter()
        .find(|(k, _)| k == key)
        .map_or_else(|| panic!("no {key} in {seen:?}"), |(_, v)| v.as_str())
}

/// Spawns `prompt` on `coder` and waits until its first attempt committed
/// and, for a resumable one, its session is recorded.
async fn hanging(sw: &Swarmd, prompt: &str) -> String {
    let (status, created) = sw.create(json!({"agent": "coder", "prompt": prompt})).await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let marker = sw.dir().join(format!("committed-{task}"));
    for _ in 0..300 {
        let session_known = prompt != "resumable"
            || sw
                .output(&task)
                .await
                .iter()
                .any(|r| r["event"]["type"] == "progress" && r["event"]["stage"] == "init");
        if marker.exists() && session_known {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{task} never committed and reported its session\n{}",
        sw.log()
    );
}

async fn stop(sw: &mut Swarmd, how: Stop) {
    match how {
        Stop::Sigterm => {
            sw.sigterm();
            let status = sw.exited().await;
            assert!(status.success(), "{status:?}\n{}", sw.log());
        }
        Stop::Kill9 => sw.kill9().await,
    }
}

/// The interrupted attempt resumes after the restart and the task passes.
async fn resumes_after(how: Stop) {
    let mut sw = daemon().await;
    let repo = sw.dir().join("repo");
    let task = hanging(&sw, "resumable").await;
    let first = seen(sw.dir(), &task, 1);
    assert_eq!(field(&first, "resume"), "unset");
    let branch = field(&first, "branch").to_owned();
    let committed = git(&repo, &["rev-parse", &branch]);

    stop(&mut sw, how).await;
    sw.restart().await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());

    let second = seen(sw.dir(), &task, 2);
    assert_eq!(
        field(&second, "args"),
        format!("-p --output-format stream-json --verbose --resume {SESSION}"),
        "{second:?}"
    );
    assert_eq!(field(&second, "resume"), SESSION);
    assert_eq!(field(&second, "branch"), branch, "the same branch");
    assert_eq!(
        field(&second, "dir"),
        field(&first, "dir"),
        "the same checkout"
    );
    assert_eq!(
        field(&second, "first"),
        "yes",
        "the first attempt's work is there"
    );
    // The resumed attempt's commit follows the interrupted one's.
    let log = git(&repo, &["log", "--format=%s", &branch]);
    assert!(log.starts_with("second\nfirst"), "{log}");
    assert_eq!(
        git(&repo, &["rev-parse", &format!("{branch}~1")]),
        committed
    );

    let view = sw.task(&task).await;
    assert_eq!(view["attempt"], 2, "{view}");
    assert_eq!(view["restarts"], 1, "{view}");
    assert_eq!(view["restart"]["attempt"], 1, "{view}");
    assert_eq!(view["restart"]["session_id"], SESSION, "{view}");
    assert_eq!(view["restart"]["branch"], branch.as_str(), "{view}");
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["outcome"], "failed", "{view}");
    assert_eq!(
        attempts[0]["reason"], "interrupted; resumed after restart",
        "{view}"
    );
    assert_eq!(attempts[1]["outcome"], "pass", "{view}");
    assert_eq!(
        view["policy"]["max_attempts"], 1,
        "the resumed attempt did not need a retry: {view}"
    );
}

#[tokio::test]
async fn an_attempt_stopped_by_sigterm_resumes_its_session_on_its_branch() {
    resumes_after(Stop::Sigterm).await;
}

#[tokio::test]
async fn an_attempt_killed_with_the_daemon_resumes_its_session_on_its_branch() {
    resumes_after(Stop::Kill9).await;
}

#[tokio::test]
async fn the_drain_says_what_it_waits_for_and_logs_no_error() {
    let mut sw = daemon().await;
    let task = hanging(&sw, "plain").await;
    // A MainAI waits on the task over MCP while the daemon drains.
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", sw.base))
        .auth_header(sw.admin.clone());
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let Value::Object(args) = json!({"task_ids": [task], "timeout_secs": 60}) else {
        unreachable!("arguments are an object")
    };
    let waiting = tokio::spawn(async move {
        let waited = client
            .call_tool(CallToolRequestParams::new("wait").with_arguments(args))
            .await;
        (waited.is_ok(), client)
    });
    eventually("the MCP wait to start", || {
        sw.log().contains("wait started")
    })
    .await;
    assert!(!waiting.is_finished(), "the MCP wait is pending");
    sw.sigterm();
    let status = sw.exited().await;
    assert!(status.success(), "{status:?}");
    let log = sw.log();
    assert!(
        log.contains("stopping: waiting up to 3s for 1 running attempt")
            && log.contains("Ctrl-C again"),
        "{log}"
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "a normal drain logs no ERROR: {errors:#?}"
    );
    drop(waiting.await);
}

#[tokio::test]
async fn an_attempt_without_a_session_fails_interrupted_as_before() {
    let mut sw = daemon().await;
    let task = hanging(&sw, "plain").await;
    stop(&mut sw, Stop::Sigterm).await;
    sw.restart().await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["reason"], "interrupted", "{done}");
    let view = sw.task(&task).await;
    assert_eq!(view["attempt"], 1, "{view}");
    assert!(view.get("restart").is_none(), "{view}");
    assert!(
        !sw.dir().join(format!("seen-{task}-2")).exists(),
        "no second attempt ran"
    );
}

#[tokio::test]
async fn a_second_stop_signal_stops_at_once_and_the_next_start_resumes() {
    let mut sw = daemon().await;
    let task = hanging(&sw, "resumable").await;
    sw.sigterm();
    eventually("the drain notice", || {
        sw.log().contains("stopping: waiting")
    })
    .await;
    sw.sigterm();
    let status = sw.exited().await;
    assert_eq!(status.code(), Some(130), "{status:?}\n{}", sw.log());
    assert!(sw.log().contains("stopped at once"), "{}", sw.log());
    sw.restart().await;
    eventually("the terminal to say what resumes", || {
        sw.log().contains("resuming 1 coding attempt(s)")
    })
    .await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
}
