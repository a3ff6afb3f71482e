//! One claimed attempt on a pool, run like a local process agent (docs/tasks.md, Remote
//! agents): the spawner crate's `ProcessRunner` starts the child under the
//! supervisor in its own group with a cleared environment plus the
//! `SWARM_*` variables, and reads its stdout as NDJSON or a CLI stream. What
//! it emits is posted with the attempt's own handle: progress and other
//! events as they arrive, the Final once the child exited, by the same rule
//! as the process spawner's (a plain child's stdout is its Final; an
//! NDJSON child's last Final decides, demoted to not ok by a non-zero exit).

use std::time::Duration;

use serde_json::json;
use swarmd_engine::outcome::content_value;
use swarmd_output_store::OutputEvent;
use swarmd_spawner::process::{
    EnvVar, Exited, HostEnv, ProcessError, ProcessRunner, ProcessSpec, RunVars, StreamMode,
    Supervisor,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::{ApiClient, Bearer, ClientError};
use crate::http::pool::wire::{self, ClaimedAttempt};

/// Events in flight between the child and the daemon; a full channel makes
/// the child wait on its pipe.
const CHANNEL: usize = 256;
/// Most events posted in one request.
const MAX_BATCH: usize = 64;

/// What every attempt of one pool runs.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    /// Variables passed through from the pool's environment.
    pub(crate) env: Vec<String>,
    pub(crate) cwd: Option<std::path::PathBuf>,
    pub(crate) kill_grace: Duration,
    pub(crate) supervisor: Option<Supervisor>,
}

/// How an attempt ended on the pool.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// Its Final is posted (or the child posted one itself).
    Posted,
    /// Stopped by its cancel: nothing more is written for it.
    Cancelled,
    /// Ended without a Final: reported to the daemon with this reason.
    Failed(String),
}

/// Runs `attempt` to its end; `cancel` stops it (process-group kill).
pub(crate) async fn run(
    daemon: &ApiClient,
    command: &Command,
    host_env: &HostEnv,
    attempt: &ClaimedAttempt,
    cancel: CancellationToken,
) -> Ran {
    let runner = match runner(command, host_env, attempt) {
        Ok(runner) => runner,
        Err(reason) => return Ran::Failed(reason),
    };
    let vars = RunVars {
        base_url: daemon.base_url().to_owned(),
        task_id: attempt.task_id.to_string(),
        attempt: attempt.attempt,
        agent: attempt.agent.clone(),
        worker_handle: attempt.handle.clone(),
        prompt: attempt.prompt.clone(),
        continued_from: attempt.continued_from.clone(),
        resume_session: attempt.resume_session.clone(),
    };
    let child = match runner.start_in(&vars, None, cancel.clone()) {
        Ok(child) => child,
        Err(e) => return Ran::Failed(format!("the pool could not start the child: {e}")),
    };
    let writer = daemon.with_bearer(Bearer::new(&attempt.handle));
    let (events, received) = mpsc::channel(CHANNEL);
    let (ran, forwarded) = tokio::join!(child.wait(events), forward(&writer, received));
    let last_final = match forwarded {
        Ok(last_final) => last_final,
        // A write refused as superseded or decided: the attempt is over here.
        Err(_) if cancel.is_cancelled() => return Ran::Cancelled,
        Err(e) => return Ran::Failed(format!("posting the output failed: {e}")),
    };
    let exited = match ran {
        Ok(exited) => exited,
        Err(ProcessError::Cancelled) => return Ran::Cancelled,
        Err(e) => return Ran::Failed(e.to_string()),
    };
    let stream = runner.spec().stream;
    match decide(stream, &exited, last_final) {
        Decided::Post { note, value, ok } => {
            if let Some(note) = note
                && let Err(e) = post_events(&writer, &[note]).await
            {
                return Ran::Failed(format!("posting the exit note failed: {e}"));
            }
            match post_result(&writer, value, ok).await {
                Ok(()) => Ran::Posted,
                Err(e) => Ran::Failed(format!("posting the final failed: {e}")),
            }
        }
        Decided::Fail(reason) => Ran::Failed(reason),
    }
}

/// The child's runner, from the pool's command and the attempt's settings.
fn runner(
    command: &Command,
    host_env: &HostEnv,
    attempt: &ClaimedAttempt,
) -> Result<ProcessRunner, String> {
    let stdin = wire::parse_stdin(&attempt.stdin)
        .ok_or_else(|| format!("unknown stdin mode `{}`", attempt.stdin))?;
    let stream = wire::parse_stream(&attempt.stream)
        .ok_or_else(|| format!("unknown stream `{}`", attempt.stream))?;
    let spec = ProcessSpec {
        program: command.program.clone().into(),
        args: command.args.clone(),
        resume_args: Vec::new(),
        env: command.env.iter().cloned().map(EnvVar::Pass).collect(),
        cwd: command.cwd.clone(),
        stdin,
        stream,
        timeout: attempt.timeout_ms.map(Duration::from_millis),
        max_output_bytes: attempt.max_output_bytes,
        kill_grace: command.kill_grace,
    };
    ProcessRunner::new(spec, host_env)
        .map(|runner| runner.supervised_by(command.supervisor.clone()))
        .map_err(|e| format!("the pool cannot run its command: {e}"))
}

/// Posts every event but Finals as it arrives, batching what is waiting;
/// returns the last Final, which is posted once the child has exited.
async fn forward(
    writer: &ApiClient,
    mut events: mpsc::Receiver<OutputEvent>,
) -> Result<Option<OutputEvent>, ClientError> {
    let mut last_final = None;
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let (finals, others): (Vec<OutputEvent>, Vec<OutputEvent>) = batch
            .into_iter()
            .partition(|e| matches!(e, OutputEvent::Final { .. }));
        if let Some(last) = finals.into_iter().last() {
            last_final = Some(last);
        }
        if !others.is_empty() {
            post_events(writer, &others).await?;
        }
    }
    Ok(last_final)
}

/// What the child's exit decides.
#[derive(Debug, PartialEq)]
enum Decided {
    Post {
        /// Said first, when an ok Final is demoted by the exit.
        note: Option<OutputEvent>,
        value: serde_json::Value,
        ok: bool,
    },
    Fail(String),
}

/// The process spawner's rule, for a Final that can be posted only once.
fn decide(stream: StreamMode, exited: &Exited, last_final: Option<OutputEvent>) -> Decided {
    if stream == StreamMode::None {
        let (value, ok) = exited.plain_final();
        return Decided::Post {
            note: None,
            value,
            ok,
        };
    }
    match last_final {
        Some(OutputEvent::Final { content, ok }) => {
            let demoted = ok && !exited.success();
            Decided::Post {
                note: demoted.then(|| OutputEvent::Progress {
                    stage: "exit".to_owned(),
                    note: Some(format!("{}: the final is not ok", exited.describe())),
                }),
                value: content_value(content),
                ok: ok && exited.success(),
            }
        }
        _ => Decided::Fail(format!(
            "the process ended ({}) without a final event",
            exited.describe()
        )),
    }
}

async fn post_events(writer: &ApiClient, events: &[OutputEvent]) -> Result<(), ClientError> {
    let mut body = Vec::new();
    for event in events {
        serde_json::to_writer(&mut body, event).map_err(|e| ClientError::Decode {
            url: "output".to_owned(),
            reason: e.to_string(),
        })?;
        body.push(b'\n');
    }
    let path = "/v1/worker/output";
    let url = writer.url(path);
    let request = writer
        .post(path)
        .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
        .body(body);
    writer.send(request, &url).await.map(drop)
}

/// Posts the Final; a Final already there (the child posted its own with
/// its handle) is left to decide.
async fn post_result(
    writer: &ApiClient,
    value: serde_json::Value,
    ok: bool,
) -> Result<(), ClientError> {
    let path = "/v1/worker/result";
    let url = writer.url(path);
    let request = writer.post(path).json(&json!({ "value": value, "ok": ok }));
    match writer.send(request, &url).await {
        Ok(_) => Ok(()),
        Err(ClientError::Status { code, .. }) if code.as_deref() == Some("already_final") => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_output_store::ContentRef;

    fn final_event(ok: bool) -> OutputEvent {
        OutputEvent::Final {
            content: ContentRef::Inline { value: json!("r") },
            ok,
        }
    }

    fn exited(code: i32) -> Exited {
        use std::os::unix::process::ExitStatusExt;
        Exited {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: Vec::new(),
            stderr_tail: String::new(),
            finals: 0,
            last_final_ok: None,
        }
    }

    #[test]
    fn an_ndjson_final_decides_and_a_failed_exit_demotes_it_with_a_note() {
        let kept = decide(StreamMode::Ndjson, &exited(0), Some(final_event(true)));
        assert_eq!(
            kept,
            Decided::Post {
                note: None,
                value: json!("r"),
                ok: true
            }
        );
        let Decided::Post { note, ok, .. } =
            decide(StreamMode::Ndjson, &exited(3), Some(final_event(true)))
        else {
            panic!("expected a post");
        };
        assert!(!ok);
        assert!(matches!(note, Some(OutputEvent::Progress { .. })));
    }

    #[test]
    fn an_ndjson_child_without_a_final_fails_the_attempt() {
        let Decided::Fail(reason) = decide(StreamMode::Ndjson, &exited(0), None) else {
            panic!("expected a failure");
        };
        assert!(reason.contains("without a final event"), "{reason}");
    }
}
