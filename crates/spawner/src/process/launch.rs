//! Where children are forked from: one thread that lives as long as the
//! daemon. A supervised child asks for a signal when its parent dies
//! (`PR_SET_PDEATHSIG`), and the kernel sends it when the *thread* that
//! forked it exits, not the process. Runtime threads come and go (a blocking
//! pool thread exits after idling), so every child is forked here instead.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, SyncSender, channel, sync_channel};

use tokio::process::{Child, Command};
use tokio::runtime::Handle;

/// How children are started under a supervisor: `program` with `args`, then
/// the child's program and its arguments. The supervisor leads the child's
/// group, relays its exit, and kills the group when the daemon dies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// One fork: the command, the runtime the child is registered with (its
/// reaping and pipes), and where the outcome goes.
struct Job {
    command: Command,
    runtime: Handle,
    reply: SyncSender<io::Result<Child>>,
}

/// Spawns `command` from the launcher thread and waits for the outcome
/// (as long as a fork and exec take).
///
/// # Errors
/// The spawn's own error, or one saying there is no runtime or no launcher.
pub(super) fn spawn(command: Command) -> io::Result<Child> {
    let runtime = Handle::try_current().map_err(io::Error::other)?;
    let (reply, outcome) = sync_channel(1);
    let job = Job {
        command,
        runtime,
        reply,
    };
    let gone = || io::Error::other("the launcher thread is gone");
    launcher()?.send(job).map_err(|_| gone())?;
    outcome.recv().map_err(|_| gone())?
}

/// The launcher's queue, starting its thread on first use. The thread never
/// ends: its queue's sender is never dropped.
fn launcher() -> io::Result<&'static Sender<Job>> {
    static LAUNCHER: OnceLock<Sender<Job>> = OnceLock::new();
    if let Some(queue) = LAUNCHER.get() {
        return Ok(queue);
    }
    let (queue, jobs) = channel::<Job>();
    let started = std::thread::Builder::new()
        .name("swarmd-launch".to_owned())
        .spawn(move || {
            for mut job in jobs {
                let _runtime = job.runtime.enter();
                let _ = job.reply.send(job.command.spawn());
            }
        });
    match started {
        // Two first calls may race: the loser's thread ends with its queue.
        Ok(_) => Ok(LAUNCHER.get_or_init(|| queue)),
        Err(error) => Err(error),
    }
}
