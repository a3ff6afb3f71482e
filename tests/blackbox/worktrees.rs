//! Worktree isolation of process agents (docs/tasks.md, Worktrees) with the
//! real binary and real `git`: parallel attempts each end on a branch of
//! their own with their diff recorded as a `worktree` artifact; a cancel
//! mid-run still keeps the change on the branch, records the artifact and
//! removes the directory; a kill -9 leaves worktrees that the next start
//! commits, records on the dead attempt and prunes; and `check-config`
//! refuses a `repo` that is not a git repository.

use std::path::PathBuf;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::{Swarmd, eventually};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// `coder` appends a line to `notes.txt` and marks `@DIR@/<task>.started`;
/// with prompt `commit` or `leave` it waits until four have started (so the
/// four worktrees exist at once), with `commit` it commits the line itself;
/// with `wait` it waits for `@DIR@/<task>.go` (which comes only once the
/// daemon is killed). It prints where it ran.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
prompt=$(cat)
echo "line from $SWARM_TASK_ID" >> notes.txt
touch "@DIR@/$SWARM_TASK_ID.started"
if [ "$prompt" != wait ]; then
  while [ "$(ls "@DIR@" | grep -c '[.]started$')" -lt 4 ]; do sleep 0.05; done
fi
if [ "$prompt" = commit ]; then
  git -c user.name=w -c user.email=w@w commit -qam "the worker's own commit"
fi
if [ "$prompt" = wait ]; then
  while [ ! -e "@DIR@/$SWARM_TASK_ID.go" ]; do sleep 0.05; done
fi
printf '{"worktree": "%s", "branch": "%s", "base": "%s", "pwd": "%s"}' \
  "$SWARM_WORKTREE" "$SWARM_BRANCH" "$SWARM_BASE" "$(pwd)"
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

/// `git -C dir args…` (panics on failure) and `<dir>/repo` with one commit
/// on `main` holding `notes.txt`: the git crate's own test repositories.
pub(crate) use swarmd_git::testing::git::{git, repo as make_repo};

async fn daemon() -> (Swarmd, PathBuf) {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    (sw.start().await, repo)
}

async fn spawn(sw: &Swarmd, prompt: &str) -> String {
    let (status, body) = sw
        .create(json!({"agent": "coder", "prompt": prompt, "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    body["task_id"].as_str().unwrap().to_owned()
}

/// The value of the task's `worktree` artifact, once it is recorded: an
/// attempt that was stopped records it after the task is over.
pub(crate) async fn recorded_artifact(sw: &Swarmd, task: &str) -> Value {
    for _ in 0..200 {
        let found = sw
            .output(task)
            .await
            .into_iter()
            .any(|r| r["event"]["type"] == "artifact" && r["event"]["name"] == "worktree");
        if found {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    artifact(sw, task).await
}

/// The branch a `worktree` artifact (or a `spawn` frame's `worktree`) of
/// attempt 1 of `task` records: where the attempt works, named as
/// docs/branches.md says
/// (`swarmd/t-<last 8 hex digits of the id>[-<slug>]/1`).
pub(crate) fn recorded_branch(value: &Value, task: &str) -> String {
    let branch = value["branch"]
        .as_str()
        .unwrap_or_else(|| panic!("no branch in {value}"));
    let short = task[task.len() - 8..].to_ascii_lowercase();
    assert!(
        branch.starts_with(&format!("swarmd/t-{short}")) && branch.ends_with("/1"),
        "{branch} is not the branch of attempt 1 of {task}"
    );
    branch.to_owned()
}

/// The value of the task's `worktree` artifact.
async fn artifact(sw: &Swarmd, task: &str) -> Value {
    let records = sw.output(task).await;
    let found = records
        .iter()
        .map(|r| &r["event"])
        .find(|e| e["type"] == "artifact" && e["name"] == "worktree")
        .unwrap_or_else(|| panic!("no worktree artifact in {records:#?}\n{}", sw.log()));
    assert_eq!(found["content"]["kind"], "inline", "{found}");
    found["content"]["value"].clone()
}

pub(crate) fn worktrees_dir(sw: &Swarmd) -> PathBuf {
    sw.dir().join("state/worktrees")
}

/// Entries left under `<state_dir>/worktrees`.
fn leftovers(sw: &Swarmd) -> Vec<String> {
    std::fs::read_dir(worktrees_dir(sw))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn parallel_attempts_end_on_their_own_branches_with_their_diffs() {
    let (sw, repo) = daemon().await;
    let base = git(&repo, &["rev-parse", "main"]);
    let prompts = ["commit", "leave", "commit", "leave"];
    let mut tasks = Vec::new();
    let mut branches = std::collections::HashSet::new();
    for prompt in prompts {
        tasks.push(spawn(&sw, prompt).await);
    }
    for (task, prompt) in tasks.iter().zip(prompts) {
        let done = sw.finished(task).await;
        assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
        let value = artifact(&sw, task).await;
        let branch = recorded_branch(&value, task);
        assert!(branches.insert(branch.clone()), "{branch} is reused");
        let dir = worktrees_dir(&sw).join(format!("{task}-1"));

        // The child ran in its worktree and was told where it was: on the
        // branch the artifact records.
        let ran = &done["result"]["value"];
        assert_eq!(ran["branch"], branch.as_str(), "{ran}");
        assert_eq!(ran["base"], base.as_str(), "{ran}");
        assert_eq!(ran["worktree"], dir.display().to_string(), "{ran}");
        assert_eq!(ran["pwd"], dir.display().to_string(), "{ran}");

        assert_eq!(value["base"], base.as_str(), "{value}");
        assert_eq!(value["head"], git(&repo, &["rev-parse", &branch]).as_str());
        assert_eq!(value["files"], json!(["notes.txt"]), "{value}");
        assert_eq!(value["committed_leftovers"], prompt == "leave", "{value}");
        assert_eq!(value["diff_truncated"], false);
        let added = format!("+line from {task}");
        assert!(value["diff"].as_str().unwrap().contains(&added), "{value}");
        // Only its own line: no attempt saw another's change.
        assert_eq!(
            value["diff"]
                .as_str()
                .unwrap()
                .matches("+line from")
                .count(),
            1
        );
        assert!(!dir.exists(), "{} is left", dir.display());
    }
    let listed: std::collections::HashSet<String> = git(&repo, &["branch", "--list", "swarmd/*"])
        .lines()
        .map(|l| l.trim_start_matches(['*', '+', ' ']).to_owned())
        .collect();
    assert_eq!(listed, branches);
    // The user's checkout is untouched and lists no worktree but its own.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), base);
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "first\n"
    );
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(leftovers(&sw), Vec::<String>::new());
}

#[tokio::test]
async fn a_cancelled_attempt_keeps_its_change_on_the_branch_and_loses_its_directory() {
    let (sw, repo) = daemon().await;
    let task = spawn(&sw, "wait").await;
    let started = sw.dir().join(format!("{task}.started"));
    eventually("the coder to start", || started.exists()).await;
    let (status, body) = crate::harness::parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sw.finished(&task).await["status"], "cancelled");

    // The cancelled attempt records what it left, after its Final-less end.
    let value = recorded_artifact(&sw, &task).await;
    let branch = recorded_branch(&value, &task);
    let dir = worktrees_dir(&sw).join(format!("{task}-1"));
    eventually("the worktree to be removed", || !dir.exists()).await;
    eventually("the leftovers to be committed", || {
        git(&repo, &["rev-parse", &branch]) != git(&repo, &["rev-parse", "main"])
    })
    .await;
    let diff = git(&repo, &["diff", "main", &branch]);
    assert!(diff.contains(&format!("+line from {task}")), "{diff}");
    let author = git(&repo, &["log", "-1", "--format=%an", &branch]);
    assert_eq!(author, "swarmd");
    eventually("the worktree list to be pruned", || {
        git(&repo, &["worktree", "list"]).lines().count() == 1
    })
    .await;

    assert_eq!(value["head"], git(&repo, &["rev-parse", &branch]).as_str());
    assert_eq!(value["files"], json!(["notes.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true, "{value}");
    let records = sw.output(&task).await;
    assert!(
        records.iter().all(|r| r["event"]["type"] != "final"),
        "no Final was made up: {records:#?}"
    );
    assert_eq!(sw.task(&task).await["status"], "cancelled");
}

#[tokio::test]
async fn worktrees_of_a_killed_daemon_are_committed_and_pruned_at_the_next_start() {
    let (mut sw, repo) = daemon().await;
    let task = spawn(&sw, "wait").await;
    let started = sw.dir().join(format!("{task}.started"));
    eventually("the coder to start", || started.exists()).await;
    let dir = worktrees_dir(&sw).join(format!("{task}-1"));
    assert!(dir.is_dir());
    sw.kill9().await;
    // The orphaned child may outlive the daemon a moment; let it go.
    std::fs::write(sw.dir().join(format!("{task}.go")), "").unwrap();

    sw.restart().await;
    eventually("the old worktree to be removed", || !dir.exists()).await;
    // The dead attempt's artifact is on its own tail.
    let value = recorded_artifact(&sw, &task).await;
    let branch = recorded_branch(&value, &task);
    let diff = git(&repo, &["diff", "main", &branch]);
    assert!(diff.contains(&format!("+line from {task}")), "{diff}");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert!(
        sw.log().contains("recovered the worktree of an attempt"),
        "{}",
        sw.log()
    );
    // The task failed as interrupted with max_attempts 1.
    assert_eq!(sw.finished(&task).await["status"], "failed");
    assert_eq!(value["head"], git(&repo, &["rev-parse", &branch]).as_str());
    assert_eq!(value["files"], json!(["notes.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true, "{value}");
}

/// `swarmd check-config` on the agents of `body`: its stderr, after
/// checking that it refused them.
pub(crate) async fn refused(body: &str) -> String {
    let sw = Swarmd::new(body);
    std::fs::create_dir(sw.dir().join("plain")).unwrap();
    make_repo(sw.dir());
    let output = Command::new(BINARY)
        .args(["check-config", "--config"])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    stderr
}

#[tokio::test]
async fn check_config_refuses_a_repo_that_is_not_a_git_repository_or_a_missing_base() {
    let stderr = refused(&AGENTS.replace("@DIR@/repo", "@DIR@/plain")).await;
    assert!(
        stderr.contains("agent `coder`") && stderr.contains("is not a git repository"),
        "{stderr}"
    );
    let stderr = refused(&AGENTS.replace("base = \"main\"", "base = \"no-such\"")).await;
    assert!(
        stderr.contains("agent `coder`") && stderr.contains("`no-such` names no commit"),
        "{stderr}"
    );
}
