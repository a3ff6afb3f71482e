//! Running `git` as a child process: a cleared environment (the host's
//! `PATH` and `HOME`, `LC_ALL=C` so messages can be matched, no prompt, no
//! hooks, no fsmonitor), bounded output, and a short retry when another `git` holds one of
//! the repository's lock files.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::WorktreeError;
use crate::process::HostEnv;

/// How many times a command that lost a race for a git lock file is retried.
const LOCK_RETRIES: u32 = 20;
/// The first pause after such a race; it grows linearly.
const LOCK_BACKOFF: Duration = Duration::from_millis(25);

/// Identity of the commits swarmd makes on an attempt's branch.
pub(super) const AUTHOR_NAME: &str = "swarmd";
pub(super) const AUTHOR_EMAIL: &str = "swarmd@localhost";

/// How `git` is run: the few host variables it needs, nothing else.
#[derive(Debug, Clone)]
pub(super) struct Git {
    env: Vec<(&'static str, String)>,
}

impl Git {
    pub(super) fn new(host: &HostEnv) -> Git {
        let mut env = vec![
            ("LC_ALL", "C".to_owned()),
            ("GIT_TERMINAL_PROMPT", "0".to_owned()),
            (
                "PATH",
                host.get("PATH")
                    .unwrap_or("/usr/local/bin:/usr/bin:/bin")
                    .to_owned(),
            ),
        ];
        if let Some(home) = host.get("HOME") {
            env.push(("HOME", home.to_owned()));
        }
        Git { env }
    }

    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .arg("-C")
            .arg(dir)
            // No hook of the user's repository runs for swarmd's own commands.
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs `git -C dir args…` and returns its stdout, trimmed at the end.
    ///
    /// # Errors
    /// `Git` with git's own message when it exits non-zero.
    pub(super) async fn run(&self, dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
        let mut pause = LOCK_BACKOFF;
        let mut retries = 0;
        loop {
            let output = self
                .command(dir, args)
                .output()
                .await
                .map_err(|source| WorktreeError::Spawn { source })?;
            if output.status.success() {
                let text = String::from_utf8_lossy(&output.stdout);
                return Ok(text.trim_end().to_owned());
            }
            let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            if retries < LOCK_RETRIES && is_lock_race(&message) {
                tokio::time::sleep(pause).await;
                pause += LOCK_BACKOFF;
                retries += 1;
                continue;
            }
            return Err(failed(dir, args, &message));
        }
    }

    /// Runs `git -C dir args…` and keeps at most `cap` bytes of its stdout;
    /// the flag says whether more was cut.
    ///
    /// # Errors
    /// `Git` when it exits non-zero.
    pub(super) async fn run_capped(
        &self,
        dir: &Path,
        args: &[&str],
        cap: usize,
    ) -> Result<(Vec<u8>, bool), WorktreeError> {
        let mut child = self
            .command(dir, args)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| WorktreeError::Spawn { source })?;
        let stdout = child.stdout.take().ok_or_else(|| WorktreeError::Spawn {
            source: std::io::Error::other("no stdout"),
        })?;
        let mut kept = Vec::new();
        let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
        stdout
            .take(limit)
            .read_to_end(&mut kept)
            .await
            .map_err(|source| WorktreeError::Spawn { source })?;
        let truncated = kept.len() > cap;
        if truncated {
            kept.truncate(cap);
            // The rest is not wanted: stop git rather than drain it.
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Ok((kept, true));
        }
        let status = child
            .wait()
            .await
            .map_err(|source| WorktreeError::Spawn { source })?;
        if !status.success() {
            return Err(failed(dir, args, &format!("exited with {status}")));
        }
        Ok((kept, false))
    }
}

/// Whether git failed because another git process held a lock file of the
/// repository (`index.lock`, a ref's lock, `.git/worktrees/…`).
fn is_lock_race(message: &str) -> bool {
    message.contains(".lock': File exists")
        || message.contains("cannot lock ref")
        || message.contains("could not lock")
        || message.contains("Unable to create") && message.contains(".lock")
}

fn failed(dir: &Path, args: &[&str], message: &str) -> WorktreeError {
    WorktreeError::Git {
        dir: PathBuf::from(dir),
        command: args.first().copied().unwrap_or_default().to_owned(),
        message: message.lines().next().unwrap_or("no message").to_owned(),
    }
}

/// Checks, without a runtime, that `repo` is a git repository and `base`
/// names a commit in it: what `check-config` refuses up front.
///
/// # Errors
/// The problem in words, for the agent's configuration error.
pub(super) fn check_blocking(host: &HostEnv, repo: &Path, base: &str) -> Result<(), String> {
    let git = Git::new(host);
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new("git");
        command
            .env_clear()
            .envs(git.env.iter().map(|(k, v)| (*k, v.as_str())))
            .arg("-C")
            .arg(repo)
            .args(args)
            .stdin(Stdio::null());
        command.output()
    };
    if !repo.is_absolute() {
        return Err(format!(
            "worktree.repo `{}` must be an absolute path",
            repo.display()
        ));
    }
    let shown = repo.display();
    match run(&["rev-parse", "--is-inside-work-tree"]) {
        Err(e) => return Err(format!("cannot run git: {e}")),
        Ok(out) if !out.status.success() => {
            return Err(format!("worktree.repo `{shown}` is not a git repository"));
        }
        Ok(_) => {}
    }
    let spec = format!("{base}^{{commit}}");
    match run(&["rev-parse", "--verify", "--quiet", &spec]) {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err(format!(
            "worktree.base `{base}` names no commit in `{shown}`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::is_lock_race;

    #[test]
    fn lock_races_are_told_from_other_failures() {
        for raced in [
            "fatal: Unable to create '/r/.git/index.lock': File exists.",
            "error: cannot lock ref 'refs/heads/swarmd/T-1': Unable to create '/r/.git/refs/heads/swarmd/T-1.lock': File exists.",
            "error: could not lock config file .git/config: File exists",
        ] {
            assert!(is_lock_race(raced), "{raced}");
        }
        for other in [
            "fatal: a branch named 'swarmd/T-1' already exists",
            "fatal: not a git repository (or any of the parent directories): .git",
            "fatal: invalid reference: nope",
        ] {
            assert!(!is_lock_race(other), "{other}");
        }
    }
}
