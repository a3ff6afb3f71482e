//! The setup command of a worktree (docs/tasks.md, Worktrees, Setup): run in the
//! new worktree before the agent starts, in its own process group, with the
//! environment the agent's child gets (its allow-list and the worktree's
//! `SWARM_*` variables, never the worker's credential). Each line it prints
//! on stdout or stderr becomes a `progress` event of stage `setup` in the
//! attempt's output (producer `setup`), between a first note naming the
//! command and a last one saying how it ended. A non-zero exit, a signal or
//! the timeout fails the attempt before the agent runs.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use swarmd_engine::AttemptHost;
use swarmd_output_store::OutputEvent;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::bootstrap::SetupSpec;

/// Producer and progress stage of a setup command's events.
pub const SETUP: &str = "setup";
/// Lines kept per stream; the rest are counted in the last note.
const MAX_LINES: usize = 2_000;
/// Characters kept of one line.
const MAX_LINE_CHARS: usize = 4_096;

/// Why a setup command failed the attempt; the text is the attempt's reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetupError {
    #[error("setup failed: cannot start `{program}`: {message}")]
    Start { program: String, message: String },
    #[error("setup failed: exit {0}")]
    Exit(i32),
    #[error("setup failed: killed by signal {0}")]
    Signal(i32),
    #[error("setup timed out after {} s", .0.as_secs())]
    TimedOut(Duration),
    #[error("setup failed: {0}")]
    Wait(String),
}

/// Runs `setup` in `dir` with exactly `env`, sending its events to
/// `events` as they come. The process group is killed on timeout and when
/// this future is dropped.
///
/// # Errors
/// How the command failed.
pub async fn run(
    setup: &SetupSpec,
    dir: &Path,
    env: &[(String, String)],
    events: mpsc::Sender<OutputEvent>,
) -> Result<(), SetupError> {
    let note = |text: String| OutputEvent::Progress {
        stage: SETUP.to_owned(),
        note: Some(text),
    };
    let Some((program, args)) = setup.command.split_first() else {
        return Err(SetupError::Start {
            program: String::new(),
            message: "no program".to_owned(),
        });
    };
    let _ = events
        .send(note(format!("running {}", setup.command.join(" "))))
        .await;
    let mut command = Command::new(resolve(program, env));
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| SetupError::Start {
        program: program.clone(),
        message: e.to_string(),
    })?;
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let _kill_group = group.map(GroupKill);
    let out = child.stdout.take().map(|s| lines(s, events.clone()));
    let err = child.stderr.take().map(|s| lines(s, events.clone()));
    let finished = async {
        let (status, dropped_out, dropped_err) = tokio::join!(
            child.wait(),
            async {
                match out {
                    Some(f) => f.await,
                    None => 0,
                }
            },
            async {
                match err {
                    Some(f) => f.await,
                    None => 0,
                }
            },
        );
        (status, dropped_out + dropped_err)
    };
    let ended = match tokio::time::timeout(setup.timeout, finished).await {
        Err(_) => Err(SetupError::TimedOut(setup.timeout)),
        Ok((Err(e), _)) => Err(SetupError::Wait(e.to_string())),
        Ok((Ok(status), dropped)) => {
            if dropped > 0 {
                let _ = events
                    .send(note(format!("{dropped} more lines not recorded")))
                    .await;
            }
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(0), _) => Ok(()),
                (Some(code), _) => Err(SetupError::Exit(code)),
                (None, Some(signal)) => Err(SetupError::Signal(signal)),
                (None, None) => Err(SetupError::Wait("no exit status".to_owned())),
            }
        }
    };
    let last = match &ended {
        Ok(()) => format!("done in {:.1} s", started.elapsed().as_secs_f64()),
        Err(error) => error.to_string(),
    };
    let _ = events.send(note(last)).await;
    ended
}

/// Runs `setup` as [`run`] does and records its events in the attempt's
/// output as they come.
///
/// # Errors
/// How the command failed; a failure to record is logged, not an error.
pub async fn run_recorded(
    host: &dyn AttemptHost,
    setup: &SetupSpec,
    dir: &Path,
    env: &[(String, String)],
) -> Result<(), SetupError> {
    let (sender, mut received) = mpsc::channel(256);
    let recording = async {
        while let Some(first) = received.recv().await {
            let mut batch = vec![first];
            while let Ok(more) = received.try_recv() {
                batch.push(more);
            }
            if let Err(error) = host.record_output(SETUP, batch).await {
                tracing::debug!(%error, "setup output not recorded");
            }
        }
    };
    let (ran, ()) = tokio::join!(run(setup, dir, env, sender), recording);
    ran
}

/// Sends each line of `stream` as a setup note; returns how many lines
/// beyond [`MAX_LINES`] were read and dropped.
async fn lines(stream: impl AsyncRead + Unpin, events: mpsc::Sender<OutputEvent>) -> usize {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let (mut kept, mut dropped) = (0, 0);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return dropped,
            Ok(_) => {}
        }
        if kept >= MAX_LINES {
            dropped += 1;
            continue;
        }
        kept += 1;
        let text = String::from_utf8_lossy(&line);
        let text: String = text.trim_end().chars().take(MAX_LINE_CHARS).collect();
        let event = OutputEvent::Progress {
            stage: SETUP.to_owned(),
            note: Some(text),
        };
        if events.send(event).await.is_err() {
            return dropped;
        }
    }
}

/// `program` as found in `env`'s `PATH` when it is a bare name: the child's
/// environment is cleared, so the daemon's own `PATH` must not decide.
fn resolve(program: &str, env: &[(String, String)]) -> std::path::PathBuf {
    if program.contains('/') {
        return program.into();
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| program.into())
}

/// Kills the setup command's process group when dropped: after it ended
/// (its leftovers), on timeout, or when the spawn is abandoned.
struct GroupKill(Pid);

impl Drop for GroupKill {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

#[cfg(test)]
#[path = "setup_tests.rs"]
mod tests;
