//! The process spawner with `worktree`, through the engine, with real shell
//! children and real `git`: the child runs in its checkout, the artifact
//! lands in the attempt's tail, and a repository gone since the
//! configuration was checked fails the attempt naming it.

use std::path::Path;
use std::time::Duration;

use swarmd_engine::task::{PolicyOverrides, TaskStatus};
use swarmd_output_store::{ContentRef, OutputEvent};

use super::*;
use crate::process::{EnvVar, HostEnv, ProcessSpec};
use crate::testing::git::{git, repo};
use crate::testing::{engine_running, outputs, run_task};
use swarmd_git::worktree::KeepRule;
use swarmd_git::worktree::naming::branch_name;

fn spawner(dir: &Path, repo: &Path, body: &str) -> Arc<ProcessSpawner> {
    spawner_with(dir, repo, body, None)
}

fn spawner_with(
    dir: &Path,
    repo: &Path,
    body: &str,
    timeout: Option<Duration>,
) -> Arc<ProcessSpawner> {
    let script = dir.join("child.sh");
    std::fs::write(&script, body).unwrap();
    let mut spec = ProcessSpec::new("/bin/sh");
    spec.timeout = timeout;
    spec.args = vec![script.display().to_string()];
    spec.env = vec![EnvVar::Pass("PATH".into())];
    spec.kill_grace = Duration::from_millis(200);
    let host = HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")]);
    let runner = ProcessRunner::new(spec, &host).unwrap();
    let trees = Arc::new(Worktrees::new(dir.join("worktrees"), &host));
    let worktree = WorktreeSpec {
        repo: repo.to_owned(),
        base: "main".to_owned(),
        keep: KeepRule::Never,
        bootstrap: Default::default(),
    };
    Arc::new(ProcessSpawner::new(runner, "http://127.0.0.1:7700").with_worktree(trees, worktree))
}

#[tokio::test]
async fn the_child_runs_in_its_worktree_and_the_artifact_follows_the_final() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let body = r#"echo more >> notes.txt
printf '{"pwd": "%s", "branch": "%s", "base": "%s"}' "$(pwd)" "$SWARM_BRANCH" "$SWARM_BASE""#;
    let engine = engine_running("proc", spawner(temp.path(), &repo, body));
    let task = run_task(&engine, "proc", PolicyOverrides::default()).await;
    assert_eq!(task.status(), TaskStatus::Pass, "{task:?}");
    let dir = temp.path().join("worktrees").join(format!("{}-1", task.id));
    let branch = branch_name(&task.id.to_string(), 1, Some(&task.prompt));
    let value = task.result.clone().unwrap().value;
    assert_eq!(value["pwd"], dir.display().to_string());
    assert_eq!(value["branch"], branch);
    assert_eq!(value["base"], git(&repo, &["rev-parse", "main"]));

    let tail = outputs(&engine, task.id, 1).await;
    let kinds: Vec<&str> = tail
        .iter()
        .map(|r| match &r.event {
            OutputEvent::Final { .. } => "final",
            OutputEvent::Artifact { name, .. } => name.as_str(),
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["final", "worktree"]);
    let OutputEvent::Artifact {
        content: ContentRef::Inline { value },
        ..
    } = &tail[1].event
    else {
        panic!("{tail:?}");
    };
    assert_eq!(value["files"], serde_json::json!(["notes.txt"]));
    assert_eq!(value["committed_leftovers"], true);
    assert!(value["diff"].as_str().unwrap().contains("+more"), "{value}");
    assert!(!dir.exists());
    assert_eq!(
        git(&repo, &["rev-parse", &branch]),
        value["head"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_repository_gone_since_the_check_fails_the_attempt_naming_it() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let spawner = spawner(temp.path(), &repo, "echo never");
    std::fs::remove_dir_all(&repo).unwrap();
    let engine = engine_running("proc", spawner);
    let policy = PolicyOverrides {
        max_attempts: Some(1),
        ..PolicyOverrides::default()
    };
    let task = run_task(&engine, "proc", policy).await;
    assert_eq!(task.status(), TaskStatus::Failed);
    let reason = task.reason.clone().unwrap();
    assert!(
        reason.contains("worktree: worktree.repo") && reason.contains("is not a git repository"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_timed_out_attempt_still_records_what_it_left() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let body = "echo late >> notes.txt; touch ready; sleep 30";
    let spawner = spawner_with(temp.path(), &repo, body, Some(Duration::from_millis(500)));
    let engine = engine_running("proc", spawner);
    let policy = PolicyOverrides {
        max_attempts: Some(1),
        ..PolicyOverrides::default()
    };
    let task = run_task(&engine, "proc", policy).await;
    assert_eq!(task.status(), TaskStatus::Failed);
    assert!(
        task.reason.clone().unwrap().contains("timed out"),
        "{task:?}"
    );
    let tail = outputs(&engine, task.id, 1).await;
    let value = tail
        .iter()
        .find_map(|r| match &r.event {
            OutputEvent::Artifact {
                name,
                content: ContentRef::Inline { value },
            } if name == "worktree" => Some(value.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no worktree artifact: {tail:?}"));
    assert_eq!(value["committed_leftovers"], true);
    assert_eq!(value["files"], serde_json::json!(["notes.txt", "ready"]));
    assert!(
        !temp
            .path()
            .join("worktrees")
            .join(format!("{}-1", task.id))
            .exists()
    );
}
