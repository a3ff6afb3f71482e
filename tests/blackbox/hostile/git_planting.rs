//! Hostile clients: a worktree worker that only writes files and plants git
//! configuration for swarmd's own git to run: a `.git` pointer (or a `.git`
//! directory) naming a git directory it made, whose `config` defines a
//! filter its `.gitattributes` selects; or, with the pointer left alone, a
//! `.gitattributes` selecting a filter that only a nested repository and
//! worktree-local files define. No planted command ever runs (the marker
//! file is never made); a tampered attempt fails with a reason saying so,
//! recorded in its output, and nothing it left is committed; the same on a
//! worker pool's machine (`swarmd worker pool --worktree-repo`).

use std::path::Path;

use serde_json::{Value, json};

use crate::daemon::{Swarmd, eventually};
use crate::pools::{self, Pool, Setup};
use crate::worktrees::{git, make_repo, recorded_branch, worktrees_dir};

/// `planter` writes the branch it was given and the one checked out in its
/// worktree to `@DIR@/<task>.branch`, edits `notes.txt`, then plants per
/// its prompt:
/// - `pointer`: a git directory `.planted` with a filter `x` that makes
///   `@DIR@/MARKER`, `* filter=x` in `.gitattributes`, and `.git` rewritten
///   to name `.planted`;
/// - `directory`: the same, with `.git` replaced by that directory;
/// - `attributes`: `.git` left alone; `* filter=y` in `.gitattributes`,
///   filter `y` (making the marker) defined only in a nested repository
///   `sub/` (with a commit and a change) and in worktree files named like
///   git's (`.gitconfig`, `.lfsconfig`, `.git-config`).
const AGENTS: &str = r#"
[agents.planter]
kind = "process"
program = "/bin/sh"
args = ["-c", """
set -e
prompt=$(cat)
echo "$SWARM_BRANCH $(git rev-parse --abbrev-ref HEAD)" > "@DIR@/$SWARM_TASK_ID.branch"
echo "changed" >> notes.txt
plant() {
  git config -f "$1" "filter.$2.clean" "touch @DIR@/MARKER && cat"
  git config -f "$1" "filter.$2.smudge" "touch @DIR@/MARKER && cat"
  git config -f "$1" "filter.$2.required" true
}
case "$prompt" in
pointer|directory)
  git init -q "$PWD/.planted-src"
  mv .planted-src/.git .planted
  rmdir .planted-src
  plant .planted/config x
  echo '* filter=x' > .gitattributes
  if [ "$prompt" = pointer ]; then
    echo "gitdir: $PWD/.planted" > .git
  else
    rm .git
    mv .planted .git
  fi
  ;;
attributes)
  echo '* filter=y diff=y' > .gitattributes
  git init -q sub
  echo inner > sub/inner.txt
  git -C sub add inner.txt
  git -C sub -c user.name=w -c user.email=w@w commit -qm inner
  plant sub/.git/config y
  echo again > sub/inner.txt
  for f in .gitconfig .lfsconfig .git-config; do plant "$f" y; done
  ;;
esac
printf '{"planted": "%s"}' "$prompt"
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

async fn daemon() -> (Swarmd, std::path::PathBuf) {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    (sw.start().await, repo)
}

async fn plant(sw: &Swarmd, prompt: &str) -> String {
    let (status, body) = sw
        .create(json!({"agent": "planter", "prompt": prompt, "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    body["task_id"].as_str().unwrap().to_owned()
}

fn marker(sw: &Swarmd) -> bool {
    sw.dir().join("MARKER").exists()
}

/// The `worktree` progress notes of the task's output.
async fn worktree_notes(sw: &Swarmd, task: &str) -> Vec<String> {
    sw.output(task)
        .await
        .iter()
        .map(|r| &r["event"])
        .filter(|e| e["type"] == "progress" && e["stage"] == "worktree")
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect()
}

/// The branch the task's worker worked on, as it wrote it down: the one it
/// was told (`SWARM_BRANCH`), which must be the one checked out in its
/// worktree and attempt 1's readable name.
fn told_branch(sw: &Swarmd, task: &str) -> String {
    let path = sw.dir().join(format!("{task}.branch"));
    let written =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (told, checked_out) = written.trim().split_once(' ').unwrap_or_default();
    assert_eq!(told, checked_out, "{written}");
    recorded_branch(&json!({"branch": told}), task)
}

fn branch_exists(repo: &Path, branch: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet", branch])
        .output()
        .unwrap()
        .status
        .success()
}

#[tokio::test]
async fn a_planted_git_directory_is_refused_and_its_filter_never_runs() {
    let (sw, repo) = daemon().await;
    for prompt in ["pointer", "directory"] {
        let task = plant(&sw, prompt).await;
        let done = sw.finished(&task).await;
        assert!(
            !marker(&sw),
            "{prompt}: the planted filter ran\n{}",
            sw.log()
        );

        // The attempt fails, saying why, whatever its worker answered.
        assert_eq!(done["status"], "failed", "{prompt}: {done}\n{}", sw.log());
        let view = sw.task(&task).await;
        let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(".git") && reason.contains("no longer names"),
            "{prompt}: {view}"
        );
        let notes = worktree_notes(&sw, &task).await;
        assert!(
            notes.iter().any(|n| n.contains("no longer names")),
            "{prompt}: {notes:?}"
        );

        // Nothing it left was committed, and its checkout is gone.
        let branch = told_branch(&sw, &task);
        assert!(
            !branch_exists(&repo, &branch)
                || git(&repo, &["rev-parse", &branch]) == git(&repo, &["rev-parse", "main"]),
            "{prompt}: the planted files were committed"
        );
        let dir = worktrees_dir(&sw).join(format!("{task}-1"));
        eventually("the tampered checkout to be removed", || !dir.exists()).await;
        eventually("the worktree list to be pruned", || {
            git(&repo, &["worktree", "list"]).lines().count() == 1
        })
        .await;
    }
    assert!(!marker(&sw), "the planted filter ran\n{}", sw.log());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn attributes_select_no_filter_a_worker_defined() {
    let (sw, repo) = daemon().await;
    let task = plant(&sw, "attributes").await;
    let done = sw.finished(&task).await;
    assert!(!marker(&sw), "a worker-defined filter ran\n{}", sw.log());
    // The pointer is intact: the attempt is judged by its Final, and what it
    // left is committed as it is, without any filter.
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    let branch = told_branch(&sw, &task);
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    assert_eq!(notes, "first\nchanged");
    let attributes = git(&repo, &["show", &format!("{branch}:.gitattributes")]);
    assert_eq!(attributes, "* filter=y diff=y");
    let value: Value = recorded_files(&sw, &task).await;
    assert!(
        value
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "notes.txt")),
        "{value}"
    );
    assert!(!marker(&sw), "a worker-defined filter ran\n{}", sw.log());
}

/// The `files` of the task's `worktree` artifact.
async fn recorded_files(sw: &Swarmd, task: &str) -> Value {
    crate::worktrees::recorded_artifact(sw, task).await["files"].clone()
}

/// A pool's child that plants a git directory and points `.git` at it, as
/// `planter` does for `pointer` (writing down its branch first), then
/// posts an ok Final.
const POOL_PLANTER: &str = r#"
cat > /dev/null
set -e
echo "$SWARM_BRANCH $(git rev-parse --abbrev-ref HEAD)" > "@DIR@/$SWARM_TASK_ID.branch"
echo "changed" >> notes.txt
git init -q "$PWD/.planted-src"
mv .planted-src/.git .planted
rmdir .planted-src
git config -f .planted/config filter.x.clean "touch @DIR@/MARKER && cat"
echo '* filter=x' > .gitattributes
echo "gitdir: $PWD/.planted" > .git
printf '{"type":"final","content":{"kind":"inline","value":"planted"},"ok":true}\n'
"#;

#[tokio::test]
async fn a_pools_planted_git_directory_is_refused_on_its_machine() {
    let sw = Swarmd::new(pools::AGENTS).start().await;
    let machine = tempfile::tempdir().unwrap();
    let repo = make_repo(machine.path());
    let trees = machine.path().join("trees");
    let token = pools::mint(&sw, &["remote"]);
    let setup = Setup {
        args: vec![
            "--worktree-repo".into(),
            repo.display().to_string(),
            "--worktree-base".into(),
            "main".into(),
            "--worktree-dir".into(),
            trees.display().to_string(),
        ],
        script: Some(POOL_PLANTER),
        ..Setup::default()
    };
    let pool = Pool::start_with(&sw, &token, "remote", "pool-planted", 1, setup).await;
    let task = pools::create(&sw, json!({"agent": "remote", "prompt": "plant"})).await;
    let done = sw.finished(&task).await;
    assert!(!marker(&sw), "the planted filter ran\n{}", pool.log());
    assert_eq!(done["status"], "failed", "{done}\n{}", pool.log());
    let view = sw.task(&task).await;
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no longer names"), "{view}");
    let notes = worktree_notes(&sw, &task).await;
    assert!(
        notes.iter().any(|n| n.contains("no longer names")),
        "{notes:?}"
    );
    let dir = trees.join(format!("{task}-1"));
    eventually("the tampered checkout to be removed", || !dir.exists()).await;
    assert!(!branch_exists(&repo, &told_branch(&sw, &task)));
    assert!(!marker(&sw), "the planted filter ran\n{}", pool.log());
}
