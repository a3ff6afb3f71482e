//! A continuation's worktree (docs/tasks.md, Continuations): its branch
//! starts where the continued task's last attempt left its own, not at
//! `base`. An attempt that resumes one a restart interrupted (docs/tasks.md,
//! Restarts) runs in that attempt's checkout again, on its branch: the same
//! directory, so a CLI that keeps its sessions per directory finds its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use swarmd_engine::AttemptHost;
use swarmd_engine::continuation::{Restart, Resume};
use swarmd_engine::task::Task;
use swarmd_output_store::OutputEvent;

use super::{
    AttemptWorktree, Checkout, KeepRule, PRODUCER, WorktreeError, WorktreeSpec, Worktrees,
};

/// Opens attempt `attempt` of `task`'s worktree, as the process and
/// operator spawners do: from `spec.base`, or for a continuation from the
/// continued attempt's branch ([`open_continued`]), or after a restart in
/// the interrupted attempt's checkout (`open_restarted`); when that fell
/// back to another start, a `worktree` progress note says so.
///
/// # Errors
/// As [`AttemptWorktree::open`].
pub async fn open_for_task(
    host: &dyn AttemptHost,
    trees: Arc<Worktrees>,
    spec: &WorktreeSpec,
    task: &Task,
    attempt: u32,
) -> Result<AttemptWorktree, WorktreeError> {
    let task_id = task.id.to_string();
    let (worktree, fell_back) = if let Some(restart) = task.restart_for(attempt) {
        open_restarted(trees, spec, task, attempt, restart).await?
    } else if let Some(prior) = prior_work(task) {
        open_continued(trees, spec, &task_id, attempt, &prior).await?
    } else {
        return AttemptWorktree::open(trees, spec, &task_id, attempt).await;
    };
    if let Some(note) = fell_back {
        let note = OutputEvent::Progress {
            stage: "worktree".to_owned(),
            note: Some(note),
        };
        if let Err(error) = host.record_output(PRODUCER, vec![note]).await {
            tracing::debug!(%error, "worktree note not recorded");
        }
    }
    Ok(worktree)
}

/// Opens the checkout of the attempt a restart interrupted again, on its
/// branch, for `attempt`, which resumes it: swarmd's own checkout of the
/// branch still there (kept by `keep`) is removed first (its leftovers were
/// committed when the attempt was interrupted), then the checkout is added
/// back where it was. When that cannot be done, the attempt gets a checkout
/// of its own started from the branch as a continuation's is, with a
/// sentence saying so.
///
/// # Errors
/// As [`open_continued`].
async fn open_restarted(
    trees: Arc<Worktrees>,
    spec: &WorktreeSpec,
    task: &Task,
    attempt: u32,
    restart: &Restart,
) -> Result<(AttemptWorktree, Option<String>), WorktreeError> {
    let task_id = task.id.to_string();
    trees.free_branch(&spec.repo, &restart.branch).await;
    // Releasing a checkout forgets its task's prompt: told again, so the
    // branch is named as it was.
    trees.name_task(&task_id, &task.prompt);
    let why =
        match AttemptWorktree::open(Arc::clone(&trees), spec, &task_id, restart.worktree).await {
            Ok(worktree) if worktree.checkout().branch == restart.branch => {
                return Ok((worktree, None));
            }
            Ok(other) => {
                let why = format!("its checkout came back on {}", other.checkout().branch);
                other.abandon().await;
                why
            }
            Err(error) => error.to_string(),
        };
    tracing::warn!(branch = %restart.branch, reason = %why, "the interrupted attempt's checkout was not opened again");
    let prior = PriorWork {
        branch: restart.branch.clone(),
        head: restart.head.clone(),
    };
    let (worktree, fell_back) = open_continued(trees, spec, &task_id, attempt, &prior).await?;
    let note = format!(
        "the interrupted attempt's checkout of {} could not be opened again ({why}); {}",
        restart.branch,
        fell_back.unwrap_or_else(|| "starting a checkout of its own from that branch".to_owned())
    );
    Ok((worktree, Some(note)))
}

impl Worktrees {
    /// Removes swarmd's own checkout of `branch` (one under the root) when
    /// one is still there, so that the branch can be checked out again; the
    /// branch and its commits stay. Anything else on the branch (a
    /// person's checkout) is left alone.
    async fn free_branch(&self, repo: &Path, branch: &str) {
        let Ok(list) = self
            .git
            .run(repo, &["worktree", "list", "--porcelain"])
            .await
        else {
            return;
        };
        let Some(dir) = checkout_of(&list, branch) else {
            return;
        };
        let root = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        if !canonical.starts_with(&root) {
            return;
        }
        let checkout = Checkout {
            repo: repo.to_path_buf(),
            git_dir: self.registered_git_dir(repo, &dir).await,
            dir,
            branch: branch.to_owned(),
            // No commit is named so: the branch is never deleted here.
            base: String::new(),
            keep: KeepRule::Never,
            title: None,
            ports: Vec::new(),
            placed: Vec::new(),
        };
        if let Err(error) = self.release(&checkout, false).await {
            tracing::warn!(%branch, %error, "the kept checkout of an interrupted attempt was not removed");
        }
    }
}

/// The directory of the worktree `git worktree list --porcelain` shows on
/// `branch`.
fn checkout_of(list: &str, branch: &str) -> Option<PathBuf> {
    let wanted = format!("branch refs/heads/{branch}");
    list.split("\n\n").find_map(|block| {
        let mut lines = block.lines();
        let dir = lines.next()?.strip_prefix("worktree ")?;
        lines.any(|line| line == wanted).then(|| PathBuf::from(dir))
    })
}

/// Where a continuation's worktree starts: the continued task's last
/// attempt's branch (named by its `worktree` artifact, else by the rule
/// every attempt's branch is named by); for a task with `start_from`, that
/// branch.
pub fn prior_work(task: &Task) -> Option<PriorWork> {
    let Some(from) = task.continued_from else {
        return task.start_from.as_ref().map(|branch| PriorWork {
            branch: branch.clone(),
            head: None,
        });
    };
    let resume = task.resume.as_ref()?;
    if resume.attempt == 0 {
        return None;
    }
    Some(PriorWork {
        branch: resume
            .branch
            .clone()
            .unwrap_or_else(|| Resume::branch_of(from, resume.attempt)),
        head: resume.head.clone(),
    })
}

/// Whether `name` is a full commit id (SHA-1 or SHA-256, lower-case hex).
fn is_commit_id(name: &str) -> bool {
    matches!(name.len(), 40 | 64) && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where the continued task's work is: its branch, and the head its
/// `worktree` artifact recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorWork {
    pub branch: String,
    pub head: Option<String>,
}

/// Opens the attempt's worktree from `prior`'s branch as it is now, else
/// from the head it was recorded at (swarmd deletes a branch its attempt
/// left no commit on), else from `spec.base`. Returns the worktree and,
/// when it fell back to `spec.base`, a sentence saying so.
///
/// # Errors
/// As [`AttemptWorktree::open`] from `spec.base`.
pub async fn open_continued(
    trees: Arc<Worktrees>,
    spec: &WorktreeSpec,
    task_id: &str,
    attempt: u32,
    prior: &PriorWork,
) -> Result<(AttemptWorktree, Option<String>), WorktreeError> {
    open_from_prior(spec, prior, |from| {
        let trees = Arc::clone(&trees);
        async move { AttemptWorktree::open(trees, &from, task_id, attempt).await }
    })
    .await
}

/// Opens with `open` from `prior`'s branch as it is now, else from the
/// head it was recorded at, else from `spec.base`; with a sentence saying
/// so when it fell back to `spec.base`. The rule [`open_continued`] opens
/// an attempt's worktree by, for callers that open theirs another way (a
/// worker pool, over [`Worktrees::create`]).
///
/// # Errors
/// What `open` answers from `spec.base`, or anything but an unknown base
/// before.
pub async fn open_from_prior<T, Open, Opening>(
    spec: &WorktreeSpec,
    prior: &PriorWork,
    open: Open,
) -> Result<(T, Option<String>), WorktreeError>
where
    Open: Fn(WorktreeSpec) -> Opening,
    Opening: std::future::Future<Output = Result<T, WorktreeError>>,
{
    // A commit id (a fan-out's pinned base) is started from as it is; any
    // other name only as a local branch.
    let branch = if is_commit_id(&prior.branch) {
        prior.branch.clone()
    } else {
        format!("refs/heads/{}", prior.branch)
    };
    for start in std::iter::once(branch).chain(prior.head.clone()) {
        let from = WorktreeSpec {
            base: start,
            ..spec.clone()
        };
        match open(from).await {
            Err(WorktreeError::UnknownBase { .. }) => continue,
            opened => return opened.map(|worktree| (worktree, None)),
        }
    }
    let note = format!(
        "branch {} to start from is gone; starting from base {}",
        prior.branch, spec.base
    );
    open(spec.clone())
        .await
        .map(|worktree| (worktree, Some(note)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostEnv;
    use crate::testing::git::{git, repo};
    use crate::worktree::KeepRule;

    #[test]
    fn the_checkout_of_a_branch_is_read_from_the_worktree_list() {
        let list = "worktree /r\nHEAD 1\nbranch refs/heads/main\n\n\
                    worktree /w/T-1-1\nHEAD 2\nbranch refs/heads/swarmd/t-1-fix/1\n\n\
                    worktree /w/x\nHEAD 3\ndetached\n";
        assert_eq!(
            checkout_of(list, "swarmd/t-1-fix/1"),
            Some(PathBuf::from("/w/T-1-1"))
        );
        assert_eq!(checkout_of(list, "swarmd/t-1-fix"), None);
        assert_eq!(checkout_of("", "main"), None);
    }

    #[tokio::test]
    async fn a_resumed_attempt_runs_in_the_interrupted_checkout_again() {
        use swarmd_engine::ids::TaskId;
        use swarmd_engine::task::{Policy, TaskSpec};

        let temp = tempfile::tempdir().unwrap();
        let repo = repo(temp.path());
        let host = HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")]);
        let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host));
        let spec = WorktreeSpec {
            repo: repo.clone(),
            base: "main".into(),
            keep: KeepRule::Always,
            bootstrap: Default::default(),
        };
        let spec_of = TaskSpec {
            agent: "coder".into(),
            prompt: "Fix the parser".into(),
            ..TaskSpec::default()
        };
        let mut task = Task::new(TaskId::new(), spec_of, Policy::default(), 0, 0);
        let task_id = task.id.to_string();
        trees.name_task(&task_id, &task.prompt);
        // Attempt 1 commits, and its checkout is kept when it is interrupted.
        let first = trees.create(&spec, &task_id, 1).await.unwrap();
        std::fs::write(first.dir.join("b.txt"), "b\n").unwrap();
        git(&first.dir, &["add", "-A"]);
        git(&first.dir, &["commit", "-q", "-m", "work"]);
        assert!(trees.release(&first, false).await.unwrap(), "kept");
        let mut restart = Restart {
            attempt: 1,
            worktree: 1,
            session_id: "S-1".into(),
            branch: first.branch.clone(),
            head: None,
        };
        task.restart = Some(restart.clone());

        let (again, note) = open_restarted(Arc::clone(&trees), &spec, &task, 2, &restart)
            .await
            .unwrap();
        assert_eq!(note, None);
        assert_eq!(again.checkout().dir, first.dir, "the same directory");
        assert_eq!(again.checkout().branch, first.branch, "the same branch");
        assert_eq!(again.checkout().base, first.base, "the same base");
        assert!(again.checkout().dir.join("b.txt").exists());

        // Its checkout cannot come back (it is in use, and the branch is
        // gone): the attempt gets one of its own, and says why.
        restart.branch = "swarmd/gone".into();
        let (own, note) = open_restarted(Arc::clone(&trees), &spec, &task, 2, &restart)
            .await
            .unwrap();
        assert_ne!(own.checkout().dir, first.dir);
        let note = note.unwrap();
        assert!(note.contains("could not be opened again"), "{note}");
        assert!(note.contains("swarmd/gone to start from is gone"), "{note}");
        for worktree in [again, own] {
            worktree.abandon().await;
        }
    }

    #[test]
    fn the_artifact_name_is_the_one_the_engine_reads() {
        assert_eq!(
            super::super::ARTIFACT,
            swarmd_engine::continuation::WORKTREE_ARTIFACT
        );
    }

    #[tokio::test]
    async fn a_continuation_starts_from_the_branch_then_the_head_then_base() {
        let temp = tempfile::tempdir().unwrap();
        let repo = repo(temp.path());
        let base = git(&repo, &["rev-parse", "HEAD"]);
        git(&repo, &["branch", "swarmd/T-1-1"]);
        git(&repo, &["checkout", "-q", "swarmd/T-1-1"]);
        std::fs::write(repo.join("b.txt"), "b\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "work"]);
        let head = git(&repo, &["rev-parse", "HEAD"]);
        git(&repo, &["checkout", "-q", "main"]);
        let host = HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")]);
        let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host));
        let spec = WorktreeSpec {
            repo: repo.clone(),
            base: "main".into(),
            keep: KeepRule::Always,
            bootstrap: Default::default(),
        };
        let mut prior = PriorWork {
            branch: "swarmd/T-1-1".into(),
            head: None,
        };

        let (from_branch, note) = open_continued(Arc::clone(&trees), &spec, "T-2", 1, &prior)
            .await
            .unwrap();
        assert_eq!(note, None);
        assert_eq!(from_branch.checkout().base, head);
        assert!(from_branch.checkout().dir.join("b.txt").exists());

        git(&repo, &["branch", "-D", "-q", "swarmd/T-1-1"]);
        prior.head = Some(head.clone());
        let (from_head, note) = open_continued(Arc::clone(&trees), &spec, "T-3", 1, &prior)
            .await
            .unwrap();
        assert_eq!(
            (from_head.checkout().base.as_str(), note),
            (head.as_str(), None)
        );

        prior.head = Some("0".repeat(40));
        let (from_base, note) = open_continued(Arc::clone(&trees), &spec, "T-4", 1, &prior)
            .await
            .unwrap();
        assert_eq!(from_base.checkout().base, base);
        assert!(note.unwrap().contains("swarmd/T-1-1 to start from is gone"));
        for worktree in [from_branch, from_head, from_base] {
            worktree.abandon().await;
        }
    }
}
