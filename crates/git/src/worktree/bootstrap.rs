//! What makes a fresh worktree ready to work in (docs/tasks.md, Worktrees,
//! Bootstrap): ignored files and folders copied from the repository's
//! working tree (`copy`), directories shared by symlink (`link`), a setup
//! command (`setup.rs`) and ports (`ports.rs`).
//!
//! Every listed path is relative to the repository and stays inside it: an
//! absolute path, a `..` component or `.git` is refused when the
//! configuration is loaded, and a source or destination whose real path
//! leaves the repository or the worktree (through a symlink) is skipped with
//! a warning when the worktree is made. Nothing missing in the repository is
//! an error: it is skipped and listed at debug level.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::ports::PortsSpec;

/// Default limit of a setup command's run.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(300);

/// `copy`, `link`, `setup` and `ports` of an agent's `worktree`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bootstrap {
    /// Paths or globs (`*` and `?` within one component), relative to the
    /// repository, copied into each new worktree.
    pub copy: Vec<String>,
    /// Paths relative to the repository that each new worktree gets as a
    /// symlink to the repository's own.
    pub link: Vec<String>,
    pub setup: Option<SetupSpec>,
    pub ports: Option<PortsSpec>,
}

/// `setup = { command, timeout_secs }`: run in the new worktree before the
/// agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupSpec {
    /// Program and arguments; the program is looked up in the agent's `PATH`.
    pub command: Vec<String>,
    pub timeout: Duration,
}

/// What [`place_files`] put in a worktree, as paths relative to it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Placed {
    pub copied: Vec<PathBuf>,
    pub linked: Vec<PathBuf>,
    /// Entries that matched nothing in the repository.
    pub missing: Vec<String>,
}

/// Checks one `copy` or `link` entry: not empty, relative, without `..`,
/// not inside `.git`, and (for `link`, `glob = false`) without wildcards.
///
/// # Errors
/// Why the entry is refused, in words.
pub fn check_entry(entry: &str, glob: bool) -> Result<(), String> {
    if entry.trim().is_empty() {
        return Err("an empty path".to_owned());
    }
    let path = Path::new(entry);
    if path.is_absolute() {
        return Err(format!(
            "`{entry}` is absolute: paths are relative to the repository"
        ));
    }
    for component in path.components() {
        match component {
            Component::ParentDir => {
                return Err(format!("`{entry}` leaves the repository (`..`)"));
            }
            Component::Normal(part) if part == ".git" => {
                return Err(format!("`{entry}` names git's own files (`.git`)"));
            }
            Component::Normal(part) if part.to_string_lossy().contains("**") => {
                return Err(format!(
                    "`{entry}`: `**` is not supported; `*` and `?` match within one component"
                ));
            }
            Component::Normal(part) if !glob && has_wildcard(&part.to_string_lossy()) => {
                return Err(format!("`{entry}`: a linked path takes no wildcard"));
            }
            Component::Normal(_) | Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("`{entry}` is absolute"));
            }
        }
    }
    Ok(())
}

impl Bootstrap {
    /// Checks every `copy` and `link` entry and the setup command.
    ///
    /// # Errors
    /// The first problem, naming its key (`copy`, `link`, `setup.command`).
    pub fn check(&self) -> Result<(), String> {
        for entry in &self.copy {
            check_entry(entry, true).map_err(|reason| format!("copy: {reason}"))?;
        }
        for entry in &self.link {
            check_entry(entry, false).map_err(|reason| format!("link: {reason}"))?;
        }
        if let Some(setup) = &self.setup {
            if setup.command.first().is_none_or(|p| p.is_empty()) {
                return Err("setup.command: names no program".to_owned());
            }
            if setup.timeout.is_zero() {
                return Err("setup.timeout_secs: must be at least 1".to_owned());
            }
        }
        Ok(())
    }

    /// Whether there is anything to do in a new worktree besides `setup`.
    pub fn places_files(&self) -> bool {
        !self.copy.is_empty() || !self.link.is_empty()
    }
}

/// Copies `bootstrap.copy` and links `bootstrap.link` from `repo`'s working
/// tree into the worktree `dir`. A destination that exists already (a
/// tracked file) is left as it is; symlinks inside copied folders are copied
/// as symlinks, never followed.
///
/// # Errors
/// A file could not be read, written or linked.
pub fn place_files(repo: &Path, dir: &Path, bootstrap: &Bootstrap) -> std::io::Result<Placed> {
    let repo_real = std::fs::canonicalize(repo)?;
    let dir_real = std::fs::canonicalize(dir)?;
    let mut placed = Placed::default();
    for entry in &bootstrap.copy {
        if check_entry(entry, true).is_err() {
            continue;
        }
        let matches = expand(&repo_real, entry)?;
        if matches.is_empty() {
            placed.missing.push(entry.clone());
        }
        for relative in matches {
            let source = repo_real.join(&relative);
            if !inside(&source, &repo_real) {
                tracing::warn!(path = %relative.display(), "copy: leaves the repository; skipped");
                continue;
            }
            let Some(target) = destination(&dir_real, &relative)? else {
                continue;
            };
            copy_tree(&source, &target)?;
            placed.copied.push(relative);
        }
    }
    for entry in &bootstrap.link {
        if check_entry(entry, false).is_err() {
            continue;
        }
        let relative = normal(Path::new(entry));
        let source = repo_real.join(&relative);
        if std::fs::symlink_metadata(&source).is_err() {
            placed.missing.push(entry.clone());
            continue;
        }
        let Ok(real_source) = std::fs::canonicalize(&source) else {
            placed.missing.push(entry.clone());
            continue;
        };
        if !real_source.starts_with(&repo_real) || real_source == repo_real {
            tracing::warn!(path = %entry, "link: leaves the repository; skipped");
            continue;
        }
        let Some(target) = destination(&dir_real, &relative)? else {
            continue;
        };
        std::os::unix::fs::symlink(&real_source, &target)?;
        placed.linked.push(relative);
    }
    if !placed.missing.is_empty() {
        tracing::debug!(missing = ?placed.missing, "worktree bootstrap: not in the repository, skipped");
    }
    Ok(placed)
}

/// Where `relative` goes in the worktree: `None` (logged) when something is
/// there already or its parent's real path leaves the worktree.
fn destination(dir_real: &Path, relative: &Path) -> std::io::Result<Option<PathBuf>> {
    let target = dir_real.join(relative);
    if std::fs::symlink_metadata(&target).is_ok() {
        tracing::debug!(path = %relative.display(), "worktree bootstrap: already in the worktree; left as it is");
        return Ok(None);
    }
    let Some(parent) = target.parent() else {
        return Ok(None);
    };
    // The parent is checked before it is made: a tracked symlink on the way
    // must not lead the write out of the worktree.
    let mut existing = parent;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(up) => existing = up,
            None => return Ok(None),
        }
    }
    if !inside(existing, dir_real) {
        tracing::warn!(path = %relative.display(), "worktree bootstrap: the destination leaves the worktree; skipped");
        return Ok(None);
    }
    std::fs::create_dir_all(parent)?;
    Ok(Some(target))
}

/// Whether `path`'s real path is `root` or below it.
fn inside(path: &Path, root: &Path) -> bool {
    std::fs::canonicalize(path).is_ok_and(|real| real.starts_with(root))
}

/// Copies a file, a symlink (as a symlink) or a folder (recursively).
fn copy_tree(source: &Path, target: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(source)?;
    if meta.file_type().is_symlink() {
        let pointed = std::fs::read_link(source)?;
        return std::os::unix::fs::symlink(pointed, target);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(target)?;
        for child in std::fs::read_dir(source)? {
            let child = child?;
            let into = target.join(child.file_name());
            if std::fs::symlink_metadata(&into).is_ok() {
                continue;
            }
            copy_tree(&child.path(), &into)?;
        }
        return Ok(());
    }
    std::fs::copy(source, target).map(drop)
}

/// The paths under `root` that `pattern` names, relative to `root`, sorted.
fn expand(root: &Path, pattern: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut found = vec![PathBuf::new()];
    for part in normal(Path::new(pattern)).components() {
        let part = part.as_os_str().to_string_lossy().into_owned();
        let mut next = Vec::new();
        for base in &found {
            if has_wildcard(&part) {
                let Ok(entries) = std::fs::read_dir(root.join(base)) else {
                    continue;
                };
                for entry in entries {
                    let name = entry?.file_name();
                    let name_text = name.to_string_lossy();
                    if name_text != ".git" && wildcard_match(&part, &name_text) {
                        next.push(base.join(&name));
                    }
                }
            } else if std::fs::symlink_metadata(root.join(base).join(&part)).is_ok() {
                next.push(base.join(&part));
            }
        }
        found = next;
    }
    found.retain(|p| !p.as_os_str().is_empty());
    found.sort();
    Ok(found)
}

/// `path` without `.` components.
fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

fn has_wildcard(part: &str) -> bool {
    part.contains(['*', '?'])
}

/// Shell-style matching of one component: `*` any run, `?` one character.
/// A leading `.` is matched only by a literal `.`, as in a shell.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
#[path = "bootstrap_tests.rs"]
mod tests;
