//! Running `git` as a child process: a cleared environment (the host's
//! `PATH` and `HOME`, `LC_ALL=C` so messages can be matched, no prompt, no
//! hooks, no fsmonitor), bounded output and run time, and a short retry
//! when another `git` holds one of the repository's lock files.
//!
//! In an attempt's checkout git runs [`At::Checkout`]: with `GIT_DIR`,
//! `GIT_COMMON_DIR` and `GIT_WORK_TREE` from swarmd's own records, so the
//! checkout's `.git` (which its worker can rewrite) is never read, and with
//! `--attr-source` at the checkout's base when this git has it (2.40 and
//! later), so no `.gitattributes` the worker wrote selects a filter or
//! driver (docs/security.md, Worktrees).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::WorktreeError;
use crate::HostEnv;

/// How many times a command that lost a race for a git lock file is retried.
const LOCK_RETRIES: u32 = 20;
/// The first pause after such a race; it grows linearly.
const LOCK_BACKOFF: Duration = Duration::from_millis(25);
/// The longest one git command may run. Every command swarmd runs is
/// bounded: a merge computed for `apply` or a merge node runs detached
/// from its caller, and recovery runs before the daemon serves, so a git
/// that never ends would hold them for ever. Dropped at the bound, the
/// command's process is killed (`kill_on_drop`).
const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The most stdout one command's answer keeps (`run`, `run_answer`): far
/// past any list or id swarmd asks git for. A command that writes more is
/// stopped and fails, so a repository built to make git print without end
/// (a `merge-tree` over millions of conflicting paths) cannot fill the
/// daemon's memory.
const MAX_STDOUT: usize = 64 << 20;
/// The most of a command's stderr kept; the rest is read and dropped, so
/// git never blocks on a full pipe.
const MAX_STDERR: usize = 64 << 10;

/// Identity of the commits swarmd makes on an attempt's branch.
pub(crate) const AUTHOR_NAME: &str = "swarmd";
pub(crate) const AUTHOR_EMAIL: &str = "swarmd@localhost";

/// How `git` is run: the few host variables it needs, nothing else.
#[derive(Debug, Clone)]
pub(crate) struct Git {
    env: Vec<(&'static str, String)>,
    /// Whether this git has `--attr-source`, asked once.
    attr_source: Arc<tokio::sync::OnceCell<bool>>,
    /// The longest one command may run (`GIT_TIMEOUT`).
    timeout: Duration,
    /// The most stdout an answer keeps (`MAX_STDOUT`).
    max_stdout: usize,
}

/// Where a command runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum At<'a> {
    /// The configured repository, found as git finds it from there.
    Repo(&'a Path),
    /// An attempt's checkout, by swarmd's records.
    Checkout(&'a Bound<'a>),
}

impl At<'_> {
    fn dir(&self) -> &Path {
        match self {
            At::Repo(dir) => dir,
            At::Checkout(bound) => bound.work_tree,
        }
    }
}

impl<'a> From<&'a Path> for At<'a> {
    fn from(dir: &'a Path) -> At<'a> {
        At::Repo(dir)
    }
}

impl<'a> From<&'a PathBuf> for At<'a> {
    fn from(dir: &'a PathBuf) -> At<'a> {
        At::Repo(dir)
    }
}

impl<'a> From<&'a Bound<'a>> for At<'a> {
    fn from(bound: &'a Bound<'a>) -> At<'a> {
        At::Checkout(bound)
    }
}

/// An attempt's checkout as swarmd recorded it: its git directory under the
/// repository's `worktrees/`, the repository's common directory, the
/// directory itself, and the commit whose `.gitattributes` apply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound<'a> {
    pub(super) git_dir: &'a Path,
    pub(super) common_dir: &'a Path,
    pub(super) work_tree: &'a Path,
    pub(super) attributes: &'a str,
}

impl Git {
    pub(crate) fn new(host: &HostEnv) -> Git {
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
        Git {
            env,
            attr_source: Arc::default(),
            timeout: GIT_TIMEOUT,
            max_stdout: MAX_STDOUT,
        }
    }

    /// This git with every command bounded by `timeout` (tests).
    #[cfg(test)]
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Git {
        self.timeout = timeout;
        self
    }

    /// This git keeping at most `max` bytes of an answer's stdout (tests).
    #[cfg(test)]
    pub(crate) fn with_max_stdout(mut self, max: usize) -> Git {
        self.max_stdout = max;
        self
    }

    /// Runs `git args…` at `at` to its end, within the timeout and with its
    /// stdout bounded: past `max_stdout` bytes the command is stopped and
    /// fails.
    async fn output(
        &self,
        at: At<'_>,
        args: &[&str],
    ) -> Result<std::process::Output, WorktreeError> {
        let spawn_error = |source| WorktreeError::Spawn { source };
        let mut child = self.command(at, args).await.spawn().map_err(spawn_error)?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(spawn_error(std::io::Error::other("no pipes")));
        };
        let cap = self.max_stdout;
        let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
        let run = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (read, _) = tokio::join!(
                async {
                    let read = stdout.take(limit).read_to_end(&mut out).await;
                    if out.len() > cap {
                        // The rest is not wanted: stop git rather than drain it.
                        let _ = child.start_kill();
                    }
                    read
                },
                keep_head(stderr, MAX_STDERR, &mut err),
            );
            read?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((status, out, err))
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(Ok((_, stdout, _))) if stdout.len() > cap => Err(failed(
                at.dir(),
                args,
                &format!("wrote more than {cap} bytes of output; stopped"),
            )),
            Ok(Ok((status, stdout, stderr))) => Ok(std::process::Output {
                status,
                stdout,
                stderr,
            }),
            Ok(Err(source)) => Err(spawn_error(source)),
            // The command's process is killed as `child` is dropped.
            Err(_) => Err(self.timed_out(at, args)),
        }
    }

    fn timed_out(&self, at: At<'_>, args: &[&str]) -> WorktreeError {
        let secs = self.timeout.as_secs_f64();
        failed(
            at.dir(),
            args,
            &format!("did not finish within {secs} s; stopped"),
        )
    }

    /// This git with the author and committer date of every commit it
    /// makes fixed to `date` (git's `@<unix seconds> +0000` form), so the
    /// same commit made twice has the same id.
    pub(crate) fn with_date(&self, date: &str) -> Git {
        let mut git = self.clone();
        git.env.retain(|(name, _)| !name.ends_with("_DATE"));
        git.env.push(("GIT_AUTHOR_DATE", date.to_owned()));
        git.env.push(("GIT_COMMITTER_DATE", date.to_owned()));
        git
    }

    /// Whether this git reads attributes from a tree (`--attr-source`, git
    /// 2.40): an older one refuses the option as unknown.
    pub(super) async fn has_attr_source(&self) -> bool {
        *self
            .attr_source
            .get_or_init(|| async {
                let mut probe = Command::new("git");
                probe
                    .env_clear()
                    .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
                    .args(["--attr-source=HEAD", "version"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true);
                let has = probe.status().await.is_ok_and(|s| s.success());
                if !has {
                    tracing::info!(
                        "git has no --attr-source (2.40 or later): a checkout's own .gitattributes apply to swarmd's commits"
                    );
                }
                has
            })
            .await
    }

    async fn command(&self, at: At<'_>, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        match at {
            At::Repo(dir) => {
                command.arg("-C").arg(dir);
            }
            At::Checkout(bound) => {
                command
                    .current_dir(bound.work_tree)
                    .env("GIT_DIR", bound.git_dir)
                    .env("GIT_COMMON_DIR", bound.common_dir)
                    .env("GIT_WORK_TREE", bound.work_tree);
                if self.has_attr_source().await {
                    command.arg(format!("--attr-source={}", bound.attributes));
                }
            }
        }
        command
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

    /// Runs `git args…` at `at` and returns its stdout, trimmed at the end.
    ///
    /// # Errors
    /// `Git` with git's own message when it exits non-zero.
    pub(crate) async fn run<'a>(
        &self,
        at: impl Into<At<'a>>,
        args: &[&str],
    ) -> Result<String, WorktreeError> {
        let at = at.into();
        let mut pause = LOCK_BACKOFF;
        let mut retries = 0;
        loop {
            let output = self.output(at, args).await?;
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
            return Err(failed(at.dir(), args, &message));
        }
    }

    /// Runs `git args…` at `at` and returns whether it exited 0 with its
    /// stdout (trimmed at the end), for commands whose non-zero exit is an
    /// answer (`merge-tree` with conflicts, `merge-base --is-ancestor`).
    ///
    /// # Errors
    /// `Spawn` when git cannot run; `Git` when it exits with another status
    /// than 0 or 1 (a fault, not an answer).
    pub(crate) async fn run_answer<'a>(
        &self,
        at: impl Into<At<'a>>,
        args: &[&str],
    ) -> Result<(bool, String), WorktreeError> {
        let at = at.into();
        let output = self.output(at, args).await?;
        let text = String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned();
        match output.status.code() {
            Some(0) => Ok((true, text)),
            Some(1) => Ok((false, text)),
            _ => {
                let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
                Err(failed(at.dir(), args, &message))
            }
        }
    }

    /// Runs `git args…` at `at` and keeps at most `cap` bytes of its stdout;
    /// the flag says whether more was cut.
    ///
    /// # Errors
    /// `Git` when it exits non-zero.
    pub(super) async fn run_capped<'a>(
        &self,
        at: impl Into<At<'a>>,
        args: &[&str],
        cap: usize,
    ) -> Result<(Vec<u8>, bool), WorktreeError> {
        let at = at.into();
        let mut child = self
            .command(at, args)
            .await
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| WorktreeError::Spawn { source })?;
        let stdout = child.stdout.take().ok_or_else(|| WorktreeError::Spawn {
            source: std::io::Error::other("no stdout"),
        })?;
        let mut kept = Vec::new();
        let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
        match tokio::time::timeout(self.timeout, stdout.take(limit).read_to_end(&mut kept)).await {
            Ok(read) => read.map_err(|source| WorktreeError::Spawn { source })?,
            // `child` is killed as it is dropped.
            Err(_) => return Err(self.timed_out(at, args)),
        };
        let truncated = kept.len() > cap;
        if truncated {
            kept.truncate(cap);
            // The rest is not wanted: stop git rather than drain it.
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Ok((kept, true));
        }
        let status = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(status) => status.map_err(|source| WorktreeError::Spawn { source })?,
            Err(_) => return Err(self.timed_out(at, args)),
        };
        if !status.success() {
            return Err(failed(at.dir(), args, &format!("exited with {status}")));
        }
        Ok((kept, false))
    }

    /// The paths changed between commits `base` and `head` in `repo` and
    /// `git diff base head`, each cut at `cap` bytes.
    ///
    /// # Errors
    /// `Git` when a command fails.
    pub(super) async fn changes(
        &self,
        repo: &Path,
        base: &str,
        head: &str,
        cap: usize,
    ) -> Result<RangeChanges, WorktreeError> {
        // `--` ends the revisions: a missing commit is an error, never a
        // path of the same name.
        let range = [base, head, "--"];
        // The names a range's changes make are bounded like the diff.
        let (names, files_truncated) = self
            .run_capped(
                repo,
                &[&["diff", "--no-ext-diff", "--name-only", "-z"][..], &range].concat(),
                cap,
            )
            .await?;
        let mut files: Vec<String> = names
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        if files_truncated && !names.ends_with(&[0]) {
            // The last name was cut in the middle.
            files.pop();
        }
        let (diff, diff_truncated) = self
            .run_capped(
                repo,
                &[&["diff", "--no-color", "--no-ext-diff"][..], &range].concat(),
                cap,
            )
            .await?;
        Ok(RangeChanges {
            files,
            files_truncated,
            diff: String::from_utf8_lossy(&diff).into_owned(),
            diff_truncated,
        })
    }
}

/// What changed between two commits, each part cut at a cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeChanges {
    /// The paths changed, as many as fit the cap.
    pub files: Vec<String>,
    /// Whether more paths changed than `files` lists.
    pub files_truncated: bool,
    /// `git diff base head`, cut at the cap.
    pub diff: String,
    pub diff_truncated: bool,
}

/// Reads `from` to its end, keeping its first `cap` bytes in `kept`.
async fn keep_head(
    mut from: impl tokio::io::AsyncRead + Unpin,
    cap: usize,
    kept: &mut Vec<u8>,
) -> std::io::Result<()> {
    // On the heap: an array here would sit in every future that awaits a
    // git command, and spawners move those futures whole.
    let mut buf = vec![0u8; 8192];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let room = cap.saturating_sub(kept.len()).min(n);
        kept.extend_from_slice(&buf[..room]);
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
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    use super::{At, Git, is_lock_race};
    use crate::HostEnv;

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

    #[tokio::test]
    async fn a_git_that_never_ends_is_stopped_at_the_bound() {
        // A `git` that hangs, first on the PATH this git is given.
        let dir = tempfile::tempdir().unwrap();
        let git = fake_git(dir.path(), "exec sleep 30").with_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let error = git
            .run(At::Repo(dir.path()), &["status"])
            .await
            .unwrap_err();
        assert!(error.to_string().contains("did not finish"), "{error}");
        let error = git
            .run_answer(At::Repo(dir.path()), &["merge-tree"])
            .await
            .unwrap_err();
        assert!(error.to_string().contains("did not finish"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    /// A `git` on the PATH that runs `script`.
    fn fake_git(dir: &std::path::Path, script: &str) -> Git {
        let fake = dir.join("git");
        std::fs::write(&fake, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.display());
        Git::new(&HostEnv::from_pairs([("PATH", path.as_str())]))
    }

    #[tokio::test]
    async fn a_git_that_prints_without_end_is_stopped_at_the_output_bound() {
        let dir = tempfile::tempdir().unwrap();
        // `yes` never ends by itself: only the bound stops it.
        let git = fake_git(dir.path(), "exec yes conflict").with_max_stdout(1 << 20);
        let started = Instant::now();
        let error = git
            .run(At::Repo(dir.path()), &["merge-tree"])
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("more than 1048576 bytes"),
            "{error}"
        );
        let error = git
            .run_answer(At::Repo(dir.path()), &["merge-tree"])
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("more than 1048576 bytes"),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[tokio::test]
    async fn output_under_the_bound_and_a_flood_of_stderr_are_answered_whole() {
        let dir = tempfile::tempdir().unwrap();
        // 1 MiB of stderr first (past the pipe and the kept head), then
        // an answer exactly at the bound, then exit 1.
        let git = fake_git(
            dir.path(),
            "head -c 1048576 /dev/zero >&2; head -c 4096 /dev/zero | tr '\\0' x; exit 1",
        )
        .with_max_stdout(4096);
        let (clean, text) = git
            .run_answer(At::Repo(dir.path()), &["merge-tree"])
            .await
            .unwrap();
        assert!(!clean);
        assert_eq!(text.len(), 4096);
        assert!(text.bytes().all(|b| b == b'x'));
    }
}
