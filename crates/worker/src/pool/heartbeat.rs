//! A pool's heartbeat loop for one daemon: one `POST /v1/pool/heartbeat` in flight while the
//! pool holds attempts claimed from that daemon or has ends to report to
//! it, replaced whenever that held set changes, and the attempts it
//! answers `gone` stopped. An attempt whose lease ran out with no heartbeat
//! answered (its daemon down or out of reach) is stopped too: the daemon,
//! or the node that took its task over, has retried it by then.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    Daemon, FIRST_BACKOFF, MAX_BACKOFF, MAX_HEARTBEAT_WAIT_MS, MIN_HEARTBEAT_WAIT_MS, POLL_SLACK,
    PoolOptions, Shared, decode,
};
use swarmd_client::ClientError;
use swarmd_client::wire::{AttemptRef, EndedAttempt, HeartbeatAnswer, HeartbeatRequest};

/// Keeps one heartbeat in flight to `daemon` while the pool holds its
/// attempts or has ends to report to it, until `beating` is cancelled.
pub(super) async fn heartbeat_loop(
    daemon: Daemon,
    options: Arc<PoolOptions>,
    shared: Arc<Shared>,
    beating: CancellationToken,
) {
    let link = &shared.links[daemon.link];
    let mut backoff = FIRST_BACKOFF;
    while !beating.is_cancelled() {
        let (held, wait_ms) = held(&shared, daemon.link);
        let ended = std::mem::take(&mut *link.ended());
        if held.is_empty() && ended.is_empty() {
            tokio::select! {
                () = link.changed.notified() => {}
                () = beating.cancelled() => break,
            }
            continue;
        }
        let used = daemon.route_in_use();
        let beat = heartbeat(&daemon, &options, held.clone(), ended.clone(), wait_ms);
        let answer = tokio::select! {
            answer = beat => answer,
            () = link.changed.notified() => {
                // The held set changed: ask again with the new one.
                link.ended().extend(ended);
                continue;
            }
            () = beating.cancelled() => {
                link.ended().extend(ended);
                break;
            }
        };
        match answer {
            Ok(answer) => {
                backoff = FIRST_BACKOFF;
                let now = Instant::now();
                let mut running = shared.running();
                for at in &held {
                    if let Some(r) = running.get_mut(at) {
                        r.renewed = now;
                    }
                }
                for gone in answer.gone {
                    if let Some(r) = running.get(&gone).filter(|r| r.link == daemon.link) {
                        tracing::info!(task_id = %gone.task_id, attempt = gone.attempt, "attempt gone: stopping it");
                        r.cancel.cancel();
                    }
                }
            }
            Err(error) => {
                link.ended().extend(ended);
                stop_lapsed(&shared, daemon.link);
                tracing::warn!(%error, server = %daemon.name(), retry_in_ms = backoff.as_millis(), "heartbeat failed");
                daemon.next_route(used);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = beating.cancelled() => break,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Stops the attempts of daemon `link` whose lease ran out since their
/// last renewal: they are no longer theirs to run.
fn stop_lapsed(shared: &Shared, link: usize) {
    let now = Instant::now();
    for (at, r) in shared.running().iter().filter(|(_, r)| r.link == link) {
        let lease = Duration::from_millis(r.lease_ms);
        if now.saturating_duration_since(r.renewed) > lease && !r.cancel.is_cancelled() {
            tracing::warn!(task_id = %at.task_id, attempt = at.attempt, "lease ran out with no heartbeat answered: stopping it");
            r.cancel.cancel();
        }
    }
}

/// The attempts held from daemon `link` and how long a heartbeat may wait:
/// a third of the shortest lease, within bounds.
fn held(shared: &Shared, link: usize) -> (Vec<AttemptRef>, u64) {
    let running = shared.running();
    let mine = || running.iter().filter(|(_, r)| r.link == link);
    let shortest = mine()
        .map(|(_, r)| r.lease_ms)
        .min()
        .unwrap_or(MAX_HEARTBEAT_WAIT_MS * 3);
    let wait = (shortest / 3).clamp(MIN_HEARTBEAT_WAIT_MS, MAX_HEARTBEAT_WAIT_MS);
    (mine().map(|(at, _)| *at).collect(), wait)
}

async fn heartbeat(
    daemon: &Daemon,
    options: &PoolOptions,
    held: Vec<AttemptRef>,
    ended: Vec<EndedAttempt>,
    wait_ms: u64,
) -> Result<HeartbeatAnswer, ClientError> {
    let path = "/v1/pool/heartbeat";
    let client = daemon.client();
    let url = client.url(path);
    let body = HeartbeatRequest {
        pool: options.pool_id.clone(),
        held,
        ended,
        wait_ms,
    };
    let request = daemon
        .post(path)
        .json(&body)
        .timeout(Duration::from_millis(wait_ms) + POLL_SLACK);
    decode(&url, client.send_json(request, &url).await?)
}

/// Sends what is left to report to `daemon`, with nothing held and no wait.
pub(super) async fn flush_ended(
    daemon: &Daemon,
    options: &PoolOptions,
    shared: &Shared,
) -> Result<(), ClientError> {
    let link = &shared.links[daemon.link];
    let ended = std::mem::take(&mut *link.ended());
    if ended.is_empty() {
        return Ok(());
    }
    heartbeat(daemon, options, Vec::new(), ended, 0)
        .await
        .map(drop)
}
