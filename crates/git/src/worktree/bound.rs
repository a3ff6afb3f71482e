//! Where swarmd's git runs in an attempt's checkout: the git directory the
//! repository's own records (`<common dir>/worktrees/*/gitdir`) name for
//! it, and the check that the checkout's `.git` still names that one. A
//! worker can rewrite its checkout's `.git`; it cannot write the
//! repository's records, so swarmd's git never reads the former.

use std::path::{Path, PathBuf};

use super::git::{At, Bound};
use super::{Checkout, WorktreeError, Worktrees};

/// Longest `.git` pointer file read: git writes one line naming a path.
const MAX_POINTER: u64 = 4096;

impl Worktrees {
    /// The repository's common git directory, canonical.
    pub(super) async fn common_dir(&self, repo: &Path) -> Result<PathBuf, WorktreeError> {
        let common = self
            .git
            .run(
                At::Repo(repo),
                &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            )
            .await?;
        tokio::fs::canonicalize(&common)
            .await
            .map_err(|source| WorktreeError::Directory {
                dir: PathBuf::from(common),
                source,
            })
    }

    /// The git directory the repository's records name for `dir`, if any.
    pub(super) async fn registered_git_dir(&self, repo: &Path, dir: &Path) -> Option<PathBuf> {
        let common = self.common_dir(repo).await.ok()?;
        find_git_dir(&common, dir).await
    }

    /// Where swarmd's git may run in `checkout`, once its `.git` is checked
    /// to still name the git directory the repository's records name.
    ///
    /// # Errors
    /// `Unregistered` when the records name none, `Tampered` when the
    /// checkout's `.git` names another (or is no longer a file).
    pub(super) fn bound<'a>(&self, checkout: &'a Checkout) -> Result<Bound<'a>, WorktreeError> {
        let git_dir = checkout
            .git_dir
            .as_deref()
            .ok_or_else(|| WorktreeError::Unregistered {
                dir: checkout.dir.clone(),
                repo: checkout.repo.clone(),
            })?;
        let common_dir =
            git_dir
                .parent()
                .and_then(Path::parent)
                .ok_or_else(|| WorktreeError::Unregistered {
                    dir: checkout.dir.clone(),
                    repo: checkout.repo.clone(),
                })?;
        if !names(&checkout.dir, git_dir) {
            return Err(WorktreeError::Tampered {
                dir: checkout.dir.clone(),
            });
        }
        Ok(Bound {
            git_dir,
            common_dir,
            work_tree: &checkout.dir,
            attributes: &checkout.base,
        })
    }
}

/// The directory under `common/worktrees/` whose `gitdir` file names
/// `dir/.git`: the one named after `dir` first, then any other (git adds a
/// number to a name already taken).
async fn find_git_dir(common: &Path, dir: &Path) -> Option<PathBuf> {
    let wanted = tokio::fs::canonicalize(dir).await.ok()?;
    let listed = common.join("worktrees");
    let named = dir.file_name().map(|name| listed.join(name));
    if let Some(found) = named.filter(|n| registers(n, &wanted)) {
        return Some(found);
    }
    let mut entries = tokio::fs::read_dir(&listed).await.ok()?;
    while let Ok(Some(entry)) = entries.next_entry().await {
        let candidate = entry.path();
        if registers(&candidate, &wanted) {
            return Some(candidate);
        }
    }
    None
}

/// Whether the git directory `candidate`'s `gitdir` file names
/// `worktree/.git`.
fn registers(candidate: &Path, worktree: &Path) -> bool {
    let Some(text) = read_small(&candidate.join("gitdir")) else {
        return false;
    };
    let named = candidate.join(text.trim_end());
    named.file_name().is_some_and(|n| n == ".git")
        && named
            .parent()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .is_some_and(|d| d == worktree)
}

/// Whether `dir/.git` is still what git wrote there: a regular file
/// (no link, no directory) of one `gitdir: <path>` line naming `git_dir`.
pub(super) fn names(dir: &Path, git_dir: &Path) -> bool {
    let pointer = dir.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&pointer) else {
        return false;
    };
    if !meta.file_type().is_file() {
        return false;
    }
    let Some(text) = read_small(&pointer) else {
        return false;
    };
    let Some(named) = text.trim_end().strip_prefix("gitdir: ") else {
        return false;
    };
    std::fs::canonicalize(dir.join(named)).is_ok_and(|named| named == git_dir)
}

/// A file's text when it is short and UTF-8.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_POINTER).read_to_string(&mut text).ok()?;
    Some(text)
}
