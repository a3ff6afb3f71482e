//! Real git repositories for the worktree tests: a command run in a
//! directory, and a repository with its first commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git -C dir args…` for a test's own setup, as a fixed author; its
/// trimmed stdout. Panics with git's stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `dir/repo`: a repository on branch `main` with one commit holding
/// `notes.txt` ("first").
pub fn repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("notes.txt"), "first\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "start"]);
    repo
}

/// Writes 10 000 small files under `root` (100 directories `dirNNN` of 100
/// files `fNNN.txt`), the measurements' repository before its commit.
pub fn ten_thousand_files(root: &Path) {
    for d in 0..100 {
        let dir = root.join(format!("dir{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}.txt")), format!("{d} {f}\n")).unwrap();
        }
    }
}
