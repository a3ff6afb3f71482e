//! A pool's claim loops, one per daemon: each long-polls `POST /v1/pool/claim` while the pool
//! has room, and runs every attempt it is handed on a tokio task of its own,
//! which waits for one of the pool's slots before it starts the child. The
//! slot is free again when the attempt ends, or [`SLOT_AFTER_EXIT`] after
//! its child exited if what the child left is still being posted (its
//! node out of reach): the posts go on, counted against no slot.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use swarmd_spawner::process::HostEnv;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::run::{self, Ran};
use super::{
    Daemon, FIRST_BACKOFF, MAX_BACKOFF, POLL_SLACK, Phase, PoolError, PoolOptions, Running, Shared,
    decode,
};
use swarmd_client::ClientError;
use swarmd_client::wire::{AttemptRef, ClaimAnswer, ClaimRequest, ClaimedAttempt, MAX_CLAIM};

/// How long one claim waits for an attempt.
const CLAIM_WAIT_MS: u64 = 25_000;
/// Longest an attempt keeps its slot after its child exited, while what
/// the child left is posted.
pub(super) const SLOT_AFTER_EXIT: Duration = Duration::from_secs(2);

/// What every claim loop shares, and hands each attempt it starts.
pub(super) struct Pool<'a> {
    pub(super) options: &'a Arc<PoolOptions>,
    pub(super) host_env: &'a Arc<HostEnv>,
    pub(super) shared: &'a Arc<Shared>,
    pub(super) attempts: &'a TaskTracker,
}

/// Claims from every daemon until `stop`, and from each daemon `joined`
/// hands over later (started with `beat`, its heartbeat loop); a daemon
/// given that refuses the pool stops every loop, one learned from another
/// stops its own, and when every loop stopped on its own the pool ends
/// with `AllRefused`. Returns how it ended and every daemon claimed from.
pub(super) async fn claim_all(
    pool: &Pool<'_>,
    daemons: Vec<Daemon>,
    mut joined: mpsc::UnboundedReceiver<Daemon>,
    beat: &dyn Fn(&Daemon),
    stop: &CancellationToken,
) -> (Result<(), PoolError>, Vec<Daemon>) {
    let loops = stop.child_token();
    let run = |daemon: Daemon| {
        let loops = &loops;
        async move {
            let ended = claim_loop(pool, &daemon, loops).await;
            if ended.is_err() {
                loops.cancel();
            }
            ended
        }
    };
    let mut all = daemons.clone();
    let mut running: FuturesUnordered<_> = daemons.into_iter().map(run).collect();
    let mut outcome = Ok(());
    let mut open = true;
    loop {
        tokio::select! {
            daemon = joined.recv(), if open && !loops.is_cancelled() => match daemon {
                Some(daemon) => {
                    beat(&daemon);
                    all.push(daemon.clone());
                    running.push(run(daemon));
                }
                None => open = false,
            },
            ended = running.next() => match ended {
                Some(Err(error)) => {
                    if outcome.is_ok() {
                        outcome = Err(error);
                    }
                }
                Some(Ok(())) => {}
                // Every loop ended: `stop`, a refusal that stopped them all,
                // or each node's own refusal (every node learned).
                None => {
                    if outcome.is_ok() && !loops.is_cancelled() {
                        outcome = Err(PoolError::AllRefused);
                    }
                    break;
                }
            },
        }
    }
    (outcome, all)
}

/// Claims from `daemon` while the pool has room, until `stop`.
async fn claim_loop(
    pool: &Pool<'_>,
    daemon: &Daemon,
    stop: &CancellationToken,
) -> Result<(), PoolError> {
    let shared = pool.shared;
    let mut backoff = FIRST_BACKOFF;
    let mut freed = shared.freed.subscribe();
    while !stop.is_cancelled() {
        freed.mark_unchanged();
        let Some(max) = ask(shared, pool.options.concurrency) else {
            tokio::select! {
                _ = freed.changed() => {}
                () = stop.cancelled() => break,
            }
            continue;
        };
        let used = daemon.route_in_use();
        let answer = tokio::select! {
            answer = claim(daemon, pool.options, max) => answer,
            () = stop.cancelled() => Ok(Vec::new()),
        };
        let answer = answer.map(|claimed| {
            for attempt in claimed {
                start(pool, daemon, attempt);
            }
        });
        // Released once what came is counted as held, so no other loop
        // sees the slots free in between.
        *shared.asked() -= max;
        match answer {
            Ok(_) => backoff = FIRST_BACKOFF,
            // A node learned from another may run other agents: its
            // refusal ends its own loop, not the pool.
            Err(error) if refused(&error) && daemon.discovered => {
                tracing::warn!(%error, server = %daemon.name(), "a node of the cluster refused the pool; not claiming from it");
                return Ok(());
            }
            Err(error) if refused(&error) => return Err(PoolError::Refused(error)),
            Err(error) => {
                tracing::warn!(%error, server = %daemon.name(), retry_in_ms = backoff.as_millis(), "claim failed");
                daemon.next_route(used);
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

/// How many attempts one claim asks for, counted as asked until it
/// answers: the free slots no other claim asks for, and at least one
/// while any slot is free, so a loop never waits out another daemon's
/// long-poll. `None` when every slot is held or waited for (an attempt
/// only posting holds none).
fn ask(shared: &Shared, concurrency: u32) -> Option<u32> {
    let held = u32::try_from(shared.in_slots()).unwrap_or(u32::MAX);
    let free = concurrency.checked_sub(held).filter(|f| *f > 0)?;
    let mut asked = shared.asked();
    let max = free.saturating_sub(*asked).clamp(1, MAX_CLAIM);
    *asked += max;
    Some(max)
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
    daemon: &Daemon,
    options: &PoolOptions,
    max: u32,
) -> Result<Vec<ClaimedAttempt>, ClientError> {
    let path = "/v1/pool/claim";
    let client = daemon.client();
    let url = client.url(path);
    let body = ClaimRequest {
        pool: options.pool_id.clone(),
        agent: options.agent.clone(),
        max,
        wait_ms: CLAIM_WAIT_MS,
    };
    let request = daemon
        .post(path)
        .json(&body)
        .timeout(Duration::from_millis(CLAIM_WAIT_MS) + POLL_SLACK);
    let answer: ClaimAnswer = decode(&url, client.send_json(request, &url).await?)?;
    Ok(answer.attempts)
}

/// Holds one claimed attempt and runs it on its own tokio task once a slot
/// is free; a cancel while it waits ends it unstarted.
fn start(pool: &Pool<'_>, daemon: &Daemon, attempt: ClaimedAttempt) {
    let at = AttemptRef {
        task_id: attempt.task_id,
        attempt: attempt.attempt,
    };
    let link = daemon.link;
    let cancel = CancellationToken::new();
    pool.shared.running().insert(
        at,
        Running {
            cancel: cancel.clone(),
            lease_ms: attempt.lease_ms,
            link,
            renewed: tokio::time::Instant::now(),
            phase: Phase::Waiting,
        },
    );
    pool.shared.links[link].changed.notify_one();
    let (client, options, host_env, shared) = (
        daemon.writes(),
        Arc::clone(pool.options),
        Arc::clone(pool.host_env),
        Arc::clone(pool.shared),
    );
    // Any node of the cluster takes the attempt's writes and forwards
    // them to its own; a daemon outside one never sees another's handles.
    let relays = if daemon.cluster {
        pool.shared.relays.clone()
    } else {
        run::Relays::default()
    };
    pool.attempts.spawn(async move {
        tracing::debug!(task_id = %at.task_id, attempt = at.attempt, "attempt claimed");
        let slot = tokio::select! {
            slot = Arc::clone(&shared.slots).acquire_owned() => slot.ok(),
            () = cancel.cancelled() => None,
        };
        let ran = match slot {
            Some(slot) => {
                shared.set_phase(at, Phase::Child);
                let (exited, exit) = oneshot::channel();
                let command = &options.command;
                let run = run::run(
                    &client, &relays, command, &host_env, &attempt, cancel, exited,
                );
                in_slot(run, slot, exit, &shared, at).await
            }
            None => Ran::Cancelled,
        };
        if let Ran::Failed(reason) = ran {
            tracing::info!(task_id = %at.task_id, attempt = at.attempt, %reason, "attempt failed");
            shared.end(link, at, reason);
        }
        shared.forget(link, at);
    });
}

/// Runs attempt `at` (`run`) in `slot`, which is freed when it ends, or
/// [`SLOT_AFTER_EXIT`] after its child exited (`exit`) if it has not
/// ended by then: a post its node does not answer never keeps the slot
/// from another attempt.
async fn in_slot(
    run: impl Future<Output = Ran>,
    slot: OwnedSemaphorePermit,
    exit: oneshot::Receiver<()>,
    shared: &Shared,
    at: AttemptRef,
) -> Ran {
    tokio::pin!(run);
    let posting_long = async {
        if exit.await.is_err() {
            // It ended before its child exited, or never started one.
            return std::future::pending().await;
        }
        shared.set_phase(at, Phase::Exited);
        tokio::time::sleep(SLOT_AFTER_EXIT).await;
    };
    tokio::select! {
        ran = &mut run => return ran,
        () = posting_long => {}
    }
    drop(slot);
    tracing::debug!(task_id = %at.task_id, attempt = at.attempt, "still posting after the child exited: its slot is free");
    shared.set_phase(at, Phase::Posting);
    run.await
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_types::ids::TaskId;

    /// A pool of one slot holding one attempt whose child runs, and that
    /// slot.
    async fn one_running() -> (Arc<Shared>, AttemptRef, OwnedSemaphorePermit) {
        let shared = Arc::new(Shared::new(1, 1));
        let at = AttemptRef {
            task_id: TaskId::new(),
            attempt: 1,
        };
        shared.running().insert(
            at,
            Running {
                cancel: CancellationToken::new(),
                lease_ms: 600_000,
                link: 0,
                renewed: tokio::time::Instant::now(),
                phase: Phase::Child,
            },
        );
        let slot = Arc::clone(&shared.slots).acquire_owned().await.unwrap();
        (shared, at, slot)
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_is_free_soon_after_the_child_exited_while_its_result_is_still_posted() {
        let (shared, at, slot) = one_running().await;
        let (exited, exit) = oneshot::channel();
        let (posted, posting) = oneshot::channel::<()>();
        // The child exits at once; its Final waits on a node out of reach.
        let run = async move {
            exited.send(()).unwrap();
            let _ = posting.await;
            Ran::Posted
        };
        let held = Arc::clone(&shared);
        let task = tokio::spawn(async move { in_slot(run, slot, exit, &held, at).await });
        tokio::time::sleep(SLOT_AFTER_EXIT / 2).await;
        assert_eq!(shared.slots.available_permits(), 0, "within the grace");
        assert_eq!(ask(&shared, 1), None);
        tokio::time::sleep(SLOT_AFTER_EXIT).await;
        assert_eq!(shared.slots.available_permits(), 1, "past the grace");
        assert_eq!(shared.running()[&at].phase, Phase::Posting);
        assert_eq!(ask(&shared, 1), Some(1), "a claim may fill the slot");
        posted.send(()).unwrap();
        assert_eq!(task.await.unwrap(), Ran::Posted);
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_child_keeps_its_slot_and_an_ended_attempt_frees_it_at_once() {
        let (shared, at, slot) = one_running().await;
        let (_exited, exit) = oneshot::channel::<()>();
        let (done, ended) = oneshot::channel::<()>();
        let run = async move {
            let _ = ended.await;
            Ran::Posted
        };
        let held = Arc::clone(&shared);
        let task = tokio::spawn(async move { in_slot(run, slot, exit, &held, at).await });
        tokio::time::sleep(SLOT_AFTER_EXIT * 10).await;
        assert_eq!(shared.slots.available_permits(), 0);
        assert_eq!(shared.running()[&at].phase, Phase::Child);
        done.send(()).unwrap();
        assert_eq!(task.await.unwrap(), Ran::Posted);
        assert_eq!(shared.slots.available_permits(), 1);
    }
}
