//! An attempt's worktree from start to end: `create` adds it on a new branch
//! at the resolved base, `conclude` commits what the worker left and
//! describes the branch, `release` removes the directory (per `keep`) and a
//! branch with nothing on it, and `recover` does all three for the
//! checkouts a previous process left behind.
//!
//! Git runs in a checkout only by the repository's records of it
//! (`bound.rs`): a checkout whose `.git` no longer names the git directory
//! the records name is refused (`Tampered`), nothing in it committed, and
//! removed without git.
//!
//! Each checkout has a small JSON note beside its directory
//! (`<root>/<name>.json`: repo, branch, base, keep, title), written before the
//! worktree is added and removed once it is released, so recovery knows what
//! to do with a directory it finds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use swarmd_engine::ids::AttemptId;

use super::git::{AUTHOR_EMAIL, AUTHOR_NAME, Bound};
use super::naming;
use super::{Checkout, KeepRule, WorktreeError, WorktreeReport, WorktreeSpec, Worktrees};

/// The note kept beside a checkout's directory while it exists.
#[derive(Debug, Serialize, Deserialize)]
struct Note {
    repo: PathBuf,
    branch: String,
    base: String,
    keep: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    /// What the bootstrap placed in the checkout, kept out of its commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    placed: Vec<PathBuf>,
}

/// A checkout found at startup: the attempt it belonged to and what it
/// left (or why that could not be told).
#[derive(Debug)]
pub struct RecoveredCheckout {
    /// The directory's name: `<task_id>-<attempt>`.
    pub name: String,
    pub report: Result<WorktreeReport, WorktreeError>,
}

impl RecoveredCheckout {
    /// The attempt the checkout belonged to, read from its name.
    pub fn attempt(&self) -> Option<AttemptId> {
        let (task, n) = self.name.rsplit_once('-')?;
        Some(AttemptId::new(task.parse().ok()?, n.parse().ok()?))
    }
}

impl Worktrees {
    /// Adds a worktree of `spec.repo` at `spec.base` on the new branch
    /// `swarmd/t-<short id>-<slug>/<attempt>` (`naming`; the id-only
    /// `swarmd/<task>-<attempt>` when the task's prompt was not told), in
    /// `<root>/<task>-<attempt>`; when that branch exists already (the
    /// attempt resumed after a restart), on it.
    ///
    /// # Errors
    /// The repository is gone or not one, the base names no commit, the
    /// root cannot be made, or git refuses (the branch or directory exists).
    pub async fn create(
        &self,
        spec: &WorktreeSpec,
        task_id: &str,
        attempt: u32,
    ) -> Result<Checkout, WorktreeError> {
        let repo = &spec.repo;
        if !repo.is_dir()
            || self
                .git
                .run(repo, &["rev-parse", "--is-inside-work-tree"])
                .await
                .is_err()
        {
            return Err(WorktreeError::NotARepository(repo.clone()));
        }
        let unknown = || WorktreeError::UnknownBase {
            repo: repo.clone(),
            base: spec.base.clone(),
        };
        let base = self
            .resolve_start(repo, &spec.base)
            .await
            .ok_or_else(unknown)?;
        let name = format!("{task_id}-{attempt}");
        let title = self.title_of(task_id);
        let branch = naming::branch_name(task_id, attempt, title.as_deref());
        // The branch exists when the attempt was resumed after a restart (a
        // delegated SubAgent outlives the daemon): its checkout is added
        // back on it, at the base it forked from.
        let reference = format!("refs/heads/{branch}");
        let resumed = self
            .git
            .run(repo, &["rev-parse", "--verify", "--quiet", &reference])
            .await
            .is_ok();
        let base = if resumed {
            self.git
                .run(repo, &["merge-base", &base, &reference])
                .await
                .unwrap_or(base)
        } else {
            base
        };
        let mut checkout = Checkout {
            repo: repo.clone(),
            dir: self.root.join(&name),
            branch,
            base,
            keep: spec.keep,
            git_dir: None,
            title,
            ports: Vec::new(),
            placed: Vec::new(),
        };
        self.write_note(&checkout).await?;
        let dir = checkout.dir.display().to_string();
        let mut args = vec!["worktree", "add", "--quiet"];
        if resumed {
            args.extend([dir.as_str(), checkout.branch.as_str()]);
        } else {
            args.extend(["-b", &checkout.branch, &dir, &checkout.base]);
        }
        let lock = self.lock_of(repo);
        let added = {
            let _serial = lock.lock().await;
            self.git.run(repo, &args).await
        };
        if let Err(error) = added {
            let _ = tokio::fs::remove_file(self.note_path(&checkout.dir)).await;
            return Err(error);
        }
        checkout.git_dir = self.registered_git_dir(repo, &checkout.dir).await;
        if checkout.git_dir.is_none() {
            let unregistered = WorktreeError::Unregistered {
                dir: checkout.dir.clone(),
                repo: repo.clone(),
            };
            if let Err(error) = self.release(&checkout, false).await {
                tracing::warn!(branch = %checkout.branch, %error, "worktree not released");
            }
            return Err(unregistered);
        }
        if let Err(error) = self.bootstrap(spec, &mut checkout).await {
            if let Err(error) = self.release(&checkout, false).await {
                tracing::warn!(branch = %checkout.branch, %error, "worktree not released");
            }
            return Err(error);
        }
        Ok(checkout)
    }

    /// Copies and links the bootstrap's files into a new checkout and gives
    /// it its ports; the setup command is the spawner's (it needs the
    /// agent's environment).
    async fn bootstrap(
        &self,
        spec: &WorktreeSpec,
        checkout: &mut Checkout,
    ) -> Result<(), WorktreeError> {
        let bootstrap = &spec.bootstrap;
        if bootstrap.places_files() {
            let (repo, dir) = (checkout.repo.clone(), checkout.dir.clone());
            let files = bootstrap.clone();
            let placed = tokio::task::spawn_blocking(move || {
                super::bootstrap::place_files(&repo, &dir, &files)
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|placed| placed)
            .map_err(|source| WorktreeError::Bootstrap {
                dir: checkout.dir.clone(),
                source,
            })?;
            tracing::debug!(
                copied = placed.copied.len(),
                linked = placed.linked.len(),
                "worktree bootstrap files placed"
            );
            checkout.placed = placed.copied.into_iter().chain(placed.linked).collect();
            // Recovery must keep them out of the commit too.
            self.write_note(checkout).await?;
        }
        if let Some(ports) = &bootstrap.ports {
            checkout.ports = self.ports.take(ports)?;
        }
        Ok(())
    }

    /// Commits whatever the worker left uncommitted in the checkout (as
    /// swarmd), then describes its branch against the base.
    ///
    /// # Errors
    /// `Tampered` (or `Unregistered`) when the checkout's `.git` no longer
    /// names its git directory: no git ran in it. Else a git command failed;
    /// the checkout is left as it is.
    pub async fn conclude(&self, checkout: &Checkout) -> Result<WorktreeReport, WorktreeError> {
        let committed_leftovers = if checkout.dir.is_dir() {
            let bound = self.bound(checkout)?;
            self.commit_leftovers(&bound, checkout).await?
        } else {
            false
        };
        let repo = &checkout.repo;
        let reference = format!("refs/heads/{}", checkout.branch);
        let head = self
            .git
            .run(repo, &["rev-parse", "--verify", &reference])
            .await?;
        let changes = self
            .git
            .changes(repo, &checkout.base, &head, self.diff_max_bytes)
            .await?;
        Ok(WorktreeReport {
            branch: checkout.branch.clone(),
            base: checkout.base.clone(),
            head,
            committed_leftovers,
            files: changes.files,
            files_truncated: changes.files_truncated,
            diff: changes.diff,
            diff_truncated: changes.diff_truncated,
        })
    }

    /// Removes the checkout's directory unless `keep` keeps it for an
    /// attempt that `passed` or not, and deletes its branch when it has no
    /// commit beyond the base and no directory any more. Returns whether the
    /// directory was kept.
    ///
    /// # Errors
    /// Git refused to remove the worktree or the branch.
    pub async fn release(&self, checkout: &Checkout, passed: bool) -> Result<bool, WorktreeError> {
        // The attempt is over whatever becomes of its directory.
        self.ports.release(&checkout.ports);
        let keep = checkout.keep.keeps(passed);
        if !keep {
            let repo = &checkout.repo;
            let dir = checkout.dir.display().to_string();
            let lock = self.lock_of(repo);
            let _serial = lock.lock().await;
            let intact = checkout.dir.exists() && self.bound(checkout).is_ok();
            if intact {
                self.git
                    .run(repo, &["worktree", "remove", "--force", &dir])
                    .await?;
            } else {
                // A checkout git cannot be trusted in is removed without it;
                // its registration then names nothing and is pruned.
                if let Err(source) = tokio::fs::remove_dir_all(&checkout.dir).await
                    && source.kind() != std::io::ErrorKind::NotFound
                {
                    return Err(WorktreeError::Directory {
                        dir: checkout.dir.clone(),
                        source,
                    });
                }
                self.git.run(repo, &["worktree", "prune"]).await?;
            }
            let reference = format!("refs/heads/{}", checkout.branch);
            let head = self
                .git
                .run(repo, &["rev-parse", "--verify", &reference])
                .await;
            if head.is_ok_and(|head| head == checkout.base) {
                self.git
                    .run(repo, &["branch", "-D", "--quiet", &checkout.branch])
                    .await?;
            }
        }
        let _ = tokio::fs::remove_file(self.note_path(&checkout.dir)).await;
        self.forget_title(&checkout.dir);
        Ok(keep)
    }

    /// Concludes and releases every checkout a previous process left under
    /// the root (as a failed attempt: `keep = "on_failure"` keeps its
    /// directory), then prunes each repository's worktree list.
    pub async fn recover(&self) -> Vec<RecoveredCheckout> {
        let mut found = Vec::new();
        let Ok(mut entries) = tokio::fs::read_dir(&self.root).await else {
            return found;
        };
        let mut repos = BTreeSet::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Some(checkout) = self.read_note(&path).await else {
                tracing::warn!(note = %path.display(), "unreadable worktree note; left in place");
                continue;
            };
            repos.insert(checkout.repo.clone());
            let name = checkout
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let report = self.conclude(&checkout).await;
            if let Err(error) = self.release(&checkout, false).await {
                tracing::warn!(worktree = %name, %error, "recovered worktree not removed");
            }
            found.push(RecoveredCheckout { name, report });
        }
        for repo in repos {
            let lock = self.lock_of(&repo);
            let _serial = lock.lock().await;
            if let Err(error) = self.git.run(&repo, &["worktree", "prune"]).await {
                tracing::warn!(repo = %repo.display(), %error, "git worktree prune failed");
            }
        }
        found
    }

    /// `git add -A` and a commit by swarmd when the checkout has changes.
    /// Git is not run in nested repositories (`--ignore-submodules=all`):
    /// their configuration is the worker's.
    async fn commit_leftovers(
        &self,
        at: &Bound<'_>,
        checkout: &Checkout,
    ) -> Result<bool, WorktreeError> {
        // The bootstrap's copies and links are the repository's, not the
        // worker's work.
        let excludes: Vec<String> = checkout
            .placed
            .iter()
            .map(|p| format!(":(exclude,literal){}", p.display()))
            .collect();
        let mut excluded: Vec<&str> = Vec::new();
        if !excludes.is_empty() {
            excluded.extend(["--", "."]);
            excluded.extend(excludes.iter().map(String::as_str));
        }
        // One byte tells whether there is anything: the list is not read,
        // and git is stopped holding no lock (`--no-optional-locks`).
        let (status, _) = self
            .git
            .run_capped(
                at,
                &[
                    &[
                        "--no-optional-locks",
                        "status",
                        "--porcelain",
                        "--ignore-submodules=all",
                    ][..],
                    &excluded,
                ]
                .concat(),
                1,
            )
            .await?;
        if status.is_empty() {
            return Ok(false);
        }
        self.git
            .run(at, &[&["add", "-A"][..], &excluded].concat())
            .await?;
        let name = format!("user.name={AUTHOR_NAME}");
        let email = format!("user.email={AUTHOR_EMAIL}");
        let dir_name = checkout
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (task, attempt) = match dir_name.rsplit_once('-') {
            Some((task, n)) => (task, n.parse().ok()),
            None => (dir_name.as_str(), None),
        };
        let message =
            naming::leftovers_message(task, attempt, &checkout.branch, checkout.title.as_deref());
        self.git
            .run(
                at,
                &[
                    "-c",
                    &name,
                    "-c",
                    &email,
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "-m",
                    &message,
                ],
            )
            .await?;
        Ok(true)
    }

    fn note_path(&self, dir: &Path) -> PathBuf {
        let mut name = dir.file_name().unwrap_or_default().to_os_string();
        name.push(".json");
        dir.with_file_name(name)
    }

    async fn write_note(&self, checkout: &Checkout) -> Result<(), WorktreeError> {
        let trouble = |source| WorktreeError::Directory {
            dir: self.root.clone(),
            source,
        };
        tokio::fs::create_dir_all(&self.root)
            .await
            .map_err(trouble)?;
        let note = Note {
            repo: checkout.repo.clone(),
            branch: checkout.branch.clone(),
            base: checkout.base.clone(),
            keep: keep_name(checkout.keep).to_owned(),
            title: checkout.title.clone(),
            placed: checkout.placed.clone(),
        };
        let bytes = serde_json::to_vec(&note).map_err(|e| trouble(std::io::Error::other(e)))?;
        tokio::fs::write(self.note_path(&checkout.dir), bytes)
            .await
            .map_err(trouble)
    }

    async fn read_note(&self, path: &Path) -> Option<Checkout> {
        let bytes = tokio::fs::read(path).await.ok()?;
        let note: Note = serde_json::from_slice(&bytes).ok()?;
        let dir = path.with_file_name(path.file_stem()?);
        let git_dir = self.registered_git_dir(&note.repo, &dir).await;
        Some(Checkout {
            repo: note.repo,
            dir,
            branch: note.branch,
            base: note.base,
            keep: keep_rule(&note.keep)?,
            git_dir,
            title: note.title,
            ports: Vec::new(),
            placed: note.placed,
        })
    }
}

/// The configuration's name of a keep rule.
pub fn keep_name(keep: KeepRule) -> &'static str {
    match keep {
        KeepRule::Never => "never",
        KeepRule::OnFailure => "on_failure",
        KeepRule::Always => "always",
    }
}

/// The keep rule a configuration name means.
pub fn keep_rule(name: &str) -> Option<KeepRule> {
    match name {
        "never" => Some(KeepRule::Never),
        "on_failure" => Some(KeepRule::OnFailure),
        "always" => Some(KeepRule::Always),
        _ => None,
    }
}
