//! Starting a child: program resolution at link time, the cleared environment,
//! its own process group (led by its supervisor when there is one), and the
//! guard that kills the group if a run is abandoned.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::env::{base_env, run_env};
use super::launch::{self, Supervisor};
use super::leftover::GroupIdentity;
use super::resume::{args_of, resume_env};
use super::{HostEnv, ProcessError, ProcessSpec, RunVars, StdinMode};
use swarmd_git::worktree::Checkout;

/// A process agent ready to run: its program resolved to a path and the fixed
/// part of its environment computed. Cheap to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    spec: ProcessSpec,
    program: PathBuf,
    env: Vec<(String, String)>,
    supervisor: Option<Supervisor>,
}

impl ProcessRunner {
    /// Checks `spec` against the host: the program must exist and be
    /// executable, the working directory must be a directory, and the
    /// allow-list must name no forbidden variable.
    pub fn new(spec: ProcessSpec, host: &HostEnv) -> Result<ProcessRunner, ProcessError> {
        if let Some(cwd) = &spec.cwd {
            match std::fs::metadata(cwd) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(ProcessError::BadCwd {
                        path: cwd.display().to_string(),
                        source: std::io::Error::other("not a directory"),
                    });
                }
                Err(source) => {
                    return Err(ProcessError::BadCwd {
                        path: cwd.display().to_string(),
                        source,
                    });
                }
            }
        }
        let program = resolve_program(&spec.program, spec.cwd.as_deref(), host)?;
        // Absolute, so that it names the same file whoever executes it, from
        // whichever directory.
        let program = std::path::absolute(&program).map_err(|source| ProcessError::Start {
            program: program.display().to_string(),
            source,
        })?;
        let env = base_env(&spec.env, host)?;
        Ok(ProcessRunner {
            spec,
            program,
            env,
            supervisor: None,
        })
    }

    /// Starts every child under `supervisor` (or directly, with `None`).
    pub fn supervised_by(mut self, supervisor: Option<Supervisor>) -> ProcessRunner {
        self.supervisor = supervisor;
        self
    }

    pub fn spec(&self) -> &ProcessSpec {
        &self.spec
    }

    /// The program as it is executed.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The environment a command run for this agent gets in `checkout` (a
    /// worktree's setup command): the agent's allow-list and the
    /// worktree's `SWARM_*` variables, without the attempt's own (no
    /// worker credential, no prompt).
    pub fn checkout_env(&self, checkout: &Checkout) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.extend(checkout.env().map(|(k, v)| (k.to_owned(), v)));
        env.extend(checkout.port_env());
        env
    }

    /// Starts one child. `cancel` stops it (SIGTERM to its group, SIGKILL
    /// after the grace) while [`RunningChild::wait`] runs.
    pub fn start(
        &self,
        vars: &RunVars,
        cancel: CancellationToken,
    ) -> Result<RunningChild, ProcessError> {
        self.start_in(vars, None, cancel)
    }

    /// Starts one child as [`ProcessRunner::start`] does, in `checkout`'s
    /// worktree (its `cwd`, and the `SWARM_WORKTREE`, `SWARM_BRANCH`,
    /// `SWARM_BASE` variables) when there is one.
    pub fn start_in(
        &self,
        vars: &RunVars,
        checkout: Option<&Checkout>,
        cancel: CancellationToken,
    ) -> Result<RunningChild, ProcessError> {
        let mut command = match &self.supervisor {
            Some(supervisor) => {
                let mut command = Command::new(&supervisor.program);
                command.args(&supervisor.args).arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        command
            .args(args_of(&self.spec, vars))
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(run_env(vars))
            .envs(resume_env(vars))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(match self.spec.stdin {
                StdinMode::Prompt => Stdio::piped(),
                StdinMode::None => Stdio::null(),
            })
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &self.spec.cwd {
            command.current_dir(cwd);
        }
        if let Some(checkout) = checkout {
            command
                .current_dir(&checkout.dir)
                .envs(checkout.env())
                .envs(checkout.port_env());
        }
        let start_error = |source| ProcessError::Start {
            program: self.program.display().to_string(),
            source,
        };
        let child = launch::spawn(command).map_err(start_error)?;
        // The child (or its supervisor) leads its own group, so its pid is
        // the group id.
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| start_error(std::io::Error::other("the child has no pid")))?;
        // Not reaped yet, so the pid is still the leader's.
        let identity = GroupIdentity::of_leader(pgid.as_raw());
        let prompt = match self.spec.stdin {
            StdinMode::Prompt => Some(vars.prompt.clone()),
            StdinMode::None => None,
        };
        Ok(RunningChild {
            child,
            guard: GroupGuard { pgid, armed: true },
            identity,
            prompt,
            cancel,
            started: Instant::now(),
            spec: self.spec.clone(),
        })
    }
}

/// A started child, owned by whoever will wait for it. Dropping it without
/// waiting kills its whole group.
#[derive(Debug)]
pub struct RunningChild {
    pub(super) child: Child,
    pub(super) guard: GroupGuard,
    pub(super) identity: Option<GroupIdentity>,
    pub(super) prompt: Option<String>,
    pub(super) cancel: CancellationToken,
    pub(super) started: Instant,
    pub(super) spec: ProcessSpec,
}

impl RunningChild {
    /// The process group id (the child's pid).
    pub fn pgid(&self) -> i32 {
        self.guard.pgid.as_raw()
    }

    /// What identifies the group after a crash; `None` when `/proc` could
    /// not tell at start.
    pub fn identity(&self) -> Option<&GroupIdentity> {
        self.identity.as_ref()
    }
}

/// Kills a process group with SIGKILL when dropped while armed: a run whose
/// future is dropped leaves no member of its group behind.
#[derive(Debug)]
pub(super) struct GroupGuard {
    pub pgid: Pid,
    pub armed: bool,
}

impl GroupGuard {
    /// Sends `signal` to every process of the group. A group that no longer
    /// exists is not an error.
    pub(super) fn signal(&self, signal: Signal) {
        match killpg(self.pgid, signal) {
            Err(errno) if errno != nix::errno::Errno::ESRCH => {
                tracing::warn!(pgid = self.pgid.as_raw(), %errno, "killpg failed");
            }
            _ => {}
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// Resolves `program` once at link time: a path with `/` is taken as given
/// (relative to `cwd` when set), a bare name is searched in the host `PATH`.
fn resolve_program(
    program: &Path,
    cwd: Option<&Path>,
    host: &HostEnv,
) -> Result<PathBuf, ProcessError> {
    let shown = program.display().to_string();
    let not_found = |reason: &str| ProcessError::ProgramNotFound {
        program: shown.clone(),
        reason: reason.to_owned(),
    };
    if shown.is_empty() {
        return Err(not_found("is empty"));
    }
    if shown.contains('/') {
        let path = match cwd {
            Some(dir) if program.is_relative() => dir.join(program),
            _ => program.to_path_buf(),
        };
        return match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => Ok(path),
            Ok(_) => Err(not_found("is not an executable file")),
            Err(e) => Err(not_found(&format!("cannot be used: {e}"))),
        };
    }
    let search = host.get("PATH").unwrap_or("/usr/local/bin:/usr/bin:/bin");
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| not_found("was not found in PATH"))
}
