//! Acting on the branches attempts leave (docs/branches.md): list them with
//! how far they are ahead of a base and whether it holds them, apply one to
//! a branch the user names (fast-forward or merge commit), delete one.
//!
//! Git runs in the repository as swarmd's git always does (`git.rs`: no
//! hooks, no prompt, the host's `PATH` and `HOME` only), and never in an
//! attempt's checkout. A merge is computed with `git merge-tree
//! --write-tree` (git 2.38 or later), which writes objects only: a conflict
//! changes no branch and no file. A branch is moved with `update-ref` given
//! the value it was read at, so a move that raced another fails rather than
//! losing a commit. The branch the user has checked out is left alone unless
//! the caller asks, and then only when its worktree has no uncommitted
//! change to a tracked file: it is fast-forwarded there to the result.

use std::path::{Path, PathBuf};

// The merge agent (`crate::merge`) runs its git the same way.
pub(crate) use super::git::{AUTHOR_EMAIL, AUTHOR_NAME, Git};
use super::naming::{self, BranchTask};
use super::{RangeChanges, WorktreeError, Worktrees};
use crate::HostEnv;

/// The most swarmd branches one repository's listing reads.
pub const MAX_LISTED: usize = 1000;
/// Most paths [`Branches::conflict_markers`] reads.
pub const MARKED_PATHS: usize = 1000;

/// A listed branch's fields: name, head, committer time.
const LISTED_FORMAT: &str = "%(refname:lstrip=2)%09%(objectname)%09%(committerdate:unix)";

/// Git on a repository's branches.
#[derive(Debug, Clone)]
pub struct Branches {
    git: Git,
    /// Where attempts' checkouts live: `apply` never runs git in one.
    attempts_root: Option<PathBuf>,
    /// Whether this git counts commits ahead in a listing
    /// (`%(ahead-behind:…)`, git 2.41), learned from the first listing.
    ahead_behind: std::sync::Arc<std::sync::OnceLock<bool>>,
}

/// One swarmd branch as the repository has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchState {
    pub name: String,
    /// The task the name names (its full id or short id).
    pub task: BranchTask,
    pub attempt: u32,
    pub head: String,
    /// Commits on it that the base does not have.
    pub ahead: u64,
    /// Whether the base holds its head.
    pub merged: bool,
    /// Its head's committer time, unix milliseconds.
    pub committed_ms: u64,
}

/// How a branch is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApplyMode {
    /// A fast-forward when the target is behind, else a merge commit.
    #[default]
    Auto,
    /// Only a fast-forward; anything else is refused.
    FastForward,
    /// Always a merge commit (unless the target already holds the branch).
    Merge,
}

/// What to apply where.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// The swarmd branch applied.
    pub branch: String,
    /// The branch it is applied to; made at the branch's head when missing.
    pub into: String,
    pub mode: ApplyMode,
    /// Whether `into` may be updated where it is checked out.
    pub checked_out: bool,
    /// The merge commit's message.
    pub message: String,
}

/// What applying did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub outcome: AppliedHow,
    /// `into`'s head before, when it existed.
    pub before: Option<String>,
    /// `into`'s head now.
    pub head: String,
    /// The worktree `into` is checked out in, when it was updated there.
    pub worktree: Option<PathBuf>,
}

/// How `into` moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliedHow {
    Created,
    FastForward,
    Merge,
    UpToDate,
}

impl AppliedHow {
    pub fn as_str(self) -> &'static str {
        match self {
            AppliedHow::Created => "created",
            AppliedHow::FastForward => "fast_forward",
            AppliedHow::Merge => "merge",
            AppliedHow::UpToDate => "up_to_date",
        }
    }
}

/// Why a branch was not applied or deleted.
#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    #[error("no branch `{0}` in the repository")]
    NoBranch(String),
    #[error("`{0}` is not a branch name git accepts")]
    BadName(String),
    #[error("`{0}` is a branch swarmd names for an attempt; apply into another")]
    SwarmdTarget(String),
    #[error("merging {branch} into {into} conflicts in: {}", .files.join(", "))]
    Conflict {
        branch: String,
        into: String,
        files: Vec<String>,
    },
    #[error("{into} has commits {branch} lacks: it cannot be fast-forwarded to it")]
    NotFastForward { branch: String, into: String },
    #[error(
        "{into} is checked out in {}; pass checked_out (`swarmd branch apply --checked-out`) to update it there",
        .worktree.display()
    )]
    CheckedOut { into: String, worktree: PathBuf },
    #[error(
        "{branch} is checked out in the worktree {} (an attempt's kept worktree, or yours); \
         `git worktree remove` it to let the branch be deleted",
        .worktree.display()
    )]
    InWorktree { branch: String, worktree: PathBuf },
    #[error(
        "{into} is checked out in an attempt's checkout, {}; swarmd never runs git there",
        .worktree.display()
    )]
    AttemptCheckout { into: String, worktree: PathBuf },
    #[error(
        "{into} is checked out in {} with uncommitted changes; commit or stash them first",
        .worktree.display()
    )]
    Dirty { into: String, worktree: PathBuf },
    #[error("{0} moved while it was being updated; nothing was changed, try again")]
    Raced(String),
    #[error(transparent)]
    Git(#[from] WorktreeError),
}

impl Default for Branches {
    /// Git found on the default `PATH`, without `HOME`.
    fn default() -> Branches {
        Branches::new(&HostEnv::default())
    }
}

impl Branches {
    /// Git run with the host's `PATH` and `HOME`.
    pub fn new(host: &HostEnv) -> Branches {
        Branches {
            git: Git::new(host),
            attempts_root: None,
            ahead_behind: std::sync::Arc::default(),
        }
    }

    /// These branches with attempts' checkouts under `root`: a branch
    /// checked out in one is never updated there. A worker owns its
    /// checkout, `.git` and attributes included, so git run there could
    /// run what the worker chose.
    pub fn with_attempts_root(mut self, root: PathBuf) -> Branches {
        self.attempts_root = Some(root);
        self
    }

    /// Whether `dir` is under the attempts' root.
    async fn in_attempts_root(&self, dir: &Path) -> bool {
        let Some(root) = &self.attempts_root else {
            return false;
        };
        let canonical = |path: &Path| {
            let path = path.to_owned();
            async move { tokio::fs::canonicalize(&path).await.unwrap_or(path) }
        };
        canonical(dir).await.starts_with(canonical(root).await)
    }

    /// The commit `rev` (a commit, branch or tag) names in `repo` now, or
    /// `None` when it names none.
    pub async fn commit_of(&self, repo: &Path, rev: &str) -> Option<String> {
        let wanted = format!("{rev}^{{commit}}");
        let args = [
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &wanted,
        ];
        self.git.run(repo, &args).await.ok()
    }

    /// Which of `paths` hold a line git's conflict markers open or close
    /// (`<<<<<<< ` or `>>>>>>> `) at `commit`, read from the repository's
    /// objects (never from a checkout). At most [`MARKED_PATHS`] paths are
    /// read; `None` when git could not answer.
    pub async fn conflict_markers(
        &self,
        repo: &Path,
        commit: &str,
        paths: &[&str],
    ) -> Option<Vec<String>> {
        if !is_commit_id(commit) {
            return None;
        }
        let paths = &paths[..paths.len().min(MARKED_PATHS)];
        if paths.is_empty() {
            return Some(Vec::new());
        }
        // Paths as written: a name starting with `:` is no pathspec magic.
        let mut args = vec![
            "--literal-pathspecs",
            "grep",
            "-l",
            "-I",
            "-e",
            "^<<<<<<< ",
            "-e",
            "^>>>>>>> ",
            commit,
            "--",
        ];
        args.extend_from_slice(paths);
        let (_, listed) = self.git.run_answer(repo, &args).await.ok()?;
        let prefix = format!("{commit}:");
        Some(
            listed
                .lines()
                .filter_map(|line| line.strip_prefix(&prefix))
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The swarmd branches of `repo` (at most [`MAX_LISTED`], by name), each
    /// against `base` (a commit, branch or tag).
    ///
    /// # Errors
    /// `UnknownBase` when `base` names no commit; a git failure.
    pub async fn list(&self, repo: &Path, base: &str) -> Result<Vec<BranchState>, WorktreeError> {
        self.list_where(repo, base, |_| true).await
    }

    /// As [`Self::list`], only the branches whose task `keep` wants: with
    /// a git before 2.41 a branch ahead of the base costs a `git rev-list`
    /// to count, so a caller lists only its own.
    ///
    /// # Errors
    /// As `list`.
    pub async fn list_where(
        &self,
        repo: &Path,
        base: &str,
        keep: impl Fn(&BranchTask) -> bool,
    ) -> Result<Vec<BranchState>, WorktreeError> {
        let chosen = |name: &str| naming::parse_branch(name).filter(|(task, _)| keep(task));
        self.states(repo, base, &["refs/heads/swarmd/"], true, chosen)
            .await
    }

    /// The branches `named` that `repo` has (the first `2 ×` [`MAX_LISTED`]
    /// names: a merge task names two), each with the task and attempt it
    /// is given under, against `base`: the branches a merge task made,
    /// whatever their names. Each name must be one git accepts
    /// (`merge::plain_name`); others are left out.
    ///
    /// # Errors
    /// As `list`.
    pub async fn list_named(
        &self,
        repo: &Path,
        base: &str,
        named: &[(String, BranchTask, u32)],
    ) -> Result<Vec<BranchState>, WorktreeError> {
        let named: Vec<&(String, BranchTask, u32)> = named
            .iter()
            .filter(|(name, _, _)| crate::merge::plain_name(name).is_ok())
            .take(2 * MAX_LISTED)
            .collect();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let patterns: Vec<String> = named
            .iter()
            .map(|(name, _, _)| format!("refs/heads/{name}"))
            .collect();
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        // A pattern also matches the refs below it: only exact names count,
        // and no `--count` lets refs below a name crowd out other names. The
        // first task to name a branch is given it.
        let mut by_name = std::collections::HashMap::with_capacity(named.len());
        for (name, task, attempt) in &named {
            by_name.entry(name.as_str()).or_insert((task, *attempt));
        }
        let chosen = |name: &str| {
            by_name
                .get(name)
                .map(|(task, attempt)| ((*task).clone(), *attempt))
        };
        self.states(repo, base, &patterns, false, chosen).await
    }

    /// The branches under `patterns` that `chosen` gives a task, against
    /// `base`; with `capped`, only the first [`MAX_LISTED`] refs are read.
    async fn states(
        &self,
        repo: &Path,
        base: &str,
        patterns: &[&str],
        capped: bool,
        chosen: impl Fn(&str) -> Option<(BranchTask, u32)>,
    ) -> Result<Vec<BranchState>, WorktreeError> {
        let wanted = format!("{base}^{{commit}}");
        let base_head = self
            .git
            .run(repo, &["rev-parse", "--verify", "--quiet", &wanted])
            .await
            .map_err(|_| WorktreeError::UnknownBase {
                repo: repo.to_owned(),
                base: base.to_owned(),
            })?;
        let (listed, counted) = self.listed(repo, &base_head, capped, patterns).await?;
        let merged = if counted {
            String::new()
        } else {
            let merged = ["--format=%(refname:lstrip=2)", "--merged", &base_head];
            self.git
                .run(repo, &[&["for-each-ref"][..], &merged, patterns].concat())
                .await?
        };
        let merged: std::collections::HashSet<&str> = merged.lines().collect();
        let mut branches = Vec::new();
        for line in listed.lines() {
            let mut fields = line.split('\t');
            let (Some(name), Some(head), Some(time)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Some((task, attempt)) = chosen(name) else {
                continue;
            };
            // `ahead-behind` is "<ahead> <behind>": the base holds the
            // branch exactly when none of its commits is ahead.
            let ahead = fields
                .next()
                .and_then(|pair| pair.split(' ').next())
                .and_then(|ahead| ahead.parse::<u64>().ok());
            let (ahead, is_merged) = match ahead {
                Some(ahead) => (ahead, ahead == 0),
                None if merged.contains(name) => (0, true),
                None => {
                    let range = format!("{base_head}..{head}");
                    let ahead = self
                        .git
                        .run(repo, &["rev-list", "--count", &range])
                        .await?
                        .parse()
                        .unwrap_or(0);
                    (ahead, false)
                }
            };
            branches.push(BranchState {
                name: name.to_owned(),
                task,
                attempt,
                head: head.to_owned(),
                ahead,
                merged: is_merged,
                committed_ms: time.parse::<u64>().unwrap_or(0).saturating_mul(1000),
            });
        }
        Ok(branches)
    }

    /// The refs under `patterns` (`LISTED_FORMAT`'s fields), and whether
    /// each line also counts its commits ahead of `base_head`: git 2.41 and
    /// later do in the listing itself; an older git refuses the field, which
    /// is learned once, and each unmerged branch is then counted on its own
    /// (a `rev-list` each).
    async fn listed(
        &self,
        repo: &Path,
        base_head: &str,
        capped: bool,
        patterns: &[&str],
    ) -> Result<(String, bool), WorktreeError> {
        if self.ahead_behind.get() != Some(&false) {
            let counted = format!("{LISTED_FORMAT}%09%(ahead-behind:{base_head})");
            if let Ok(listed) = self.for_each_ref(repo, &counted, capped, patterns).await {
                let _ = self.ahead_behind.set(true);
                return Ok((listed, true));
            }
        }
        let listed = self
            .for_each_ref(repo, LISTED_FORMAT, capped, patterns)
            .await?;
        // Only a listing that works without the field says git lacks it.
        let _ = self.ahead_behind.set(false);
        Ok((listed, false))
    }

    /// `git for-each-ref` with `format` over `patterns`, the first
    /// [`MAX_LISTED`] refs when `capped`.
    async fn for_each_ref(
        &self,
        repo: &Path,
        format: &str,
        capped: bool,
        patterns: &[&str],
    ) -> Result<String, WorktreeError> {
        let format = format!("--format={format}");
        let count = format!("--count={MAX_LISTED}");
        let mut args = vec!["for-each-ref", format.as_str()];
        if capped {
            args.push(&count);
        }
        self.git.run(repo, &[&args[..], patterns].concat()).await
    }

    /// What changed from commit `base` to commit `head` in `repo`, each part
    /// cut at [`DEFAULT_DIFF_MAX_BYTES`](super::DEFAULT_DIFF_MAX_BYTES).
    ///
    /// # Errors
    /// `BadName` unless both are full commit ids (hex); a git failure.
    pub async fn changes(
        &self,
        repo: &Path,
        base: &str,
        head: &str,
    ) -> Result<RangeChanges, BranchError> {
        for commit in [base, head] {
            if !is_commit_id(commit) {
                return Err(BranchError::BadName(commit.to_owned()));
            }
        }
        Ok(self
            .git
            .changes(repo, base, head, super::DEFAULT_DIFF_MAX_BYTES)
            .await?)
    }

    /// The commit `branch` is at, when it exists.
    pub async fn head_of(&self, repo: &Path, branch: &str) -> Option<String> {
        head_of(&self.git, repo, branch).await
    }

    /// The branches checked out in `repo`'s worktrees, with where.
    ///
    /// # Errors
    /// A git failure.
    pub async fn checked_out(&self, repo: &Path) -> Result<Vec<(String, PathBuf)>, WorktreeError> {
        let listed = self
            .git
            .run(repo, &["worktree", "list", "--porcelain", "-z"])
            .await?;
        let mut found = Vec::new();
        let mut path = None;
        for field in listed.split('\0') {
            if let Some(dir) = field.strip_prefix("worktree ") {
                path = Some(PathBuf::from(dir));
            } else if let Some(branch) = field.strip_prefix("branch refs/heads/")
                && let Some(dir) = &path
            {
                found.push((branch.to_owned(), dir.clone()));
            }
        }
        Ok(found)
    }

    /// Applies `request.branch` to `request.into` (see the module's rules).
    ///
    /// # Errors
    /// Each refusal as a [`BranchError`]; nothing is changed by any.
    pub async fn apply(&self, repo: &Path, request: &ApplyRequest) -> Result<Applied, BranchError> {
        let git = &self.git;
        let into = request.into.as_str();
        // The plain checks first: a name git would expand (`@{-1}`) or one
        // too long for an argument never reaches a git command.
        if crate::merge::plain_name(into).is_err() {
            return Err(BranchError::BadName(into.to_owned()));
        }
        // git refuses a bad name with exit 128, a fault to `run_answer`.
        match git
            .run_answer(repo, &["check-ref-format", "--branch", into])
            .await
        {
            Ok((true, shown)) if shown == into => {}
            Ok(_) | Err(WorktreeError::Git { .. }) => {
                return Err(BranchError::BadName(into.to_owned()));
            }
            Err(other) => return Err(other.into()),
        }
        if into == "swarmd" || into.starts_with("swarmd/") {
            return Err(BranchError::SwarmdTarget(into.to_owned()));
        }
        let head = head_of(git, repo, &request.branch)
            .await
            .ok_or_else(|| BranchError::NoBranch(request.branch.clone()))?;
        let reference = format!("refs/heads/{into}");
        let Some(before) = head_of(git, repo, into).await else {
            git.run(repo, &["update-ref", &reference, &head, ""])
                .await
                .map_err(|_| BranchError::Raced(into.to_owned()))?;
            return Ok(Applied {
                outcome: AppliedHow::Created,
                before: None,
                head,
                worktree: None,
            });
        };
        if before == head || is_ancestor(git, repo, &head, &before).await? {
            return Ok(Applied {
                outcome: AppliedHow::UpToDate,
                before: Some(before.clone()),
                head: before,
                worktree: None,
            });
        }
        let fast_forward = is_ancestor(git, repo, &before, &head).await?;
        let (outcome, after) = match request.mode {
            ApplyMode::Auto | ApplyMode::FastForward if fast_forward => {
                (AppliedHow::FastForward, head.clone())
            }
            ApplyMode::FastForward => {
                return Err(BranchError::NotFastForward {
                    branch: request.branch.clone(),
                    into: into.to_owned(),
                });
            }
            ApplyMode::Auto | ApplyMode::Merge => {
                let merged = self.merge_commit(repo, request, &before, &head).await?;
                (AppliedHow::Merge, merged)
            }
        };
        let worktree = self
            .checked_out(repo)
            .await?
            .into_iter()
            .find_map(|(branch, dir)| (branch == into).then_some(dir));
        match &worktree {
            None => {
                git.run(repo, &["update-ref", &reference, &after, &before])
                    .await
                    .map_err(|_| BranchError::Raced(into.to_owned()))?;
            }
            Some(dir) if !request.checked_out => {
                return Err(BranchError::CheckedOut {
                    into: into.to_owned(),
                    worktree: dir.clone(),
                });
            }
            Some(dir) if self.in_attempts_root(dir).await => {
                return Err(BranchError::AttemptCheckout {
                    into: into.to_owned(),
                    worktree: dir.clone(),
                });
            }
            Some(dir) => {
                let status = git
                    .run(
                        dir,
                        &[
                            "--no-optional-locks",
                            "status",
                            "--porcelain",
                            "--untracked-files=no",
                        ],
                    )
                    .await?;
                if !status.is_empty() {
                    return Err(BranchError::Dirty {
                        into: into.to_owned(),
                        worktree: dir.clone(),
                    });
                }
                // The result's first parent is `before`: a fast-forward
                // there moves the branch, its index and its files together.
                git.run(dir, &["merge", "--ff-only", "--quiet", &after])
                    .await?;
            }
        }
        Ok(Applied {
            outcome,
            before: Some(before),
            head: after,
            worktree,
        })
    }

    /// The merge commit of `head` into `before`, written without touching
    /// any branch or file.
    async fn merge_commit(
        &self,
        repo: &Path,
        request: &ApplyRequest,
        before: &str,
        head: &str,
    ) -> Result<String, BranchError> {
        let git = &self.git;
        let (clean, out) = git
            .run_answer(
                repo,
                &[
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    before,
                    head,
                ],
            )
            .await?;
        let mut lines = out.lines();
        let tree = lines.next().unwrap_or_default().to_owned();
        if !clean {
            let mut files: Vec<String> =
                lines.filter(|l| !l.is_empty()).map(str::to_owned).collect();
            files.dedup();
            return Err(BranchError::Conflict {
                branch: request.branch.clone(),
                into: request.into.clone(),
                files: crate::merge::cap_files(files),
            });
        }
        let name = format!("user.name={AUTHOR_NAME}");
        let email = format!("user.email={AUTHOR_EMAIL}");
        Ok(git
            .run(
                repo,
                &[
                    "-c",
                    &name,
                    "-c",
                    &email,
                    "commit-tree",
                    &tree,
                    "-p",
                    before,
                    "-p",
                    head,
                    "-m",
                    &request.message,
                ],
            )
            .await?)
    }

    /// Whether `delete` may delete the swarmd branch `branch`: it is one
    /// swarmd names and no worktree has it checked out. A dry prune asks
    /// this, so it predicts what a prune does.
    ///
    /// # Errors
    /// `InWorktree`, `BadName` for a name swarmd does not make.
    pub async fn deletable(&self, repo: &Path, branch: &str) -> Result<(), BranchError> {
        if !naming::is_swarmd_branch(branch) {
            return Err(BranchError::BadName(branch.to_owned()));
        }
        if let Some((_, dir)) = self
            .checked_out(repo)
            .await?
            .into_iter()
            .find(|(b, _)| b == branch)
        {
            return Err(BranchError::InWorktree {
                branch: branch.to_owned(),
                worktree: dir,
            });
        }
        Ok(())
    }

    /// Deletes the swarmd branch `branch` if it is still at `head` and
    /// checked out nowhere.
    ///
    /// # Errors
    /// `InWorktree`, `Raced` (it moved), `BadName` for a name swarmd does
    /// not make.
    pub async fn delete(&self, repo: &Path, branch: &str, head: &str) -> Result<(), BranchError> {
        self.deletable(repo, branch).await?;
        let reference = format!("refs/heads/{branch}");
        self.git
            .run(repo, &["update-ref", "-d", &reference, head])
            .await
            .map_err(|_| BranchError::Raced(branch.to_owned()))?;
        Ok(())
    }
}

impl Worktrees {
    /// The commit an attempt's branch starts from: what `base` names, or,
    /// for `refs/heads/swarmd/<task>-<attempt>` (the id-only name a
    /// continuation may be given) that does not exist, the readable branch
    /// of that task's attempt when the repository has exactly one.
    pub(super) async fn resolve_start(&self, repo: &Path, base: &str) -> Option<String> {
        let wanted = format!("{base}^{{commit}}");
        if let Ok(commit) = self
            .git
            .run(repo, &["rev-parse", "--verify", "--quiet", &wanted])
            .await
        {
            return Some(commit);
        }
        let name = base.strip_prefix("refs/heads/")?;
        let (BranchTask::Full(task), attempt) = naming::parse_branch(name)? else {
            return None;
        };
        let branch = find_branch(&self.git, repo, &task, attempt).await?;
        head_of(&self.git, repo, &branch).await
    }
}

/// The readable branch of attempt `attempt` of `task_id` in `repo`, when
/// exactly one name there carries its short id and attempt.
async fn find_branch(git: &Git, repo: &Path, task_id: &str, attempt: u32) -> Option<String> {
    let listed = git
        .run(
            repo,
            &[
                "for-each-ref",
                "--format=%(refname:lstrip=2)",
                "refs/heads/swarmd/",
            ],
        )
        .await
        .ok()?;
    let mut found = listed.lines().filter(|name| {
        matches!(naming::parse_branch(name),
            Some((task @ BranchTask::Short(_), n)) if n == attempt && task.is(task_id))
    });
    let first = found.next()?;
    found.next().is_none().then(|| first.to_owned())
}

/// The commit `branch` is at, when it exists.
async fn head_of(git: &Git, repo: &Path, branch: &str) -> Option<String> {
    let wanted = format!("refs/heads/{branch}^{{commit}}");
    git.run(repo, &["rev-parse", "--verify", "--quiet", &wanted])
        .await
        .ok()
}

/// Whether `id` is a full commit id: 40 (SHA-1) or 64 (SHA-256) hex digits,
/// so that it never reaches git as an option or a revision expression.
fn is_commit_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `ancestor` is an ancestor of (or is) `of`.
async fn is_ancestor(
    git: &Git,
    repo: &Path,
    ancestor: &str,
    of: &str,
) -> Result<bool, WorktreeError> {
    Ok(git
        .run_answer(repo, &["merge-base", "--is-ancestor", ancestor, of])
        .await?
        .0)
}

#[cfg(test)]
#[path = "branches_tests.rs"]
mod tests;
