//! Worktree isolation (docs/tasks.md, Worktrees): each attempt of an agent
//! with `worktree` configured runs in a fresh `git worktree` of the agent's
//! repository, on a branch of its own, under `<state_dir>/worktrees/`.
//!
//! [`Worktrees`] is built once per daemon and shared by every agent: it
//! knows the root directory and holds one async mutex per repository, so
//! that swarmd's own `git worktree add`/`remove`/`prune` on one repository
//! never race each other (git's lock files would refuse the loser).
//! [`Worktrees::create`] makes an attempt's [`Checkout`];
//! [`Worktrees::conclude`] commits what the worker left uncommitted and
//! describes the branch against its base as a [`WorktreeReport`] (the
//! attempt's `worktree` artifact); [`Worktrees::release`] removes the
//! directory unless `keep` says otherwise. [`Worktrees::recover`] does both
//! at startup for the checkouts of attempts that died with the previous
//! process. [`AttemptWorktree`] is how the process spawner drives one.
//!
//! Git runs as a child process (`git`), never as a library: the user's own
//! git, its configuration and its repository format apply unchanged.

mod attempt;
pub mod bootstrap;
mod bound;
pub mod branches;
mod continued;
mod git;
mod lifecycle;
pub mod naming;
pub mod ports;
pub mod setup;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use swarmd_output_store::{ContentRef, OutputEvent};

use crate::HostEnv;
use git::Git;

pub use attempt::AttemptWorktree;
pub use bootstrap::{Bootstrap, SetupSpec};
pub use continued::{PriorWork, open_continued, open_for_task, open_from_prior, prior_work};
pub use git::RangeChanges;
pub use lifecycle::{RecoveredCheckout, keep_name, keep_rule};
pub use ports::PortsSpec;

/// Name of the artifact that records an attempt's worktree.
pub const ARTIFACT: &str = "worktree";
/// Producer name of the `worktree` artifact.
pub const PRODUCER: &str = "worktree";
/// Default cap of the diff kept in the artifact, and of its list of
/// changed paths; beyond it, `diff_truncated` and `files_truncated`.
pub const DEFAULT_DIFF_MAX_BYTES: usize = 1024 * 1024;

/// `worktree = { repo, base, keep, copy, link, setup, ports }` of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeSpec {
    /// The repository worktrees are added to; absolute.
    pub repo: PathBuf,
    /// What each attempt's branch starts from: a commit, branch or tag.
    pub base: String,
    pub keep: KeepRule,
    /// What makes each new worktree ready to work in.
    pub bootstrap: Bootstrap,
}

/// When an attempt's worktree directory is left in place after it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeepRule {
    /// Always removed.
    #[default]
    Never,
    /// Kept when the attempt did not pass.
    OnFailure,
    /// Always kept.
    Always,
}

impl KeepRule {
    fn keeps(self, passed: bool) -> bool {
        match self {
            KeepRule::Never => false,
            KeepRule::OnFailure => !passed,
            KeepRule::Always => true,
        }
    }
}

/// One attempt's worktree while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub repo: PathBuf,
    pub dir: PathBuf,
    pub branch: String,
    /// The commit `base` resolved to when the worktree was added.
    pub base: String,
    pub keep: KeepRule,
    /// The checkout's git directory (`<common dir>/worktrees/<name>`,
    /// canonical), found in the repository's records once git added it:
    /// the only one swarmd's git uses there, whatever the checkout's own
    /// `.git` says. `None` while (or when) git has not added it.
    pub git_dir: Option<PathBuf>,
    /// The task's prompt's first line, when the worktrees were told it
    /// ([`Worktrees::name_task`]): what the branch and swarmd's commit on it
    /// are named after.
    pub title: Option<String>,
    /// The ports the attempt holds (`worktree.ports`) until its checkout is
    /// released; empty without.
    pub ports: Vec<u16>,
    /// What the bootstrap copied or linked in, relative to `dir`: never part
    /// of the worker's leftovers.
    pub placed: Vec<PathBuf>,
}

impl Checkout {
    /// The variables the worker gets: `SWARM_WORKTREE`, `SWARM_BRANCH`,
    /// `SWARM_BASE`.
    pub fn env(&self) -> [(&'static str, String); 3] {
        [
            ("SWARM_WORKTREE", self.dir.display().to_string()),
            ("SWARM_BRANCH", self.branch.clone()),
            ("SWARM_BASE", self.base.clone()),
        ]
    }

    /// The variables of the ports the attempt holds: `SWARM_PORT` and
    /// `SWARM_PORT_0` … (see [`ports::port_env`]).
    pub fn port_env(&self) -> Vec<(String, String)> {
        ports::port_env(&self.ports)
    }
}

/// What an attempt left on its branch: the value of the `worktree` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorktreeReport {
    pub branch: String,
    pub base: String,
    pub head: String,
    /// Whether swarmd committed changes the worker left uncommitted.
    pub committed_leftovers: bool,
    /// Paths changed between `base` and `head`, as many as fit the cap.
    pub files: Vec<String>,
    /// Whether more paths changed than `files` lists.
    pub files_truncated: bool,
    /// `git diff base head`, cut at the cap.
    pub diff: String,
    pub diff_truncated: bool,
}

impl WorktreeReport {
    /// The `worktree` artifact that records it.
    pub fn artifact(&self) -> OutputEvent {
        OutputEvent::Artifact {
            name: ARTIFACT.to_owned(),
            content: ContentRef::Inline {
                value: serde_json::to_value(self).unwrap_or_default(),
            },
        }
    }
}

/// Why a worktree could not be made, described or removed.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("cannot run git: {source}")]
    Spawn {
        #[source]
        source: std::io::Error,
    },
    #[error("git {command} in {}: {message}", .dir.display())]
    Git {
        dir: PathBuf,
        command: String,
        message: String,
    },
    #[error("worktree.repo `{}` is not a git repository", .0.display())]
    NotARepository(PathBuf),
    #[error("worktree.base `{base}` names no commit in `{}`", .repo.display())]
    UnknownBase { repo: PathBuf, base: String },
    #[error(
        "the worktree's `.git` no longer names its git directory (something in it replaced it): swarmd ran no git in {} and committed nothing left there",
        .dir.display()
    )]
    Tampered { dir: PathBuf },
    #[error(
        "{} is no worktree of `{}` by the repository's records: swarmd ran no git in it",
        .dir.display(),
        .repo.display()
    )]
    Unregistered { dir: PathBuf, repo: PathBuf },
    #[error("worktree bootstrap in {}: {source}", .dir.display())]
    Bootstrap {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Ports(#[from] ports::PortsExhausted),
    #[error("cannot prepare {}: {source}", .dir.display())]
    Directory {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The daemon's worktrees: where they live, how git runs, and one lock per
/// repository. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Worktrees {
    root: PathBuf,
    git: Git,
    diff_max_bytes: usize,
    /// One async mutex per repository (by its path as configured). The std
    /// mutex guards only the map and is never held across an `.await`.
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Each task's prompt's first line, by task id, from [`Worktrees::name_task`]
    /// until its checkout is released.
    titles: Mutex<HashMap<String, String>>,
    /// The ports live attempts hold, over every agent.
    ports: ports::PortPool,
}

impl Worktrees {
    /// Worktrees under `root` (`<state_dir>/worktrees`), git run with the
    /// host's `PATH` and `HOME`. A relative root is made absolute here: git
    /// reads paths relative to the repository it runs in.
    pub fn new(root: impl Into<PathBuf>, host: &HostEnv) -> Worktrees {
        let root = root.into();
        Worktrees {
            root: std::path::absolute(&root).unwrap_or(root),
            git: Git::new(host),
            diff_max_bytes: DEFAULT_DIFF_MAX_BYTES,
            locks: Mutex::new(HashMap::new()),
            titles: Mutex::new(HashMap::new()),
            ports: ports::PortPool::default(),
        }
    }

    /// Sets the cap of the diff kept in a report.
    pub fn with_diff_max_bytes(mut self, cap: usize) -> Worktrees {
        self.diff_max_bytes = cap;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lock of `repo`'s worktree list.
    fn lock_of(&self, repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(locks.entry(repo.to_path_buf()).or_default())
    }
}

/// Checks a spec at link time: `repo` is an absolute path to a git
/// repository, `base` names a commit in it, and the bootstrap's paths stay
/// inside it.
///
/// # Errors
/// The problem in words, for `check-config`.
pub fn check(spec: &WorktreeSpec, host: &HostEnv) -> Result<(), String> {
    spec.bootstrap.check()?;
    git::check_blocking(host, &spec.repo, &spec.base)
}
