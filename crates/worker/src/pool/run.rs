//! One claimed attempt on a pool, run like a local process agent (docs/tasks.md, Remote
//! agents): the spawner crate's `ProcessRunner` starts the child under the
//! supervisor in its own group with a cleared environment plus the
//! `SWARM_*` variables, and reads its stdout as NDJSON or a CLI stream. What
//! it emits is posted with the attempt's own handle: progress and other
//! events as they arrive, the Final once the child exited, by the same rule
//! as the process spawner's (a plain child's stdout is its Final; an
//! NDJSON child's last Final decides, demoted to not ok by a non-zero exit).
//!
//! A post that fails in a way that may pass (the connection refused or
//! broken, `502`, `503`, `504`: the daemon restarting, a proxy reloading,
//! a peer node taking the task over) is sent again with backoff, from
//! 100 ms doubling to 5 s, for up to the attempt's lease and while the
//! attempt is not cancelled. A batch of events whose connection broke
//! after the daemon read it may so be stored twice; a Final sent again
//! finds itself already there (`409 already_final`), which counts as
//! posted.

use std::time::Duration;

use serde_json::json;
use swarmd_git::worktree::{Checkout, SetupSpec, setup};
use swarmd_spawner::process::{
    EnvVar, Exited, HostEnv, ProcessError, ProcessRunner, ProcessSpec, RunVars, StreamMode,
    Supervisor, parse_stdin, parse_stream,
};
use swarmd_types::output::OutputEvent;
use swarmd_types::output::content_value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::worktree::PoolWorktree;
use swarmd_client::wire::ClaimedAttempt;
use swarmd_client::{ApiClient, Bearer, ClientError};

/// Events in flight between the child and the daemon; a full channel makes
/// the child wait on its pipe.
const CHANNEL: usize = 256;
/// Most events posted in one request.
const MAX_BATCH: usize = 64;
/// A request stops taking events once they weigh this much as JSON: well
/// inside the daemon's default body limit (8 MiB) even with one large
/// event last.
const MAX_BATCH_BYTES: usize = 1 << 20;

/// What every attempt of one pool runs.
#[derive(Debug, Clone)]
pub struct Command {
    pub program: String,
    pub args: Vec<String>,
    /// Variables passed through from the pool's environment.
    pub env: Vec<String>,
    pub cwd: Option<std::path::PathBuf>,
    pub kill_grace: Duration,
    pub supervisor: Option<Supervisor>,
    /// Each attempt in a worktree of its own (`--worktree-repo`).
    pub worktree: Option<PoolWorktree>,
}

/// How an attempt ended on the pool.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    /// Its Final is posted (or the child posted one itself).
    Posted,
    /// Stopped by its cancel: nothing more is written for it.
    Cancelled,
    /// Ended without a Final: reported to the daemon with this reason.
    Failed(String),
}

/// Runs `attempt` to its end, in a worktree of its own when the pool has
/// `--worktree-repo`; `cancel` stops it (process-group kill).
pub async fn run(
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
    let Some(worktree) = &command.worktree else {
        return run_child(daemon, &runner, attempt, cancel, None, None)
            .await
            .0;
    };
    let (checkout, fell_back) = match worktree.open(attempt).await {
        Ok(opened) => opened,
        Err(reason) => return Ran::Failed(reason),
    };
    let (ran, passed) = run_child(
        daemon,
        &runner,
        attempt,
        cancel,
        Some((worktree, &checkout)),
        fell_back,
    )
    .await;
    worktree.release(&checkout, passed).await;
    ran
}

/// Runs the child (in `checkout` when given) and posts what it emits,
/// after a `worktree` progress note when a continuation's worktree fell
/// back to the base; how it ended, and whether it passed (for the
/// worktree's keep rule).
async fn run_child(
    daemon: &ApiClient,
    runner: &ProcessRunner,
    attempt: &ClaimedAttempt,
    cancel: CancellationToken,
    checkout: Option<(&PoolWorktree, &Checkout)>,
    fell_back: Option<String>,
) -> (Ran, bool) {
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
    let writer = Poster {
        client: daemon.with_bearer(Bearer::new(&attempt.handle)),
        patience: Duration::from_millis(attempt.lease_ms),
        cancel: cancel.clone(),
    };
    if let Some(note) = fell_back {
        let note = OutputEvent::Progress {
            stage: "worktree".to_owned(),
            note: Some(note),
        };
        if let Err(e) = post_events(&writer, &[note]).await {
            tracing::debug!(error = %e, "worktree note not posted");
        }
    }
    // The setup command runs in the new worktree before the child; its
    // failure fails the attempt, the child never starts.
    if let Some((worktree, checkout)) = checkout
        && let Some(setup) = worktree.setup()
        && let Err(reason) = run_setup(&writer, runner, setup, checkout).await
    {
        return (Ran::Failed(reason), false);
    }
    let child = match runner.start_in(&vars, checkout.map(|(_, c)| c), cancel.clone()) {
        Ok(child) => child,
        Err(e) => {
            return (
                Ran::Failed(format!("the pool could not start the child: {e}")),
                false,
            );
        }
    };
    let (events, received) = mpsc::channel(CHANNEL);
    let (ran, forwarded) = tokio::join!(child.wait(events), forward(&writer, received));
    let last_final = match forwarded {
        Ok(last_final) => last_final,
        // A write refused as superseded or decided: the attempt is over here.
        Err(_) if cancel.is_cancelled() => return (Ran::Cancelled, false),
        Err(e) => {
            return (
                Ran::Failed(format!("posting the output failed: {e}")),
                false,
            );
        }
    };
    let exited = match ran {
        Ok(exited) => exited,
        Err(ProcessError::Cancelled) => return (Ran::Cancelled, false),
        Err(e) => return (Ran::Failed(e.to_string()), false),
    };
    // The branch is described before the Final, so the artifact is part of
    // the attempt its Final decides.
    if let Some((worktree, checkout)) = checkout {
        let artifact = match worktree.conclude(checkout).await {
            Ok(artifact) => artifact,
            Err(refused) => {
                let note = OutputEvent::Progress {
                    stage: "worktree".to_owned(),
                    note: Some(refused.clone()),
                };
                if let Err(e) = post_events(&writer, &[note]).await {
                    tracing::debug!(error = %e, "worktree refusal not posted");
                }
                return (Ran::Failed(refused), false);
            }
        };
        if let Some(artifact) = artifact
            && let Err(e) = post_events(&writer, &[artifact]).await
        {
            return (
                Ran::Failed(format!("posting the worktree artifact failed: {e}")),
                false,
            );
        }
    }
    let stream = runner.spec().stream;
    match decide(stream, &exited, last_final) {
        Decided::Post { note, value, ok } => {
            if let Some(note) = note
                && let Err(e) = post_events(&writer, &[note]).await
            {
                return (
                    Ran::Failed(format!("posting the exit note failed: {e}")),
                    false,
                );
            }
            match post_result(&writer, value, ok).await {
                Ok(()) => (Ran::Posted, ok),
                Err(e) => (Ran::Failed(format!("posting the final failed: {e}")), false),
            }
        }
        Decided::Fail(reason) => (Ran::Failed(reason), false),
    }
}

/// The child's runner, from the pool's command and the attempt's settings.
fn runner(
    command: &Command,
    host_env: &HostEnv,
    attempt: &ClaimedAttempt,
) -> Result<ProcessRunner, String> {
    let stdin = parse_stdin(&attempt.stdin)
        .ok_or_else(|| format!("unknown stdin mode `{}`", attempt.stdin))?;
    let stream = parse_stream(&attempt.stream)
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

/// Where an attempt's posts go: the daemon, with the attempt's own handle.
struct Poster {
    client: ApiClient,
    /// How long a post that may pass is sent again.
    patience: Duration,
    /// The attempt's cancel: a cancelled attempt's posts are not retried.
    cancel: CancellationToken,
}

impl Poster {
    /// Sends the request `build` makes until it succeeds, fails for good,
    /// the patience runs out or the attempt is cancelled.
    async fn send(
        &self,
        path: &str,
        build: impl Fn(&ApiClient) -> reqwest::RequestBuilder,
    ) -> Result<(), ClientError> {
        let url = self.client.url(path);
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut backoff = RETRY_FIRST;
        loop {
            let error = match self.client.send(build(&self.client), &url).await {
                Ok(_) => return Ok(()),
                Err(error) => error,
            };
            let wait = backoff.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if !may_pass(&error) || wait.is_zero() || self.cancel.is_cancelled() {
                return Err(error);
            }
            tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "posting failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.cancel.cancelled() => return Err(error),
            }
            backoff = (backoff * 2).min(RETRY_MAX);
        }
    }
}

/// First and longest wait before a post is sent again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Whether a failed post may succeed if sent again: the connection failed,
/// or a proxy or the daemon said it cannot answer now.
fn may_pass(error: &ClientError) -> bool {
    match error {
        ClientError::Request { .. } => true,
        ClientError::Status { status, .. } => matches!(status, 502..=504),
        _ => false,
    }
}

/// Posts every event but Finals as it arrives, batching what is waiting;
/// returns the last Final, which is posted once the child has exited.
async fn forward(
    writer: &Poster,
    mut events: mpsc::Receiver<OutputEvent>,
) -> Result<Option<OutputEvent>, ClientError> {
    let mut last_final = None;
    while let Some(first) = events.recv().await {
        // What is waiting goes in one post, each event encoded once, until
        // the post holds `MAX_BATCH` events or `MAX_BATCH_BYTES` of them:
        // within what the daemon's body limit takes, whatever they weigh.
        let mut body = Vec::new();
        let mut taken = 0;
        let mut next = Some(first);
        while let Some(event) = next.take() {
            taken += 1;
            if matches!(event, OutputEvent::Final { .. }) {
                last_final = Some(event);
            } else {
                ndjson_line(&mut body, &event)?;
            }
            if taken < MAX_BATCH && body.len() < MAX_BATCH_BYTES {
                next = events.try_recv().ok();
            }
        }
        if !body.is_empty() {
            post_ndjson(writer, body).await?;
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

async fn post_events(writer: &Poster, events: &[OutputEvent]) -> Result<(), ClientError> {
    let mut body = Vec::new();
    for event in events {
        ndjson_line(&mut body, event)?;
    }
    post_ndjson(writer, body).await
}

/// `event` as one line of NDJSON at the end of `body`.
fn ndjson_line(body: &mut Vec<u8>, event: &OutputEvent) -> Result<(), ClientError> {
    serde_json::to_writer(&mut *body, event).map_err(|e| ClientError::Decode {
        url: "output".to_owned(),
        reason: e.to_string(),
    })?;
    body.push(b'\n');
    Ok(())
}

/// Posts NDJSON lines of output events.
async fn post_ndjson(writer: &Poster, body: Vec<u8>) -> Result<(), ClientError> {
    let body = bytes::Bytes::from(body);
    let path = "/v1/worker/output";
    writer
        .send(path, |client| {
            client
                .post(path)
                .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                .body(body.clone())
        })
        .await
}

/// Posts the Final; a Final already there (the child posted its own with
/// its handle) is left to decide.
async fn post_result(
    writer: &Poster,
    value: serde_json::Value,
    ok: bool,
) -> Result<(), ClientError> {
    let path = "/v1/worker/result";
    let body = json!({ "value": value, "ok": ok });
    match writer
        .send(path, |client| client.post(path).json(&body))
        .await
    {
        Ok(()) => Ok(()),
        Err(ClientError::Status { code, .. }) if code.as_deref() == Some("already_final") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs a worktree's setup command, posting its `setup` progress events as
/// they come.
///
/// # Errors
/// How it failed (`setup failed: exit 1`, `setup timed out after 300 s`).
async fn run_setup(
    writer: &Poster,
    runner: &ProcessRunner,
    setup: &SetupSpec,
    checkout: &Checkout,
) -> Result<(), String> {
    let env = runner.checkout_env(checkout);
    let (sender, mut received) = mpsc::channel(CHANNEL);
    let posting = async {
        while let Some(first) = received.recv().await {
            let mut batch = vec![first];
            while let Ok(more) = received.try_recv() {
                batch.push(more);
            }
            if let Err(e) = post_events(writer, &batch).await {
                tracing::debug!(error = %e, "setup output not posted");
            }
        }
    };
    let (ran, ()) = tokio::join!(setup::run(setup, &checkout.dir, &env, sender), posting);
    ran.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_types::output::ContentRef;

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
    fn only_failures_that_may_pass_are_posted_again() {
        let status = |status: u16, code: &str| ClientError::Status {
            url: "u".into(),
            status,
            code: Some(code.into()),
            message: String::new(),
        };
        let refused = ClientError::Request {
            url: "u".into(),
            reason: "connection refused".into(),
        };
        assert!(may_pass(&refused));
        for (code, name) in [(502, "bad_gateway"), (503, "unavailable"), (504, "timeout")] {
            assert!(may_pass(&status(code, name)), "{code}");
        }
        for (code, name) in [
            (409, "attempt_superseded"),
            (410, "task_terminal"),
            (401, "unauthorized"),
            (400, "bad_request"),
            (500, "internal"),
        ] {
            assert!(!may_pass(&status(code, name)), "{code}");
        }
    }

    #[test]
    fn an_ndjson_child_without_a_final_fails_the_attempt() {
        let Decided::Fail(reason) = decide(StreamMode::Ndjson, &exited(0), None) else {
            panic!("expected a failure");
        };
        assert!(reason.contains("without a final event"), "{reason}");
    }

    #[tokio::test]
    async fn a_backlog_of_large_events_goes_in_posts_of_bounded_size() {
        use std::sync::{Arc, Mutex};
        let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
        let seen = sizes.clone();
        let router = axum::Router::new().route(
            "/v1/worker/output",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                seen.lock().unwrap().push(body.len());
                axum::Json(json!({"seq": 1}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        let writer = Poster {
            client: ApiClient::new(&url, swarmd_client::Bearer::new("wh-x")).unwrap(),
            patience: Duration::from_secs(5),
            cancel: CancellationToken::new(),
        };
        // 64 events of 130 KiB waiting at once: 8.3 MiB in one post before.
        let (tx, rx) = mpsc::channel(CHANNEL);
        for _ in 0..MAX_BATCH {
            let note = Some("n".repeat(130 << 10));
            tx.send(OutputEvent::Progress {
                stage: "s".into(),
                note,
            })
            .await
            .unwrap();
        }
        drop(tx);
        assert!(forward(&writer, rx).await.unwrap().is_none());
        let sizes = sizes.lock().unwrap().clone();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(
            sizes.iter().all(|&n| n <= MAX_BATCH_BYTES + (140 << 10)),
            "{sizes:?}"
        );
    }
}
