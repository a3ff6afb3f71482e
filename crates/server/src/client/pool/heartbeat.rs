//! A pool's heartbeat loop: one `POST /v1/pool/heartbeat` in flight while the pool holds
//! attempts or has ends to report, replaced whenever the held set changes,
//! and the attempts it answers `gone` stopped.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    FIRST_BACKOFF, MAX_BACKOFF, MAX_HEARTBEAT_WAIT_MS, MIN_HEARTBEAT_WAIT_MS, POLL_SLACK,
    PoolOptions, Shared, decode,
};
use crate::client::{ApiClient, ClientError};
use crate::http::pool::wire::{AttemptRef, EndedAttempt, HeartbeatAnswer, HeartbeatRequest};

/// Keeps one heartbeat in flight while the pool holds attempts or has
/// ends to report, until `beating` is cancelled.
pub(super) async fn heartbeat_loop(
    client: ApiClient,
    options: Arc<PoolOptions>,
    shared: Arc<Shared>,
    beating: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    while !beating.is_cancelled() {
        let (held, wait_ms) = held(&shared);
        let ended = std::mem::take(&mut *shared.ended());
        if held.is_empty() && ended.is_empty() {
            tokio::select! {
                () = shared.changed.notified() => {}
                () = beating.cancelled() => break,
            }
            continue;
        }
        let beat = heartbeat(&client, &options, held, ended.clone(), wait_ms);
        let answer = tokio::select! {
            answer = beat => answer,
            () = shared.changed.notified() => {
                // The held set changed: ask again with the new one.
                shared.ended().extend(ended);
                continue;
            }
            () = beating.cancelled() => {
                shared.ended().extend(ended);
                break;
            }
        };
        match answer {
            Ok(answer) => {
                backoff = FIRST_BACKOFF;
                let running = shared.running();
                for gone in answer.gone {
                    if let Some(r) = running.get(&gone) {
                        tracing::info!(task_id = %gone.task_id, attempt = gone.attempt, "attempt gone: stopping it");
                        r.cancel.cancel();
                    }
                }
            }
            Err(error) => {
                shared.ended().extend(ended);
                tracing::warn!(%error, retry_in_ms = backoff.as_millis(), "heartbeat failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = beating.cancelled() => break,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// The held attempts and how long a heartbeat may wait: a third of the
/// shortest lease, within bounds.
fn held(shared: &Shared) -> (Vec<AttemptRef>, u64) {
    let running = shared.running();
    let shortest = running
        .values()
        .map(|r| r.lease_ms)
        .min()
        .unwrap_or(MAX_HEARTBEAT_WAIT_MS * 3);
    let wait = (shortest / 3).clamp(MIN_HEARTBEAT_WAIT_MS, MAX_HEARTBEAT_WAIT_MS);
    (running.keys().copied().collect(), wait)
}

async fn heartbeat(
    client: &ApiClient,
    options: &PoolOptions,
    held: Vec<AttemptRef>,
    ended: Vec<EndedAttempt>,
    wait_ms: u64,
) -> Result<HeartbeatAnswer, ClientError> {
    let path = "/v1/pool/heartbeat";
    let url = client.url(path);
    let body = HeartbeatRequest {
        pool: options.pool_id.clone(),
        held,
        ended,
        wait_ms,
    };
    let request = client
        .post(path)
        .json(&body)
        .timeout(Duration::from_millis(wait_ms) + POLL_SLACK);
    decode(&url, client.send_json(request, &url).await?)
}

/// Sends what is left to report, with nothing held and no wait.
pub(super) async fn flush_ended(
    client: &ApiClient,
    options: &PoolOptions,
    shared: &Shared,
) -> Result<(), ClientError> {
    let ended = std::mem::take(&mut *shared.ended());
    if ended.is_empty() {
        return Ok(());
    }
    heartbeat(client, options, Vec::new(), ended, 0)
        .await
        .map(drop)
}
