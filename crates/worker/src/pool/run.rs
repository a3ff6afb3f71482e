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
//! attempt is not cancelled. On a cluster each round of it goes to the
//! attempt's own node first, then through each other node the pool knows
//! (`Relays`): any node takes a worker's writes and forwards them, by the
//! handle, to the node that holds the attempt, so a node the pool cannot
//! reach but its peers can still gets them, and a survivor that took a
//! dead node's task over answers at once that the attempt is over
//! (`409`, `410`, `404`), which ends the posting. A relay's other answers
//! (`401` from one that does not know the handle) pass the turn on. A
//! batch of events whose connection broke after the daemon read it may so
//! be stored twice; a Final sent again finds itself already there (`409
//! already_final`), which counts as posted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use swarmd_git::worktree::{Checkout, SetupSpec, setup};
use swarmd_spawner::process::{
    EnvVar, Exited, HostEnv, ProcessError, ProcessRunner, ProcessSpec, RunVars, StreamMode,
    Supervisor, parse_stdin, parse_stream,
};
use swarmd_types::output::OutputEvent;
use swarmd_types::output::content_value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::discover::same_url;
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
/// `--worktree-repo`, its writes sent to `daemon` (and through `relays`
/// when it cannot be reached); `cancel` stops it (process-group kill), and
/// `exited` is told when its child has exited.
pub(super) async fn run(
    daemon: &ApiClient,
    relays: &Relays,
    command: &Command,
    host_env: &HostEnv,
    attempt: &ClaimedAttempt,
    cancel: CancellationToken,
    exited: oneshot::Sender<()>,
) -> Ran {
    let runner = match runner(command, host_env, attempt) {
        Ok(runner) => runner,
        Err(reason) => return Ran::Failed(reason),
    };
    let handle = Bearer::new(&attempt.handle);
    let writer = Poster {
        client: daemon.with_bearer(handle.clone()),
        relays: relays.clone(),
        handle,
        patience: Duration::from_millis(attempt.lease_ms),
        cancel: cancel.clone(),
    };
    let Some(worktree) = &command.worktree else {
        return run_child(&writer, &runner, attempt, cancel, None, None, exited)
            .await
            .0;
    };
    let (checkout, fell_back) = match worktree.open(attempt).await {
        Ok(opened) => opened,
        Err(reason) => return Ran::Failed(reason),
    };
    let (ran, passed) = run_child(
        &writer,
        &runner,
        attempt,
        cancel,
        Some((worktree, &checkout)),
        fell_back,
        exited,
    )
    .await;
    worktree.release(&checkout, passed).await;
    ran
}

/// Runs the child (in `checkout` when given) and posts what it emits with
/// `writer`, after a `worktree` progress note when a continuation's
/// worktree fell back to the base; tells `exited` once the child has
/// exited. How it ended, and whether it passed (for the worktree's keep
/// rule).
async fn run_child(
    writer: &Poster,
    runner: &ProcessRunner,
    attempt: &ClaimedAttempt,
    cancel: CancellationToken,
    checkout: Option<(&PoolWorktree, &Checkout)>,
    fell_back: Option<String>,
    exited: oneshot::Sender<()>,
) -> (Ran, bool) {
    let vars = RunVars {
        base_url: writer.client.base_url().to_owned(),
        task_id: attempt.task_id.to_string(),
        attempt: attempt.attempt,
        agent: attempt.agent.clone(),
        worker_handle: attempt.handle.clone(),
        prompt: attempt.prompt.clone(),
        continued_from: attempt.continued_from.clone(),
        resume_session: attempt.resume_session.clone(),
    };
    if let Some(note) = fell_back {
        let note = OutputEvent::Progress {
            stage: "worktree".to_owned(),
            note: Some(note),
        };
        if let Err(e) = post_events(writer, &[note]).await {
            tracing::debug!(error = %e, "worktree note not posted");
        }
    }
    // The setup command runs in the new worktree before the child; its
    // failure fails the attempt, the child never starts.
    if let Some((worktree, checkout)) = checkout
        && let Some(setup) = worktree.setup()
        && let Err(reason) = run_setup(writer, runner, setup, checkout).await
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
    let waited = async {
        let ran = child.wait(events).await;
        // Nobody listens once the attempt gave its slot back.
        let _ = exited.send(());
        ran
    };
    let (ran, forwarded) = tokio::join!(waited, forward(writer, received));
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
                if let Err(e) = post_events(writer, &[note]).await {
                    tracing::debug!(error = %e, "worktree refusal not posted");
                }
                return (Ran::Failed(refused), false);
            }
        };
        if let Some(artifact) = artifact
            && let Err(e) = post_events(writer, &[artifact]).await
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
                && let Err(e) = post_events(writer, &[note]).await
            {
                return (
                    Ran::Failed(format!("posting the exit note failed: {e}")),
                    false,
                );
            }
            match post_result(writer, value, ok).await {
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

/// The write clients of the cluster's nodes the pool knows, each sending
/// the pool's token until `others` gives it an attempt's handle. Any node
/// takes a worker's writes and forwards them, by the handle, to the node
/// that holds the attempt (docs/decisions.md, Worker pools on a cluster).
#[derive(Debug, Clone, Default)]
pub(super) struct Relays(Arc<Mutex<Vec<ApiClient>>>);

impl Relays {
    /// Adds `client`, unless one at its URL is known.
    pub(super) fn add(&self, client: &ApiClient) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !known
            .iter()
            .any(|k| same_url(k.base_url(), client.base_url()))
        {
            known.push(client.clone());
        }
    }

    /// Every known node but the one at `own`'s URL, sending `handle`.
    fn others(&self, own: &ApiClient, handle: &Bearer) -> Vec<ApiClient> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known
            .iter()
            .filter(|k| !same_url(k.base_url(), own.base_url()))
            .map(|k| k.with_bearer(handle.clone()))
            .collect()
    }
}

/// Where an attempt's posts go: the daemon it was claimed from, with the
/// attempt's own handle, and through the other nodes of its cluster when
/// that one cannot be reached.
struct Poster {
    client: ApiClient,
    relays: Relays,
    /// The attempt's handle, which the relays send.
    handle: Bearer,
    /// How long a post that may pass is sent again.
    patience: Duration,
    /// The attempt's cancel: a cancelled attempt's posts are not retried.
    cancel: CancellationToken,
}

impl Poster {
    /// Sends the request `build` makes until it succeeds, fails for good,
    /// the patience runs out or the attempt is cancelled. Each round tries
    /// the attempt's own node, then, while that fails in a way that may
    /// pass, each relay in turn; a relay's answer ends the posting only
    /// when it is a success or says that the attempt is over.
    async fn send(
        &self,
        path: &str,
        build: impl Fn(&ApiClient) -> reqwest::RequestBuilder,
    ) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut backoff = RETRY_FIRST;
        loop {
            let error = match self
                .client
                .send(build(&self.client), &self.client.url(path))
                .await
            {
                Ok(_) => return Ok(()),
                Err(error) if !may_pass(&error) => return Err(error),
                Err(error) => error,
            };
            for relay in self.relays.others(&self.client, &self.handle) {
                if self.cancel.is_cancelled() {
                    return Err(error);
                }
                let url = relay.url(path);
                match relay.send(build(&relay), &url).await {
                    Ok(_) => {
                        tracing::debug!(via = %relay.base_url(), "posted through another node of the cluster");
                        return Ok(());
                    }
                    Err(refused) if attempt_over(&refused) => return Err(refused),
                    Err(failed) => {
                        tracing::debug!(error = %failed, "posting through another node failed");
                    }
                }
            }
            let wait = backoff.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() || self.cancel.is_cancelled() {
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

/// Whether a relay's refusal says that the attempt is over (superseded,
/// already decided, its task ended or gone): the node holding it would
/// say no more. A relay's other refusals (it does not know the handle,
/// `401`) pass the turn on.
fn attempt_over(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Status {
            status: 404 | 409 | 410,
            ..
        }
    )
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

    /// A poster of attempt `wh-x` to `url`, relayed through `relays`.
    fn poster(url: &str, relays: Relays, patience: Duration) -> Poster {
        let handle = Bearer::new("wh-x");
        Poster {
            client: ApiClient::new(url, handle.clone()).unwrap(),
            relays,
            handle,
            patience,
            cancel: CancellationToken::new(),
        }
    }

    /// A daemon's result route answering `statuses` in turn (the last one
    /// ever after); its URL and the bearers it was sent.
    async fn result_route(statuses: &[u16]) -> (String, Arc<Mutex<Vec<String>>>) {
        let statuses = statuses.to_vec();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let bearers = Arc::clone(&seen);
        let router = axum::Router::new().route(
            "/v1/worker/result",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let bearer = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let mut seen = bearers.lock().unwrap();
                seen.push(bearer);
                let status = statuses[(seen.len() - 1).min(statuses.len() - 1)];
                let code = match status {
                    401 => "unauthorized",
                    409 => "attempt_superseded",
                    410 => "task_terminal",
                    _ => "unavailable",
                };
                let status = axum::http::StatusCode::from_u16(status).unwrap();
                async move { (status, axum::Json(json!({"error": "e", "code": code}))) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (url, seen)
    }

    /// A URL nothing listens at: its connections are refused.
    async fn dead_url() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    }

    /// Relays of the nodes at `urls`, sending the pool's token.
    fn relays(urls: &[&str]) -> Relays {
        let relays = Relays::default();
        for url in urls {
            relays.add(&ApiClient::new(url, Bearer::new("swp-pool")).unwrap());
        }
        relays
    }

    #[tokio::test]
    async fn a_result_its_node_cannot_take_goes_through_another_node_with_its_handle() {
        let own = dead_url().await;
        let (relay, seen) = result_route(&[200]).await;
        // The own node is known as a relay too, under another spelling:
        // it is tried once a round.
        let writer = poster(
            &own,
            relays(&[&format!("{own}/"), &relay]),
            Duration::from_secs(30),
        );
        post_result(&writer, json!("r"), true).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), ["Bearer wh-x"]);
    }

    #[tokio::test]
    async fn a_relay_saying_the_attempt_is_over_ends_the_posting_at_once() {
        for status in [409, 410, 404] {
            let own = dead_url().await;
            let (relay, seen) = result_route(&[status]).await;
            let writer = poster(&own, relays(&[&relay]), Duration::from_secs(60));
            let posted = tokio::time::timeout(
                Duration::from_secs(10),
                post_result(&writer, json!("r"), true),
            )
            .await
            .expect("the posting ended at once");
            assert!(
                matches!(posted, Err(ClientError::Status { status: s, .. }) if s == status),
                "{status}: {posted:?}"
            );
            assert_eq!(seen.lock().unwrap().len(), 1);
        }
    }

    #[tokio::test]
    async fn a_relay_that_does_not_know_the_handle_passes_the_turn_back() {
        // The own node restarts (503 twice); the relay is no node of its
        // cluster and refuses the handle.
        let (own, own_seen) = result_route(&[503, 503, 200]).await;
        let (relay, relay_seen) = result_route(&[401]).await;
        let writer = poster(&own, relays(&[&relay]), Duration::from_secs(30));
        post_result(&writer, json!("r"), true).await.unwrap();
        assert_eq!(own_seen.lock().unwrap().len(), 3);
        assert_eq!(relay_seen.lock().unwrap().len(), 2);
        // Outside a cluster, nothing goes anywhere else.
        let (own, _) = result_route(&[503]).await;
        let writer = poster(&own, Relays::default(), Duration::from_millis(400));
        let failed = post_result(&writer, json!("r"), true).await;
        assert!(matches!(
            failed,
            Err(ClientError::Status { status: 503, .. })
        ));
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
        let writer = poster(&url, Relays::default(), Duration::from_secs(5));
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
