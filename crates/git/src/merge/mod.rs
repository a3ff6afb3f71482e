//! The merge agent (`kind = "merge"`, docs/branches.md, Merging branches):
//! turns the branches coding attempts left into one new branch, as an
//! ordinary task, so a flow merges with a `step` and the merge is retried,
//! cancelled and audited like any other work.
//!
//! Nothing a worker wrote is trusted: every name is checked by
//! `git check-ref-format --branch` and resolved as a local branch only
//! (`refs/heads/<name>^{commit}` after `--end-of-options`), git runs as the
//! branches code runs it (no hooks, no prompt, the host's `PATH` and `HOME`
//! only), and merges are computed with `git merge-tree --write-tree` and
//! written with `git commit-tree`, which touch no checkout, index or file.
//! The only refs moved are the new branch (created with the empty old value,
//! so it never overwrites one) and, when the flow asks, the agent's
//! `fast_forward` branch by compare-and-swap. Merge commits are dated at
//! the task's creation, so a retry that merges the same heads makes the
//! same commits and finds its own branch already in place.

mod apply;
mod request;
mod spawner;

#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod measure;

use std::path::PathBuf;
use std::process::Stdio;

pub use apply::{AppliedBranch, Conflict, MergeRecord};
pub(crate) use request::plain_name;
pub use request::{MergeRequest, Strategy};
pub use spawner::MergeSpawner;

use crate::HostEnv;
use crate::worktree::WorktreeError;

/// `max_branches` when the agent does not set it.
pub const DEFAULT_MAX_BRANCHES: usize = 16;

/// What the merge commits' `base` defaults to.
pub const DEFAULT_BASE: &str = "HEAD";

/// The most conflicting files a conflict names; more are counted in one
/// last entry. A conflict's list goes into a Final and a `409` body, and
/// two branches a worker controls can conflict in any number of paths.
pub const MAX_CONFLICT_FILES: usize = 1000;

/// `files` cut to [`MAX_CONFLICT_FILES`], the rest counted.
pub(crate) fn cap_files(mut files: Vec<String>) -> Vec<String> {
    if files.len() > MAX_CONFLICT_FILES {
        let more = files.len() - MAX_CONFLICT_FILES;
        files.truncate(MAX_CONFLICT_FILES);
        files.push(format!("… and {more} more files"));
    }
    files
}

/// `[agents.NAME] kind = "merge"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeSpec {
    /// The repository whose branches are merged; absolute.
    pub repo: PathBuf,
    /// What the merge starts from unless the task names a base: a commit,
    /// branch or tag, resolved when each attempt starts.
    pub base: String,
    /// The one branch this agent may move, only by fast-forward and only
    /// when a task asks (`fast_forward: true`).
    pub fast_forward: Option<String>,
    /// The most branches one task may merge.
    pub max_branches: usize,
}

impl MergeSpec {
    /// A spec over `repo` with the defaults.
    pub fn new(repo: impl Into<PathBuf>) -> MergeSpec {
        MergeSpec {
            repo: repo.into(),
            base: DEFAULT_BASE.to_owned(),
            fast_forward: None,
            max_branches: DEFAULT_MAX_BRANCHES,
        }
    }
}

/// Why a merge attempt fails. A conflict is not one: it is recorded in the
/// passed result ([`MergeRecord::conflict`]).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("bad input: {0}")]
    BadInput(String),
    #[error("`{0}` is not a branch name git accepts")]
    BadName(String),
    #[error("{count} branches given; this agent merges at most {max}")]
    TooMany { count: usize, max: usize },
    #[error("no branch `{0}` in the repository")]
    NoBranch(String),
    #[error("base `{0}` names no commit in the repository")]
    UnknownBase(String),
    #[error("branch `{into}` already exists (at {head}); name another with `into`")]
    Exists { into: String, head: String },
    #[error("fast_forward asked, but this agent has no `fast_forward` branch configured")]
    NoFastForwardBranch,
    #[error(transparent)]
    Git(#[from] WorktreeError),
}

/// Checks, without a runtime, what `check-config` refuses up front: `repo`
/// is an absolute path to a git repository, `base` names a commit in it,
/// and `fast_forward` is a branch name git accepts.
///
/// # Errors
/// The problem in words, for the agent's configuration error.
pub fn check(spec: &MergeSpec, host: &HostEnv) -> Result<(), String> {
    let shown = spec.repo.display();
    if !spec.repo.is_absolute() {
        return Err(format!("repo `{shown}` must be an absolute path"));
    }
    if spec.max_branches == 0 {
        return Err("max_branches must be at least 1".to_owned());
    }
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .env_clear()
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env(
                "PATH",
                host.get("PATH").unwrap_or("/usr/local/bin:/usr/bin:/bin"),
            )
            .arg("-C")
            .arg(&spec.repo)
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|status| status.success())
    };
    match run(&["rev-parse", "--git-dir"]) {
        Err(e) => return Err(format!("cannot run git: {e}")),
        Ok(false) => return Err(format!("repo `{shown}` is not a git repository")),
        Ok(true) => {}
    }
    let wanted = format!("{}^{{commit}}", spec.base);
    let args = [
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        &wanted,
    ];
    if !run(&args).unwrap_or(false) {
        return Err(format!("base `{}` names no commit in `{shown}`", spec.base));
    }
    if let Some(branch) = &spec.fast_forward {
        let plain = request::plain_name(branch).is_ok();
        if !plain || !run(&["check-ref-format", "--branch", branch]).unwrap_or(false) {
            return Err(format!(
                "fast_forward `{branch}` is not a branch name git accepts"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod cap_tests {
    use super::*;

    #[test]
    fn a_conflicts_files_are_cut_and_the_rest_counted() {
        let files = |n: usize| (0..n).map(|i| format!("f{i}")).collect::<Vec<_>>();
        assert_eq!(cap_files(files(3)), files(3));
        let cut = cap_files(files(MAX_CONFLICT_FILES + 5));
        assert_eq!(cut.len(), MAX_CONFLICT_FILES + 1);
        assert_eq!(cut.last().unwrap(), "… and 5 more files");
    }
}
