//! A pool's attempts in git worktrees of a repository on the pool's own
//! machine (`--worktree-repo`, docs/tasks.md, Remote agents): each attempt
//! runs in a fresh worktree on a branch of its own, named after the task's
//! short id and prompt (`swarmd/t-<short id>-<slug>/<attempt>`), made
//! from `--worktree-base` (a continuation's from the continued attempt's
//! branch when this pool's repository has it), as a local process agent's
//! does. When the child
//! has exited, what it left uncommitted is committed, the branch is
//! described in a `worktree` artifact posted before the Final, and the
//! directory is removed unless `--worktree-keep` keeps it. A checkout
//! whose `.git` no longer names its git directory has no git run in it and
//! fails its attempt (docs/security.md, Children's environment). Checkouts a
//! previous run of the pool left are concluded and released at start. The
//! `--worktree-copy`, `--worktree-link`, `--worktree-setup` and
//! `--worktree-ports` flags bootstrap each checkout as an agent's
//! `worktree` table does (docs/tasks.md, Bootstrap).

use std::path::PathBuf;
use std::sync::Arc;

use swarmd_git::worktree::{
    self, Bootstrap, Checkout, KeepRule, PriorWork, SetupSpec, WorktreeError, WorktreeSpec,
    Worktrees,
};
use swarmd_spawner::process::HostEnv;
use swarmd_types::output::OutputEvent;

use swarmd_client::wire::ClaimedAttempt;

/// The pool's worktree settings and the worktrees it made.
#[derive(Debug, Clone)]
pub struct PoolWorktree {
    trees: Arc<Worktrees>,
    spec: WorktreeSpec,
}

impl PoolWorktree {
    /// Checks the repository and base, and cleans up what a previous run of
    /// the pool left under `root`.
    ///
    /// # Errors
    /// The repository or base is unusable, in words.
    pub async fn prepare(
        repo: PathBuf,
        base: String,
        keep: KeepRule,
        bootstrap: Bootstrap,
        root: PathBuf,
        host: &HostEnv,
    ) -> Result<PoolWorktree, String> {
        let repo = std::path::absolute(&repo).unwrap_or(repo);
        let spec = WorktreeSpec {
            repo,
            base,
            keep,
            bootstrap,
        };
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
    pub async fn open(
        &self,
        attempt: &ClaimedAttempt,
    ) -> Result<(Checkout, Option<String>), String> {
        let task = attempt.task_id.to_string();
        self.trees.name_task(&task, &attempt.prompt);
        let create = |from: WorktreeSpec| {
            let task = &task;
            async move { self.trees.create(&from, task, attempt.attempt).await }
        };
        let opened = match &attempt.resume_branch {
            Some(branch) => {
                let prior = PriorWork {
                    branch: branch.clone(),
                    head: attempt.resume_head.clone(),
                };
                worktree::open_from_prior(&self.spec, &prior, create).await
            }
            None => create(self.spec.clone()).await.map(|c| (c, None)),
        };
        opened.map_err(|e| format!("the pool could not add the attempt's worktree: {e}"))
    }

    /// Commits what the child left uncommitted and describes the branch:
    /// the `worktree` artifact, or `None` (logged) when git failed.
    ///
    /// # Errors
    /// The refusal, in words, when the checkout's `.git` no longer names its
    /// git directory: no git ran in it, and the attempt fails.
    pub async fn conclude(&self, checkout: &Checkout) -> Result<Option<OutputEvent>, String> {
        match self.trees.conclude(checkout).await {
            Ok(report) => Ok(Some(report.artifact())),
            Err(error @ (WorktreeError::Tampered { .. } | WorktreeError::Unregistered { .. })) => {
                tracing::warn!(%error, branch = %checkout.branch, "the attempt's worktree is refused");
                Err(error.to_string())
            }
            Err(error) => {
                tracing::warn!(%error, branch = %checkout.branch, "cannot describe the attempt's worktree");
                Ok(None)
            }
        }
    }

    /// The setup command new worktrees run before the child, if any.
    pub fn setup(&self) -> Option<&SetupSpec> {
        self.spec.bootstrap.setup.as_ref()
    }

    /// Removes the worktree unless the keep rule keeps it for an attempt
    /// that `passed` or not.
    pub async fn release(&self, checkout: &Checkout, passed: bool) {
        if let Err(error) = self.trees.release(checkout, passed).await {
            tracing::warn!(%error, branch = %checkout.branch, "cannot remove the attempt's worktree");
        }
    }
}
