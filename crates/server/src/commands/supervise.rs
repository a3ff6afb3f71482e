//! `swarmd supervise --parent PID -- CMD…` (hidden): the leader of every
//! process agent's group. The daemon starts it in a new process group; it
//! asks the kernel for SIGHUP when the daemon's launcher thread dies
//! (`PR_SET_PDEATHSIG`), checks that the daemon is still its parent (it may
//! have died before the request), starts CMD in the same group with the same
//! stdio, and then waits. When CMD exits, it exits the same way; when the
//! daemon dies, it kills the whole group with SIGKILL. The daemon's own
//! SIGTERM to the group reaches CMD directly; the supervisor waits on.
//!
//! It runs before the daemon's runtime or logger would start, on a
//! current-thread runtime of its own. Its signals are caught by handlers,
//! not blocked: a blocked mask would pass on to CMD, while handlers fall back
//! to the default action when CMD is executed.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::prctl;
use nix::sys::signal::{Signal, killpg, raise};
use nix::unistd::{Pid, getpgrp, getppid};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{SuperviseArgs, exit};

/// What the kernel sends the supervisor when the daemon dies.
const DEATH_SIGNAL: Signal = Signal::SIGHUP;

/// Exit status when CMD could not be started (as a shell reports it).
const CANNOT_START: u8 = 127;

/// Runs the supervisor and returns its exit status, unless it ends by the
/// signal that ended CMD. Call it before any other runtime starts.
pub fn run(args: &SuperviseArgs) -> u8 {
    let Some((program, cmd_args)) = args.command.split_first() else {
        eprintln!("swarmd supervise: no command");
        return exit::USAGE;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(supervise(Pid::from_raw(args.parent), program, cmd_args)),
        Err(error) => {
            eprintln!("swarmd supervise: cannot start a runtime: {error}");
            exit::FAILURE
        }
    }
}

async fn supervise(parent: Pid, program: &OsString, args: &[OsString]) -> u8 {
    // Handlers first: the death signal must never find its default action.
    let handlers = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    let (Ok(mut hangup), Ok(mut terminate), Ok(mut interrupt)) = handlers else {
        eprintln!("swarmd supervise: cannot handle signals");
        return exit::FAILURE;
    };
    if let Err(errno) = prctl::set_pdeathsig(DEATH_SIGNAL) {
        eprintln!("swarmd supervise: cannot set the parent-death signal: {errno}");
        return exit::FAILURE;
    }
    // The daemon may have died between starting us and the request above.
    if getppid() != parent {
        eprintln!("swarmd supervise: the daemon is gone; not starting the command");
        return exit::FAILURE;
    }
    let mut child = match Command::new(program).args(args).spawn() {
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
        tokio::select! {
            status = child.wait() => match status {
                Ok(status) => return relay(status, parent),
                Err(error) => {
                    eprintln!("swarmd supervise: cannot wait for the command: {error}");
                    kill_group();
                    return exit::FAILURE;
                }
            },
            // Reparented: the daemon is gone, and so must its group be.
            _ = hangup.recv() => if getppid() != parent {
                kill_group();
                return exit::FAILURE;
            },
            // Whoever signalled the group signalled CMD too, and CMD decides;
            // so does a SIGHUP from elsewhere, above.
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    }
}

/// Ends the supervisor as CMD ended: the same exit code, or the same signal.
/// If the daemon died meanwhile, what is left of the group is killed first.
fn relay(status: ExitStatus, parent: Pid) -> u8 {
    if getppid() != parent {
        kill_group();
    }
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(exit::FAILURE);
    }
    let Some(number) = status.signal() else {
        return exit::FAILURE;
    };
    let handled = [
        DEATH_SIGNAL,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGPIPE,
    ];
    if let Ok(signal) = Signal::try_from(number)
        && !handled.contains(&signal)
    {
        let _ = raise(signal);
    }
    // A signal this process catches or ignores: the shell's convention.
    u8::try_from(128 + number).unwrap_or(exit::FAILURE)
}

/// SIGKILL to the supervisor's own group: CMD, its children, and itself.
fn kill_group() {
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}
