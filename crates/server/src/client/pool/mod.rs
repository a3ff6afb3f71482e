//! `swarmd worker pool`: a worker pool on any machine (docs/operations.md, Worker pools). It
//! long-polls the daemon for attempts of one remote agent, runs up to
//! `concurrency` of them at once like local process agents (`run`), and
//! keeps one heartbeat in flight while it holds any: the heartbeat renews
//! their leases and answers as soon as one is cancelled or superseded, and
//! that attempt's process group is killed. A heartbeat in flight is
//! replaced whenever the set of held attempts changes, so a cancel of an
//! attempt just claimed is heard as fast.
//!
//! Transport errors (the daemon restarting) are retried with backoff, from
//! 100 ms doubling to 5 s; a refused token ends the pool. On the first
//! SIGTERM or SIGINT the pool stops claiming and lets its running attempts
//! finish for up to `drain`; then (or on a second signal) it kills the rest
//! and hands them back, reported as failed so the daemon retries them per
//! policy at once instead of waiting out their leases.

mod heartbeat;
pub(crate) mod run;
pub(crate) mod worktree;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use swarmd_spawner::process::HostEnv;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ApiClient, Bearer, ClientError};
use crate::http::pool::wire::{
    AttemptRef, ClaimAnswer, ClaimRequest, ClaimedAttempt, EndedAttempt, MAX_CLAIM, MAX_REASON,
};
use heartbeat::{flush_ended, heartbeat_loop};
use run::Ran;

/// How long one claim waits for an attempt.
const CLAIM_WAIT_MS: u64 = 25_000;
/// Longest a heartbeat waits; shorter when a lease is shorter (a third of it).
const MAX_HEARTBEAT_WAIT_MS: u64 = 10_000;
const MIN_HEARTBEAT_WAIT_MS: u64 = 100;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Slack for a long-poll's answer to travel back, on top of its wait.
const POLL_SLACK: Duration = Duration::from_secs(10);

/// What `swarmd worker pool` runs.
#[derive(Debug, Clone)]
pub(crate) struct PoolOptions {
    pub(crate) server: String,
    pub(crate) token: Bearer,
    pub(crate) agent: String,
    pub(crate) concurrency: u32,
    pub(crate) pool_id: String,
    pub(crate) command: run::Command,
    /// How long running attempts may finish after the first signal.
    pub(crate) drain: Duration,
}

/// Why the pool stopped on its own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the daemon refused the pool: {0}")]
    Refused(ClientError),
}

/// One attempt the pool runs.
#[derive(Debug)]
struct Running {
    cancel: CancellationToken,
    lease_ms: u64,
}

#[derive(Debug, Default)]
struct Shared {
    running: Mutex<HashMap<AttemptRef, Running>>,
    ended: Mutex<Vec<EndedAttempt>>,
    /// The held set or the ended list changed: the heartbeat starts over.
    changed: Notify,
    /// A slot came free: the claim loop claims again.
    freed: Notify,
}

impl Shared {
    fn running(&self) -> MutexGuard<'_, HashMap<AttemptRef, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ended(&self) -> MutexGuard<'_, Vec<EndedAttempt>> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn end(&self, at: AttemptRef, mut reason: String) {
        if reason.len() > MAX_REASON {
            let mut cut = MAX_REASON;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
        }
        self.ended().push(EndedAttempt {
            task_id: at.task_id,
            attempt: at.attempt,
            reason,
        });
    }
}

/// Runs the pool until `stop` (the first signal) and its drain; `kill` (a
/// second signal) cuts the drain short.
///
/// # Errors
/// `Refused` when the daemon refuses the token or the agent (401, 403,
/// 404); `Client` when the URL is invalid.
pub(crate) async fn run_pool(
    options: PoolOptions,
    host_env: HostEnv,
    stop: CancellationToken,
    kill: CancellationToken,
) -> Result<(), PoolError> {
    let client = ApiClient::new(&options.server, options.token.clone())?;
    // The attempts' writes go over connections of their own: a long-poll
    // dropped mid-flight (a heartbeat replaced) never holds one up.
    let writes = ApiClient::new(&options.server, options.token.clone())?;
    let options = Arc::new(options);
    let host_env = Arc::new(host_env);
    let shared = Arc::new(Shared::default());
    let attempts = TaskTracker::new();
    let beating = CancellationToken::new();
    let heart = tokio::spawn(heartbeat_loop(
        client.clone(),
        Arc::clone(&options),
        Arc::clone(&shared),
        beating.clone(),
    ));
    let loops = Loops {
        client: &client,
        writes: &writes,
        options: &options,
        host_env: &host_env,
        shared: &shared,
        attempts: &attempts,
    };
    let claimed = claim_loop(&loops, &stop).await;
    attempts.close();
    tokio::select! {
        () = attempts.wait() => {}
        () = tokio::time::sleep(options.drain) => {}
        () = kill.cancelled() => {}
    }
    hand_back(&shared);
    attempts.wait().await;
    // The last reports (failures, hand-backs) go out before the pool exits.
    let _ = flush_ended(&client, &options, &shared).await;
    beating.cancel();
    let _ = heart.await;
    claimed
}

/// Kills what still runs and reports it handed back.
fn hand_back(shared: &Shared) {
    let running: Vec<(AttemptRef, CancellationToken)> = shared
        .running()
        .iter()
        .map(|(at, r)| (*at, r.cancel.clone()))
        .collect();
    for (at, cancel) in running {
        shared.end(at, "handed back: the worker pool is stopping".to_owned());
        cancel.cancel();
    }
}

/// What the claim loop hands each attempt it starts.
struct Loops<'a> {
    /// Claims and heartbeats, with the pool's token.
    client: &'a ApiClient,
    /// The attempts' writes, each with its own handle.
    writes: &'a ApiClient,
    options: &'a Arc<PoolOptions>,
    host_env: &'a Arc<HostEnv>,
    shared: &'a Arc<Shared>,
    attempts: &'a TaskTracker,
}

/// Claims while there is a free slot, until `stop`.
async fn claim_loop(loops: &Loops<'_>, stop: &CancellationToken) -> Result<(), PoolError> {
    let Loops {
        client,
        options,
        shared,
        ..
    } = *loops;
    let mut backoff = FIRST_BACKOFF;
    while !stop.is_cancelled() {
        let held = u32::try_from(shared.running().len()).unwrap_or(u32::MAX);
        let free = options.concurrency.saturating_sub(held).min(MAX_CLAIM);
        if free == 0 {
            tokio::select! {
                () = shared.freed.notified() => {}
                () = stop.cancelled() => break,
            }
            continue;
        }
        let answer = tokio::select! {
            answer = claim(client, options, free) => answer,
            () = stop.cancelled() => break,
        };
        match answer {
            Ok(claimed) => {
                backoff = FIRST_BACKOFF;
                for attempt in claimed {
                    start(loops, attempt);
                }
            }
            Err(error) if refused(&error) => return Err(PoolError::Refused(error)),
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = backoff.as_millis(), "claim failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => break,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    Ok(())
}

fn refused(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Status {
            status: 401 | 403 | 404,
            ..
        }
    )
}

async fn claim(
    client: &ApiClient,
    options: &PoolOptions,
    max: u32,
) -> Result<Vec<ClaimedAttempt>, ClientError> {
    let path = "/v1/pool/claim";
    let url = client.url(path);
    let body = ClaimRequest {
        pool: options.pool_id.clone(),
        agent: options.agent.clone(),
        max,
        wait_ms: CLAIM_WAIT_MS,
    };
    let request = client
        .post(path)
        .json(&body)
        .timeout(Duration::from_millis(CLAIM_WAIT_MS) + POLL_SLACK);
    let answer: ClaimAnswer = decode(&url, client.send_json(request, &url).await?)?;
    Ok(answer.attempts)
}

fn decode<T: serde::de::DeserializeOwned>(
    url: &str,
    value: serde_json::Value,
) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Decode {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

/// Runs one claimed attempt on its own tokio task.
fn start(loops: &Loops<'_>, attempt: ClaimedAttempt) {
    let Loops {
        writes,
        options,
        host_env,
        shared,
        attempts,
        ..
    } = *loops;
    let at = AttemptRef {
        task_id: attempt.task_id,
        attempt: attempt.attempt,
    };
    let cancel = CancellationToken::new();
    shared.running().insert(
        at,
        Running {
            cancel: cancel.clone(),
            lease_ms: attempt.lease_ms,
        },
    );
    shared.changed.notify_one();
    let (client, options, host_env, shared) = (
        writes.clone(),
        Arc::clone(options),
        Arc::clone(host_env),
        Arc::clone(shared),
    );
    attempts.spawn(async move {
        tracing::debug!(task_id = %at.task_id, attempt = at.attempt, "attempt claimed");
        let ran = run::run(&client, &options.command, &host_env, &attempt, cancel).await;
        if let Ran::Failed(reason) = ran {
            tracing::info!(task_id = %at.task_id, attempt = at.attempt, %reason, "attempt failed");
            shared.end(at, reason);
        }
        shared.running().remove(&at);
        shared.changed.notify_one();
        shared.freed.notify_one();
    });
}
