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
    Phase, PoolOptions, Shared, decode,
};
use swarmd_client::ClientError;
use swarmd_client::wire::{AttemptRef, EndedAttempt, HeartbeatAnswer, HeartbeatRequest};

/// Keeps one heartbeat in flight to `daemon` while the pool holds its
/// attempts or has ends to report to it, until `beating` is cancelled.
///
/// An attempt the pool stopped (answered `gone`, its lease lapsed, handed
/// back) is held no more: it is not named again, so "gone" is heard once.
/// A heartbeat is sent again at once only when what it carries changed;
/// one answered before its wait ran out with nothing to act on is not
/// sent again before that wait has passed. Stopped, the loop gives back
/// the ends a heartbeat in flight carried, for `flush_ended`.
pub(super) async fn heartbeat_loop(
    daemon: Daemon,
    options: Arc<PoolOptions>,
    shared: Arc<Shared>,
    beating: CancellationToken,
) {
    let link = &shared.links[daemon.link];
    let mut backoff = FIRST_BACKOFF;
    // The held set of the last heartbeat answered early, and when its
    // wait would have run out.
    let mut early: Option<(Vec<AttemptRef>, Instant)> = None;
    'beating: while !beating.is_cancelled() {
        let (held, wait_ms) = held_set(&shared, daemon.link);
        let ended = std::mem::take(&mut *link.ended());
        let paced = early
            .as_ref()
            .filter(|(sent, until)| {
                ended.is_empty() && same(sent, &held) && Instant::now() < *until
            })
            .map(|(_, until)| *until);
        if paced.is_some() || (held.is_empty() && ended.is_empty()) {
            // `ended` is empty: nothing to give back.
            tokio::select! {
                () = link.changed.notified() => {}
                () = sleep_until(paced) => {}
                () = beating.cancelled() => break,
            }
            continue;
        }
        let used = daemon.route_in_use();
        let sent = Instant::now();
        let beat = heartbeat(&daemon, &options, held.clone(), ended.clone(), wait_ms);
        tokio::pin!(beat);
        let answer = loop {
            tokio::select! {
                answer = &mut beat => break answer,
                () = link.changed.notified() => {
                    // Replaced only when the held set or the ends changed.
                    if link.ended().is_empty() && same(&held, &held_set(&shared, daemon.link).0) {
                        continue;
                    }
                }
                () = beating.cancelled() => {}
            }
            // Replaced or stopped: its ends go in the next heartbeat, or
            // in the pool's last flush.
            link.ended().extend(ended);
            continue 'beating;
        };
        match answer {
            Ok(answer) => {
                backoff = FIRST_BACKOFF;
                let now = Instant::now();
                let until = sent + Duration::from_millis(wait_ms);
                early = (now < until).then(|| (held.clone(), until));
                let mut running = shared.running();
                for at in &held {
                    if let Some(r) = running.get_mut(at) {
                        r.renewed = now;
                    }
                }
                for gone in answer.gone {
                    if let Some(r) = running
                        .get(&gone)
                        .filter(|r| r.link == daemon.link && !r.cancel.is_cancelled())
                    {
                        went_away(gone, r.phase);
                        r.cancel.cancel();
                    }
                }
            }
            Err(error) => {
                early = None;
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

/// Logs that attempt `at`, in `phase`, went away on its daemon (cancelled,
/// superseded, decided): news when it had not ended here, and the
/// expected answer to its own Final once its child exited.
fn went_away(at: AttemptRef, phase: Phase) {
    let (task_id, attempt) = (at.task_id, at.attempt);
    match phase {
        Phase::Child => {
            tracing::info!(%task_id, attempt, "attempt gone: stopping it");
        }
        Phase::Waiting => {
            tracing::info!(%task_id, attempt, "attempt gone before it started");
        }
        Phase::Exited | Phase::Posting => {
            tracing::debug!(%task_id, attempt, "attempt over on its daemon after its child exited");
        }
    }
}

/// Waits until `until`, or forever without one.
async fn sleep_until(until: Option<Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// Whether two held sets (each without repeats) name the same attempts.
fn same(a: &[AttemptRef], b: &[AttemptRef]) -> bool {
    a.len() == b.len() && a.iter().all(|at| b.contains(at))
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

/// The attempts held from daemon `link`, those the pool stopped left out,
/// and how long a heartbeat may wait: a third of the shortest lease,
/// within bounds.
fn held_set(shared: &Shared, link: usize) -> (Vec<AttemptRef>, u64) {
    let running = shared.running();
    let mine = || {
        running
            .iter()
            .filter(|(_, r)| r.link == link && !r.cancel.is_cancelled())
    };
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::super::{Running, run, stop_beating};
    use super::*;
    use swarmd_client::{ApiClient, Bearer};
    use swarmd_types::ids::TaskId;

    /// A daemon's heartbeat route: an attempt named in `gone` is answered
    /// gone at once; otherwise the heartbeat waits its `wait_ms` (unless
    /// `at_once`) and answers nothing gone. Ends count as reported once
    /// the heartbeat carrying them is answered.
    #[derive(Default)]
    struct Fake {
        beats: AtomicUsize,
        gone: Mutex<HashSet<AttemptRef>>,
        at_once: AtomicBool,
        reported: Mutex<Vec<(TaskId, u32, String)>>,
    }

    async fn serve(fake: Arc<Fake>) -> String {
        let router = axum::Router::new().route(
            "/v1/pool/heartbeat",
            axum::routing::post(move |axum::Json(beat): axum::Json<HeartbeatRequest>| {
                let fake = Arc::clone(&fake);
                async move {
                    fake.beats.fetch_add(1, Ordering::SeqCst);
                    let gone: Vec<AttemptRef> = {
                        let known = fake.gone.lock().unwrap();
                        beat.held
                            .iter()
                            .filter(|at| known.contains(at))
                            .copied()
                            .collect()
                    };
                    if gone.is_empty() && !fake.at_once.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(beat.wait_ms)).await;
                    }
                    let mut reported = fake.reported.lock().unwrap();
                    for e in beat.ended {
                        reported.push((e.task_id, e.attempt, e.reason));
                    }
                    axum::Json(serde_json::json!({ "gone": gone }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        url
    }

    fn daemon(url: &str) -> Daemon {
        let client = || ApiClient::new(url, Bearer::new("swp-test")).unwrap();
        Daemon {
            link: 0,
            discovered: false,
            routes: vec![(client(), client())].into(),
            route: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            node: None,
            cluster: false,
        }
    }

    fn options(url: &str) -> Arc<PoolOptions> {
        Arc::new(PoolOptions {
            servers: vec![url.to_owned()],
            token: Bearer::new("swp-test"),
            agent: "remote".to_owned(),
            concurrency: 2,
            pool_id: "pool-t".to_owned(),
            command: run::Command {
                program: "/bin/true".to_owned(),
                args: Vec::new(),
                env: Vec::new(),
                cwd: None,
                kill_grace: Duration::from_secs(1),
                supervisor: None,
                worktree: None,
            },
            drain: Duration::from_secs(1),
            rediscover: Duration::from_secs(600),
            through: false,
        })
    }

    /// Holds a fresh attempt from daemon 0 with `lease_ms`; its cancel.
    fn hold(shared: &Shared, lease_ms: u64) -> (AttemptRef, CancellationToken) {
        let at = AttemptRef {
            task_id: TaskId::new(),
            attempt: 1,
        };
        let cancel = CancellationToken::new();
        shared.running().insert(
            at,
            Running {
                cancel: cancel.clone(),
                lease_ms,
                link: 0,
                renewed: Instant::now(),
                phase: Phase::Child,
            },
        );
        shared.links[0].changed.notify_one();
        (at, cancel)
    }

    async fn start(fake: &Arc<Fake>) -> (Daemon, Arc<PoolOptions>, Arc<Shared>) {
        let url = serve(Arc::clone(fake)).await;
        (daemon(&url), options(&url), Arc::new(Shared::new(1, 2)))
    }

    #[tokio::test]
    async fn an_attempt_answered_gone_is_stopped_once_and_not_heartbeated_again() {
        let fake = Arc::new(Fake::default());
        let (daemon, options, shared) = start(&fake).await;
        // Its Final posted, the attempt is gone on the daemon, but the pool
        // has not forgotten it yet (its task is still winding down).
        let (at, cancel) = hold(&shared, 30_000);
        fake.gone.lock().unwrap().insert(at);
        let beating = CancellationToken::new();
        let heart = tokio::spawn(heartbeat_loop(
            daemon,
            options,
            Arc::clone(&shared),
            beating.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Other changes wake the loop: nothing is sent for them.
        for _ in 0..3 {
            shared.links[0].changed.notify_one();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(cancel.is_cancelled());
        assert_eq!(
            fake.beats.load(Ordering::SeqCst),
            1,
            "one heartbeat, answered gone"
        );
        beating.cancel();
        heart.await.unwrap();
    }

    #[tokio::test]
    async fn a_heartbeat_answered_early_is_not_sent_again_before_its_wait() {
        let fake = Arc::new(Fake::default());
        fake.at_once.store(true, Ordering::SeqCst);
        let (daemon, options, shared) = start(&fake).await;
        // A 300 ms lease: heartbeats wait 100 ms.
        let (_, cancel) = hold(&shared, 300);
        let beating = CancellationToken::new();
        let heart = tokio::spawn(heartbeat_loop(
            daemon,
            options,
            Arc::clone(&shared),
            beating.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(550)).await;
        let beats = fake.beats.load(Ordering::SeqCst);
        assert!((3..=7).contains(&beats), "{beats} heartbeats in 550 ms");
        assert!(!cancel.is_cancelled(), "its lease is renewed");
        beating.cancel();
        heart.await.unwrap();
    }

    #[tokio::test]
    async fn ends_a_heartbeat_in_flight_carried_are_reported_once_when_the_pool_stops() {
        let fake = Arc::new(Fake::default());
        let (daemon, options, shared) = start(&fake).await;
        let beating = CancellationToken::new();
        let heart = tokio::spawn(heartbeat_loop(
            daemon.clone(),
            Arc::clone(&options),
            Arc::clone(&shared),
            beating.clone(),
        ));
        let at = AttemptRef {
            task_id: TaskId::new(),
            attempt: 1,
        };
        shared.end(0, at, "handed back: the worker pool is stopping".to_owned());
        // The loop took the end: its heartbeat is in flight (a long-poll).
        let deadline = Instant::now() + Duration::from_secs(5);
        while fake.beats.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no heartbeat sent");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(shared.links[0].ended().is_empty());
        stop_beating(&beating, vec![heart], &[daemon], &options, &shared).await;
        let reported = fake.reported.lock().unwrap().clone();
        assert_eq!(
            reported,
            [(
                at.task_id,
                1,
                "handed back: the worker pool is stopping".to_owned()
            )]
        );
    }
}
