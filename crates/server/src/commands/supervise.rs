//! `swarmd supervise --parent PID -- CMD…` (hidden): the leader of every
//! process agent's group. The daemon starts it in a new process group; it
//! asks the kernel for SIGHUP when the daemon's launcher thread dies
//! (`PR_SET_PDEATHSIG`), checks that the daemon is still its parent (it may
//! have died before the request), starts CMD in the same group with the same
//! stdio, and then waits. When CMD exits, it exits the same way; when the
//! daemon dies, it kills the whole group with SIGKILL. The daemon's own
//! SIGTERM to the group reaches CMD directly; the supervisor waits on.
//!
//! It runs before any runtime or logger starts, on the only thread of the
//! process, with its signals blocked and taken one by one with `sigwait`.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, killpg, raise};
use nix::unistd::{Pid, getpgrp, getppid};
use swarmd_spawner::process::Supervisor;

use crate::cli::{SuperviseArgs, exit};

/// How this daemon starts its process agents: under `swarmd supervise`,
/// executed as `/proc/self/exe` (the running binary, even if the file was
/// replaced since) with this process as the parent to check.
pub fn supervisor() -> Supervisor {
    Supervisor {
        program: PathBuf::from("/proc/self/exe"),
        args: vec![
            "supervise".into(),
            "--parent".into(),
            std::process::id().to_string().into(),
            "--".into(),
        ],
    }
}

/// What the kernel sends the supervisor when the daemon dies.
const DEATH_SIGNAL: Signal = Signal::SIGHUP;

/// Exit status when CMD could not be started (as a shell reports it).
const CANNOT_START: u8 = 127;

/// Runs the supervisor and returns its exit status, unless it ends by the
/// signal that ended CMD. Call it only while the process has one thread.
pub fn run(args: &SuperviseArgs) -> u8 {
    let parent = Pid::from_raw(args.parent);
    let Some((program, cmd_args)) = args.command.split_first() else {
        eprintln!("swarmd supervise: no command");
        return exit::USAGE;
    };
    let mut signals = SigSet::empty();
    for signal in [
        DEATH_SIGNAL,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGCHLD,
    ] {
        signals.add(signal);
    }
    // Blocked before anything can arrive: a signal is then taken by `wait`,
    // never by its default action. CMD starts with an empty mask (std resets
    // it between fork and exec).
    if let Err(errno) = signals.thread_block() {
        eprintln!("swarmd supervise: cannot block signals: {errno}");
        return exit::FAILURE;
    }
    if let Err(errno) = prctl::set_pdeathsig(DEATH_SIGNAL) {
        eprintln!("swarmd supervise: cannot set the parent-death signal: {errno}");
        return exit::FAILURE;
    }
    // The daemon may have died between starting us and the request above.
    if getppid() != parent {
        eprintln!("swarmd supervise: the daemon is gone; not starting the command");
        return exit::FAILURE;
    }
    let mut child = match Command::new(program).args(cmd_args).spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "swarmd supervise: cannot start `{}`: {error}",
                program.to_string_lossy()
            );
            return CANNOT_START;
        }
    };
    loop {
        match signals.wait() {
            Ok(Signal::SIGCHLD) => match child.try_wait() {
                Ok(Some(status)) => return relay(status, parent, &signals),
                Ok(None) => {}
                Err(error) => {
                    eprintln!("swarmd supervise: cannot wait for the command: {error}");
                    kill_group();
                    return exit::FAILURE;
                }
            },
            // Reparented: the daemon is gone, and so must its group be.
            Ok(signal) if signal == DEATH_SIGNAL && getppid() != parent => {
                kill_group();
                return exit::FAILURE;
            }
            // SIGTERM, SIGINT or a SIGHUP from elsewhere: whoever signalled
            // the group signalled CMD too, and CMD decides.
            Ok(_) => {}
            Err(errno) => {
                eprintln!("swarmd supervise: sigwait failed: {errno}");
                kill_group();
                return exit::FAILURE;
            }
        }
    }
}

/// Ends the supervisor as CMD ended: the same exit code, or the same signal.
/// If the daemon died meanwhile, what is left of the group is killed first.
fn relay(status: ExitStatus, parent: Pid, blocked: &SigSet) -> u8 {
    if getppid() != parent {
        kill_group();
    }
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(exit::FAILURE);
    }
    let Some(number) = status.signal() else {
        return exit::FAILURE;
    };
    if let Ok(signal) = Signal::try_from(number) {
        // None of these signals has a handler here, so once unblocked the
        // default action applies; one the process ignores (SIGPIPE) falls
        // through to the shell's convention below.
        let _ = blocked.thread_unblock();
        let _ = raise(signal);
    }
    u8::try_from(128 + number).unwrap_or(exit::FAILURE)
}

/// SIGKILL to the supervisor's own group: CMD, its children, and itself.
fn kill_group() {
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}
