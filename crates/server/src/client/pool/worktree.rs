//! A pool's attempts in git worktrees of a repository on the pool's own
//! machine (`--worktree-repo`, docs/tasks.md, Remote agents): each attempt
//! runs in a fresh worktree on the branch `swarmd/<task>-<attempt>`, made
//! from `--worktree-base` (a continuation's from the continued attempt's
//! branch when this pool's repository has it), as a local process agent's
//! does. When the child
//! has exited, what it left uncommitted is committed, the branch is
//! described in a `worktree` artifact posted before the Final, and the
//! directory is removed unless `--worktree-keep` keeps it. Checkouts a
//! previous run of the pool left are concluded and released at start.

use std::path::PathBuf;
use std::sync::Arc;

use swarmd_output_store::OutputEvent;
use swarmd_spawner::process::HostEnv;
use swarmd_spawner::worktree::{self, Checkout, KeepRule, WorktreeError, WorktreeSpec, Worktrees};

use crate::http::pool::wire::ClaimedAttempt;

/// The pool's worktree settings and the worktrees it made.
#[derive(Debug, Clone)]
pub(crate) struct PoolWorktree {
    trees: Arc<Worktrees>,
    spec: WorktreeSpec,
}

impl PoolWorktree {
    /// Checks the repository and base, and cleans up what a previous run of
    /// the pool left under `root`.
    ///
    /// # Errors
    /// The repository or base is unusable, in words.
    pub(crate) async fn prepare(
        repo: PathBuf,
        base: String,
        keep: KeepRule,
        root: PathBuf,
        host: &HostEnv,
    ) -> Result<PoolWorktree, String> {
        let repo = std::path::absolute(&repo).unwrap_or(repo);
        let spec = WorktreeSpec { repo, base, keep };
        let checked = spec.clone();
        let check_host = host.clone();
        tokio::task::spawn_blocking(move || worktree::check(&checked, &check_host))
            .await
            .map_err(|e| e.to_string())??;
        let trees = Arc::new(Worktrees::new(root, host));
        let left = trees.recover().await;
        if !left.is_empty() {
            tracing::info!(
                checkouts = left.len(),
                "released worktrees a previous run of the pool left"
            );
        }
        Ok(PoolWorktree { trees, spec })
    }

    /// Adds the attempt's worktree: from `--worktree-base`, or for a
    /// continuation from the continued attempt's branch as it is in this
    /// pool's repository, else from the head it was recorded at, else from
    /// the base, with a sentence saying so.
    ///
    /// # Errors
    /// Why git could not add it, for the attempt's failure reason.
    pub(crate) async fn open(
        &self,
        attempt: &ClaimedAttempt,
    ) -> Result<(Checkout, Option<String>), String> {
        let task = attempt.task_id.to_string();
        let failed =
            |e: WorktreeError| format!("the pool could not add the attempt's worktree: {e}");
        let branch = attempt.resume_branch.as_ref();
        let starts = branch
            .map(|b| format!("refs/heads/{b}"))
            .into_iter()
            .chain(attempt.resume_head.clone());
        for start in starts {
            let from = WorktreeSpec {
                base: start,
                ..self.spec.clone()
            };
            match self.trees.create(&from, &task, attempt.attempt).await {
                Err(WorktreeError::UnknownBase { .. }) => continue,
                opened => return opened.map(|c| (c, None)).map_err(failed),
            }
        }
        let note = branch.map(|b| {
            format!(
                "branch {b} of the continued task is not in this pool's repository; starting from base {}",
                self.spec.base
            )
        });
        self.trees
            .create(&self.spec, &task, attempt.attempt)
            .await
            .map(|c| (c, note))
            .map_err(failed)
    }

    /// Commits what the child left uncommitted and describes the branch:
    /// the `worktree` artifact, or `None` (logged) when git failed.
    pub(crate) async fn conclude(&self, checkout: &Checkout) -> Option<OutputEvent> {
        match self.trees.conclude(checkout).await {
            Ok(report) => Some(report.artifact()),
            Err(error) => {
                tracing::warn!(%error, branch = %checkout.branch, "cannot describe the attempt's worktree");
                None
            }
        }
    }

    /// Removes the worktree unless the keep rule keeps it for an attempt
    /// that `passed` or not.
    pub(crate) async fn release(&self, checkout: &Checkout, passed: bool) {
        if let Err(error) = self.trees.release(checkout, passed).await {
            tracing::warn!(%error, branch = %checkout.branch, "cannot remove the attempt's worktree");
        }
    }
}
