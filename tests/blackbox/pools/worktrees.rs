//! A pool with `--worktree-repo` runs each attempt in a git worktree of a
//! repository on its own machine (docs/tasks.md, Remote agents): the child
//! works there on its own branch, what it left uncommitted is committed,
//! the branch is described in a `worktree` artifact before the Final, and
//! the directory is removed (`--worktree-keep never`), the branch kept; a
//! continuation starts from the continued attempt's branch.

use std::path::Path;

use serde_json::{Value, json};

use super::{AGENTS, Pool, Setup, create, mint};
use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo, recorded_artifact, recorded_branch};

/// Adds a line to `notes.txt` in its working directory, commits nothing,
/// and reports where it ran.
const CODER: &str = r#"
cat > /dev/null
echo "line from $SWARM_TASK_ID" >> notes.txt
printf '{"type":"final","content":{"kind":"inline","value":{"pwd":"%s","worktree":"%s","branch":"%s"}},"ok":true}\n' \
  "$(pwd)" "$SWARM_WORKTREE" "$SWARM_BRANCH"
"#;

/// A pool running `CODER` in worktrees of `repo` (from `main`) under `trees`.
async fn coder_pool(sw: &Swarmd, token: &str, repo: &Path, trees: &Path, concurrency: u32) -> Pool {
    let setup = Setup {
        args: vec![
            "--worktree-repo".into(),
            repo.display().to_string(),
            "--worktree-base".into(),
            "main".into(),
            "--worktree-dir".into(),
            trees.display().to_string(),
        ],
        script: Some(CODER),
        ..Setup::default()
    };
    Pool::start_with(sw, token, "remote", "pool-git", concurrency, setup).await
}

#[tokio::test]
async fn a_pools_attempts_run_in_worktrees_of_its_own_repository() {
    let sw = Swarmd::new(AGENTS).start().await;
    let machine = tempfile::tempdir().unwrap();
    let repo = make_repo(machine.path());
    let trees = machine.path().join("trees");
    let token = mint(&sw, &["remote"]);
    let pool = coder_pool(&sw, &token, &repo, &trees, 2).await;
    let mut tasks = Vec::new();
    for n in 0..2 {
        tasks.push(create(&sw, json!({"agent": "remote", "prompt": format!("p{n}")})).await);
    }
    for task in &tasks {
        let view = sw.finished(task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        let ran = &view["result"]["value"];

        // The artifact describes the branch; it came before the Final.
        let outputs = sw.output(task).await;
        let kinds: Vec<&str> = outputs
            .iter()
            .map(|r| r["event"]["type"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(kinds, ["artifact", "final"], "{outputs:?}");
        let report: &Value = &outputs[0]["event"]["content"]["value"];
        assert_eq!(outputs[0]["event"]["name"], "worktree");
        let branch = recorded_branch(report, task);

        // The child worked on that branch, in a worktree under `trees`.
        assert_eq!(ran["branch"], branch.as_str(), "{ran}");
        assert_eq!(ran["pwd"], ran["worktree"], "{ran}");
        assert!(
            ran["pwd"]
                .as_str()
                .is_some_and(|p| p.starts_with(&trees.display().to_string())),
            "{ran}"
        );
        assert_eq!(report["committed_leftovers"], true, "{report}");
        assert_eq!(report["files"], json!(["notes.txt"]), "{report}");
        assert!(
            report["diff"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("+line from {task}"))),
            "{report}"
        );

        // The branch holds the change; the directory is gone.
        let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
        assert_eq!(notes, format!("first\nline from {task}"));
        // The pool removes it just after posting the Final.
        let dir = std::path::PathBuf::from(ran["pwd"].as_str().unwrap());
        let started = std::time::Instant::now();
        while dir.exists() {
            assert!(
                started.elapsed() < crate::harness::PATIENCE,
                "{dir:?} stayed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    // The repository's own checkout is untouched.
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "first\n"
    );
}

#[tokio::test]
async fn a_pool_refuses_a_worktree_repo_that_is_not_a_repository() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let plain = tempfile::tempdir().unwrap();
    let mut pool = Pool::start_with(
        &sw,
        &token,
        "remote",
        "pool-bad",
        1,
        Setup {
            args: vec!["--worktree-repo".into(), plain.path().display().to_string()],
            ..Setup::default()
        },
    )
    .await;
    let status = pool.exited(std::time::Duration::from_secs(20)).await;
    assert!(!status.success());
    assert!(pool.log().contains("--worktree-repo"), "{}", pool.log());
}

#[tokio::test]
async fn a_continuation_on_a_pool_starts_from_the_continued_attempts_branch() {
    let sw = Swarmd::new(AGENTS).start().await;
    let machine = tempfile::tempdir().unwrap();
    let repo = make_repo(machine.path());
    let token = mint(&sw, &["remote"]);
    let pool = coder_pool(&sw, &token, &repo, &machine.path().join("trees"), 1).await;
    let first = create(&sw, json!({"agent": "remote", "prompt": "one"})).await;
    assert_eq!(sw.finished(&first).await["status"], "pass");
    let next = create(
        &sw,
        json!({"agent": "remote", "prompt": "two", "continue_from": first}),
    )
    .await;
    let view = sw.finished(&next).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());

    // The continuation's branch holds the first task's line, then its own.
    let branch = recorded_branch(&recorded_artifact(&sw, &next).await, &next);
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    assert_eq!(
        notes,
        format!("first\nline from {first}\nline from {next}"),
        "{}",
        pool.log()
    );
    let stages: Vec<Value> = sw
        .output(&next)
        .await
        .iter()
        .filter_map(|r| r["event"]["stage"].as_str().map(Value::from))
        .collect();
    assert!(stages.is_empty(), "no fallback note: {stages:?}");

    // A continuation whose branch and head this pool's repository does not
    // have starts from the base, and says so. The pool removes the
    // continuation's worktree after its Final, so the branch is free once
    // git no longer lists it.
    let deadline = std::time::Instant::now() + crate::harness::PATIENCE;
    while git(&repo, &["worktree", "list", "--porcelain"]).contains(next.as_str()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the worktree of {next} stays"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    git(&repo, &["branch", "-D", &branch]);
    git(&repo, &["reflog", "expire", "--expire=now", "--all"]);
    git(&repo, &["gc", "-q", "--prune=now"]);
    let after = create(
        &sw,
        json!({"agent": "remote", "prompt": "three", "continue_from": next}),
    )
    .await;
    assert_eq!(sw.finished(&after).await["status"], "pass");
    let branch = recorded_branch(&recorded_artifact(&sw, &after).await, &after);
    let notes = git(&repo, &["show", &format!("{branch}:notes.txt")]);
    assert_eq!(notes, format!("first\nline from {after}"));
    let outputs = sw.output(&after).await;
    let note = outputs
        .iter()
        .find(|r| r["event"]["stage"] == "worktree")
        .map(|r| r["event"]["note"].clone());
    assert!(
        note.as_ref()
            .and_then(Value::as_str)
            .is_some_and(|n| n.contains("starting from base main")),
        "{outputs:?}"
    );
}
