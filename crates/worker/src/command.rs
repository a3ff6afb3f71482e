//! The wrapper's command: run with the prompt on stdin, its stdout read up
//! to `MAX_STDOUT`, killed when the run ends early. It stays in the
//! wrapper's process group, which whoever started the wrapper (the
//! daemon's process spawner, a pool) kills when the attempt ends, so
//! whatever the command started goes then, even if the wrapper itself
//! was killed.

use std::future::Future;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::wrapper::HANDLE_VAR;

/// The most stdout a command's result may be: the daemon's default body
/// limit (`limits.max_body_bytes`), which would refuse more anyway.
pub(crate) const MAX_STDOUT: usize = 8 << 20;
/// How long stdout may stay open once the command exited: a process it
/// left in the background can hold it for ever.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// How a command's run ended.
#[derive(Debug)]
pub(crate) enum Ran {
    /// It exited; its stdout up to its end, or up to when the exit's
    /// grace ran out.
    Exited { stdout: Vec<u8>, status: ExitStatus },
    /// Its stdout passed `MAX_STDOUT`: it was stopped.
    TooLarge,
    /// The attempt ended first (cancelled, or decided elsewhere): it was
    /// stopped.
    Ended,
}

/// The variables that hold a daemon credential, or name the file of one,
/// for swarmd's own clients: a shell that exported them for the CLI does
/// not hand them to the command.
const CLIENT_CREDENTIAL_VARS: &[&str] = &["SWARMD_TOKEN", "SWARMD_TOKEN_FILE"];

/// The command, with the handle and the client credentials removed from
/// its environment.
pub(crate) fn command_for(argv: &[String]) -> Command {
    let (program, args) = argv
        .split_first()
        .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    let mut command = Command::new(program);
    for var in CLIENT_CREDENTIAL_VARS {
        command.env_remove(var);
    }
    command
        .args(args)
        .env_remove(HANDLE_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command
}

/// Runs `argv` with `prompt` on stdin until it exits, its stdout passes
/// `MAX_STDOUT`, or `ended` completes. Stdin is written while stdout is
/// read, so a command that prints before it has read all its input cannot
/// deadlock.
pub(crate) async fn run_command(
    argv: &[String],
    prompt: &str,
    ended: impl Future<Output = ()>,
) -> io::Result<Ran> {
    // Dropped at the end, the child is killed if it still runs.
    let mut child = command_for(argv).spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let prompt = prompt.as_bytes().to_vec();
        // A command that exits without reading its input is not an error.
        tokio::spawn(async move {
            let _ = stdin.write_all(&prompt).await;
        });
    }
    let mut stdout = child.stdout.take();
    let mut output = Vec::new();
    let ran = {
        let mut read = Box::pin(async {
            match &mut stdout {
                Some(stdout) => {
                    let limit = u64::try_from(MAX_STDOUT).unwrap_or(u64::MAX) + 1;
                    stdout.take(limit).read_to_end(&mut output).await
                }
                None => Ok(0),
            }
        });
        let run = async {
            tokio::select! {
                read = &mut read => {
                    // Past the bound the command is not waited for: it is
                    // killed as this returns.
                    if read? > MAX_STDOUT {
                        return Ok(End::Overflowed);
                    }
                    child.wait().await.map(End::Exited)
                }
                status = child.wait() => {
                    let status = status?;
                    // What was read when the grace ends is the result;
                    // whatever still holds stdout goes with the group when
                    // the attempt ends.
                    if let Ok(read) = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut read).await {
                        read?;
                    }
                    Ok(End::Exited(status))
                }
            }
        };
        tokio::select! {
            end = run => end?,
            () = ended => End::Ended,
        }
    };
    Ok(match ran {
        End::Ended => Ran::Ended,
        End::Overflowed => Ran::TooLarge,
        End::Exited(_) if output.len() > MAX_STDOUT => Ran::TooLarge,
        End::Exited(status) => Ran::Exited {
            stdout: output,
            status,
        },
    })
}

/// How a run's waiting ended, before its stdout is looked at.
enum End {
    Exited(ExitStatus),
    /// Stdout passed `MAX_STDOUT` before the command exited.
    Overflowed,
    /// The attempt ended first.
    Ended,
}

/// The exit code to mirror: the command's, or 128 + the signal that
/// killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use super::*;

    fn sh(script: &str) -> Vec<String> {
        ["sh", "-c", script].map(String::from).to_vec()
    }

    async fn exited(ran: Ran) -> (Vec<u8>, ExitStatus) {
        match ran {
            Ran::Exited { stdout, status } => (stdout, status),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_command_never_inherits_the_handle_or_a_client_credential() {
        let command = command_for(&["env".to_owned()]);
        for var in [HANDLE_VAR, "SWARMD_TOKEN", "SWARMD_TOKEN_FILE"] {
            let removed = command
                .as_std()
                .get_envs()
                .any(|(name, value)| name == var && value.is_none());
            assert!(removed, "{var}");
        }
    }

    #[tokio::test]
    async fn command_gets_the_prompt_and_its_status_is_mirrored() {
        let ran = run_command(&sh("tr a-z A-Z; exit 3"), "hello", pending())
            .await
            .unwrap();
        let (stdout, status) = exited(ran).await;
        assert_eq!(stdout, b"HELLO");
        assert_eq!(exit_code(status), 3);
    }

    #[tokio::test]
    async fn command_that_ignores_stdin_still_completes() {
        let big_prompt = "x".repeat(1 << 20);
        let ran = run_command(&sh("echo done"), &big_prompt, pending())
            .await
            .unwrap();
        let (stdout, status) = exited(ran).await;
        assert_eq!(stdout, b"done\n");
        assert!(status.success());
    }

    #[tokio::test]
    async fn stdout_past_its_bound_stops_the_command() {
        let ran = run_command(&sh("yes"), "", pending()).await.unwrap();
        assert!(matches!(ran, Ran::TooLarge), "{ran:?}");
    }

    #[tokio::test]
    async fn a_background_process_holding_stdout_does_not_hold_the_result() {
        // The command exits at once; what it left behind keeps stdout open
        // for longer than the grace.
        let started = std::time::Instant::now();
        let ran = run_command(&sh("echo out; sleep 8 &"), "", pending())
            .await
            .unwrap();
        let (stdout, status) = exited(ran).await;
        assert_eq!((stdout.as_slice(), status.success()), (&b"out\n"[..], true));
        assert!(started.elapsed() < Duration::from_secs(6));
    }

    #[tokio::test]
    async fn the_attempt_ending_stops_the_command() {
        let ended = tokio::time::sleep(Duration::from_millis(100));
        let ran = run_command(&sh("sleep 60"), "", ended).await.unwrap();
        assert!(matches!(ran, Ran::Ended), "{ran:?}");
    }
}
