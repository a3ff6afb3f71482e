//! Supervising a started child until it is gone: output readers, the stdin
//! writer and the exit/cancel/timeout/cap race run together; every way out
//! ends with the group killed and the child reaped.

use std::pin::pin;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use swarmd_output_store::OutputEvent;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ProcessError;
use super::child::{GroupGuard, RunningChild};
use super::output::{plain_value, read_stdout, read_tail};

/// A child that exited on its own.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    /// The whole stdout in plain mode; empty in NDJSON mode.
    pub stdout: Vec<u8>,
    pub stderr_tail: String,
    /// Final events seen on stdout (NDJSON mode).
    pub finals: usize,
    /// `ok` of the last Final seen on stdout (NDJSON mode).
    pub last_final_ok: Option<bool>,
}

impl Exited {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `exit status 3` or `killed by signal 9`, for reasons and notes.
    pub fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "unknown exit status".to_owned(),
        }
    }

    /// The plain-mode Final: `(value, ok)` with `ok` = exit status 0.
    pub fn plain_final(&self) -> (Value, bool) {
        (plain_value(&self.stdout, &self.stderr_tail), self.success())
    }
}

/// How long output may still drain once the child is gone, while the
/// reader is not waiting on the events' receiver: only a process that left
/// the group can hold the pipes open that long.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// How long the drain waits in all while the events' channel is full: the
/// output is there, the store takes it slowly.
const DRAIN_MAX: Duration = Duration::from_secs(120);
/// The grain at which the drain looks at the channel.
const DRAIN_STEP: Duration = Duration::from_millis(100);

/// Why supervision stopped the child instead of seeing it exit.
enum Stop {
    Exited(ExitStatus),
    Stopped(Option<ProcessError>),
}

impl RunningChild {
    /// Runs the child to its end. In NDJSON mode each stdout line goes to
    /// `events` as it arrives; plain mode sends nothing there.
    ///
    /// # Errors
    /// `Cancelled`, `TimedOut`, `OutputTooLarge`, `SinkClosed` or `Io`; in
    /// every case the process group has been killed and the child reaped.
    pub async fn wait(self, events: mpsc::Sender<OutputEvent>) -> Result<Exited, ProcessError> {
        let RunningChild {
            mut child,
            mut guard,
            identity: _,
            prompt,
            cancel,
            started,
            spec,
        } = self;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let stdin = child.stdin.take();
        let reader_failed = CancellationToken::new();

        let read_out = async {
            let Some(stdout) = stdout else {
                return Ok(Default::default());
            };
            let result = read_stdout(stdout, spec.stream, spec.max_output_bytes, &events).await;
            if result.is_err() {
                reader_failed.cancel();
            }
            result
        };
        let read_err = async {
            match stderr {
                Some(stderr) => read_tail(stderr).await,
                None => String::new(),
            }
        };
        let deadline = spec.timeout.map(|t| (started + t, t));
        let supervise = async {
            let stop = tokio::select! {
                biased;
                status = child.wait() => match status {
                    Ok(status) => Stop::Exited(status),
                    Err(e) => Stop::Stopped(Some(ProcessError::Io(e))),
                },
                () = cancel.cancelled() => Stop::Stopped(Some(ProcessError::Cancelled)),
                () = sleep_until(deadline) => {
                    let limit = deadline.map_or(Duration::ZERO, |(_, t)| t);
                    Stop::Stopped(Some(ProcessError::TimedOut(limit)))
                }
                () = reader_failed.cancelled() => Stop::Stopped(None),
            };
            let reaped = match stop {
                Stop::Exited(status) => Ok(status),
                Stop::Stopped(_) => terminate(&mut child, &guard, spec.kill_grace).await,
            };
            // Whatever the leader did, nothing of its group outlives the run.
            guard.signal(Signal::SIGKILL);
            (stop, reaped)
        };
        let finished = {
            let mut supervise = pin!(supervise);
            let mut readers =
                pin!(async { tokio::join!(read_out, read_err, write_stdin(stdin, prompt)) });
            tokio::select! {
                ended = &mut supervise => {
                    // Pipes close when the group dies; a process that left the
                    // group could hold them open, so the drain is bounded.
                    // Time the reader spends waiting for room in a full
                    // channel is the store's, not a held pipe's.
                    let mut idle = Duration::ZERO;
                    let mut waited = Duration::ZERO;
                    let drained = loop {
                        if let Ok(drained) = tokio::time::timeout(DRAIN_STEP, &mut readers).await {
                            break Some(drained);
                        }
                        waited += DRAIN_STEP;
                        if events.capacity() > 0 {
                            idle += DRAIN_STEP;
                        }
                        if idle >= DRAIN_AFTER_EXIT || waited >= DRAIN_MAX {
                            break None;
                        }
                    };
                    (ended, drained)
                }
                drained = &mut readers => ((&mut supervise).await, Some(drained)),
            }
        };
        guard.armed = false;
        let ((stop, reaped), drained) = finished;

        match stop {
            Stop::Stopped(Some(reason)) => return Err(reason),
            Stop::Stopped(None) | Stop::Exited(_) => {}
        }
        let Some((out, stderr_tail, ())) = drained else {
            return Err(ProcessError::Io(std::io::Error::other(
                "the output pipes stayed open after the process group was killed",
            )));
        };
        let out = out?;
        let status = reaped.map_err(ProcessError::Io)?;
        Ok(Exited {
            status,
            stdout: out.bytes,
            stderr_tail,
            finals: out.finals,
            last_final_ok: out.last_final_ok,
        })
    }
}

async fn sleep_until(deadline: Option<(tokio::time::Instant, Duration)>) {
    match deadline {
        Some((at, _)) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM to the group, then SIGKILL once the grace is over; reaps the leader.
async fn terminate(
    child: &mut Child,
    guard: &GroupGuard,
    grace: Duration,
) -> std::io::Result<ExitStatus> {
    guard.signal(Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            guard.signal(Signal::SIGKILL);
            child.wait().await
        }
    }
}

/// Writes the prompt and closes stdin. A child that exits without reading it
/// is not an error (the write sees a broken pipe).
async fn write_stdin(stdin: Option<ChildStdin>, prompt: Option<String>) {
    let (Some(mut stdin), Some(prompt)) = (stdin, prompt) else {
        return;
    };
    if stdin.write_all(prompt.as_bytes()).await.is_ok() {
        let _ = stdin.shutdown().await;
    }
}
