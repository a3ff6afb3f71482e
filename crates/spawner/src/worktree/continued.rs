//! A continuation's worktree (docs/tasks.md, Continuations): its branch
//! starts where the continued task's last attempt left its own, not at
//! `base`.

use std::sync::Arc;

use swarmd_engine::AttemptHost;
use swarmd_engine::continuation::Resume;
use swarmd_engine::task::Task;
use swarmd_output_store::OutputEvent;

use super::{AttemptWorktree, PRODUCER, WorktreeError, WorktreeSpec, Worktrees};

/// Opens attempt `attempt` of `task`'s worktree, as the process and
/// operator spawners do: from `spec.base`, or for a continuation from the
/// continued attempt's branch ([`open_continued`]); when that fell back to
/// `spec.base`, a `worktree` progress note says so.
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
    let Some(prior) = prior_work(task) else {
        return AttemptWorktree::open(trees, spec, &task_id, attempt).await;
    };
    let (worktree, fell_back) = open_continued(trees, spec, &task_id, attempt, &prior).await?;
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

/// Where a continuation's worktree starts: the continued task's last
/// attempt's branch (named by its `worktree` artifact, else by the rule
/// every attempt's branch is named by).
pub fn prior_work(task: &Task) -> Option<PriorWork> {
    let from = task.continued_from?;
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
    let branch = format!("refs/heads/{}", prior.branch);
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
        "branch {} of the continued task is gone; starting from base {}",
        prior.branch, spec.base
    );
    open(spec.clone())
        .await
        .map(|worktree| (worktree, Some(note)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::HostEnv;
    use crate::testing::git::{git, repo};
    use crate::worktree::KeepRule;

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
        assert!(
            note.unwrap()
                .contains("swarmd/T-1-1 of the continued task is gone")
        );
        for worktree in [from_branch, from_head, from_base] {
            worktree.abandon().await;
        }
    }
}
