//! `swarmd worker pool`: a worker pool on any machine (docs/operations.md, Worker pools). It
//! long-polls one or more daemons (every node of a cluster: it asks each
//! daemon given for its cluster's live nodes, at start and every
//! `rediscover`, and with backoff one that has not answered yet,
//! `discover`) for
//! attempts of one remote agent, runs up to `concurrency` of them at once
//! like local process agents (`run`), and keeps one heartbeat in flight per
//! daemon while it holds any of that daemon's attempts: the heartbeat
//! renews their leases and answers as soon as one is cancelled or
//! superseded, and that attempt's process group is killed. A heartbeat in
//! flight is replaced whenever the set of held attempts changes, so a
//! cancel of an attempt just claimed is heard as fast.
//!
//! Each daemon has a claim loop of its own (`claim`). A loop claims while
//! the pool holds fewer than `concurrency` attempts, as many as are free
//! and not asked for by another loop's claim in flight, and at least one,
//! so no daemon waits for another's long-poll to run out. Several daemons
//! may so hand out one attempt more each than the pool has slots for; such
//! an attempt is held (its lease renewed) until a slot frees. An attempt
//! whose child exited holds its slot for a short while at most, however
//! long its result takes to post (`claim`); its writes go to the daemon it
//! came from and, on a cluster, through the other nodes while that one
//! cannot be reached (`run`).
//!
//! Transport errors (a daemon restarting) are retried with backoff, from
//! 100 ms doubling to 5 s; a refused token ends the pool. On the first
//! SIGTERM or SIGINT the pool stops claiming and lets its running attempts
//! finish for up to `drain`; then (or on a second signal) it kills the rest
//! and hands them back, reported as failed so the daemon retries them per
//! policy at once instead of waiting out their leases.

mod claim;
mod discover;
mod heartbeat;
pub mod run;
pub mod worktree;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use swarmd_spawner::process::HostEnv;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use discover::Place;
use heartbeat::{flush_ended, heartbeat_loop};
use swarmd_client::wire::{AttemptRef, EndedAttempt, MAX_REASON, NODE_HEADER};
use swarmd_client::{ApiClient, Bearer, ClientError};

/// Most daemons one pool claims from.
pub const MAX_SERVERS: usize = 16;
/// Longest a heartbeat waits; shorter when a lease is shorter (a third of it).
const MAX_HEARTBEAT_WAIT_MS: u64 = 10_000;
const MIN_HEARTBEAT_WAIT_MS: u64 = 100;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Slack for a long-poll's answer to travel back, on top of its wait.
const POLL_SLACK: Duration = Duration::from_secs(10);

/// What `swarmd worker pool` runs.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The daemons claimed from (1 to [`MAX_SERVERS`], distinct).
    pub servers: Vec<String>,
    pub token: Bearer,
    pub agent: String,
    pub concurrency: u32,
    pub pool_id: String,
    pub command: run::Command,
    /// How long running attempts may finish after the first signal.
    pub drain: Duration,
    /// How often the given daemons are asked again for their cluster's
    /// nodes (`discover`).
    pub rediscover: Duration,
    /// Reach every node through the daemons given, naming it in
    /// `x-swarmd-node`, even through a node's advertised URL (`discover`;
    /// a load balancer is reached so without it).
    pub through: bool,
}

/// Why the pool stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the daemon refused the pool: {0}")]
    Refused(ClientError),
    #[error("every node of the cluster refused the pool (see the warnings above)")]
    AllRefused,
}

/// One attempt the pool holds: waiting for a slot, running, or posting
/// what its child left.
#[derive(Debug)]
struct Running {
    cancel: CancellationToken,
    lease_ms: u64,
    /// The daemon it was claimed from (an index into `links`).
    link: usize,
    /// When its lease was last renewed (claimed, or a heartbeat answered).
    renewed: Instant,
    phase: Phase,
}

/// Where a held attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Claimed, waiting for a slot.
    Waiting,
    /// In its slot, its worktree's setup or its child running.
    Child,
    /// Its child exited; what is left is posted, in its slot for at most
    /// `claim::SLOT_AFTER_EXIT`.
    Exited,
    /// Its child exited and its slot is free: only posting is left, which
    /// counts against no slot.
    Posting,
}

/// What the pool keeps per daemon.
#[derive(Debug, Default)]
struct Link {
    /// Ends to report in this daemon's next heartbeat.
    ended: Mutex<Vec<EndedAttempt>>,
    /// This daemon's held set or ended list changed: its heartbeat starts over.
    changed: Notify,
}

impl Link {
    fn ended(&self) -> MutexGuard<'_, Vec<EndedAttempt>> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct Shared {
    running: Mutex<HashMap<AttemptRef, Running>>,
    links: Vec<Link>,
    /// One permit per slot: an attempt runs its child while it holds one.
    slots: Arc<Semaphore>,
    /// Bumped whenever an attempt leaves `running`: claim loops look again.
    freed: watch::Sender<u64>,
    /// Slots asked for by claims in flight, across daemons.
    asked: Mutex<u32>,
    /// The cluster's nodes an attempt's writes may go through when its
    /// own node cannot be reached.
    relays: run::Relays,
}

impl Shared {
    fn new(links: usize, concurrency: u32) -> Shared {
        Shared {
            running: Mutex::new(HashMap::new()),
            links: (0..links).map(|_| Link::default()).collect(),
            slots: Arc::new(Semaphore::new(concurrency as usize)),
            freed: watch::Sender::new(0),
            asked: Mutex::new(0),
            relays: run::Relays::default(),
        }
    }

    fn running(&self) -> MutexGuard<'_, HashMap<AttemptRef, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn asked(&self) -> MutexGuard<'_, u32> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `at`'s end for the next heartbeat of the daemon it came from.
    fn end(&self, link: usize, at: AttemptRef, mut reason: String) {
        if reason.len() > MAX_REASON {
            let mut cut = MAX_REASON;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
        }
        self.links[link].ended().push(EndedAttempt {
            task_id: at.task_id,
            attempt: at.attempt,
            reason,
        });
        self.links[link].changed.notify_one();
    }

    /// Forgets `at` (claimed from `link`) and wakes whoever waits on it.
    fn forget(&self, link: usize, at: AttemptRef) {
        self.running().remove(&at);
        self.links[link].changed.notify_one();
        self.freed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Moves `at` on to `phase`; one that leaves its slot wakes the claim
    /// loops.
    fn set_phase(&self, at: AttemptRef, phase: Phase) {
        if let Some(r) = self.running().get_mut(&at) {
            r.phase = phase;
        }
        if phase == Phase::Posting {
            self.freed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// How many held attempts hold or wait for a slot.
    fn in_slots(&self) -> usize {
        self.running()
            .values()
            .filter(|r| r.phase != Phase::Posting)
            .count()
    }
}

/// One daemon's clients: claims and heartbeats with the pool's token, and
/// the attempts' writes, each with its own handle, over connections of
/// their own, so a long-poll dropped mid-flight (a heartbeat replaced)
/// never holds one up.
#[derive(Debug, Clone)]
struct Daemon {
    link: usize,
    /// Learned from another daemon (`discover`), not given.
    discovered: bool,
    /// Per URL the node is reached through: the client of claims and
    /// heartbeats, and the one of the attempts' writes.
    routes: Arc<[(ApiClient, ApiClient)]>,
    /// Which of `routes` is in use (taken modulo their number), shared by
    /// the daemon's claim and heartbeat loops.
    route: Arc<AtomicUsize>,
    /// The node claims and heartbeats name in `x-swarmd-node`, when the
    /// route reaches it through another daemon.
    node: Option<String>,
    /// A node of a cluster: its attempts' writes may go through the
    /// other nodes', and its own write clients relay theirs.
    cluster: bool,
}

impl Daemon {
    fn new(
        link: usize,
        discovered: bool,
        place: &Place,
        options: &PoolOptions,
    ) -> Result<Daemon, ClientError> {
        let routes = place
            .urls()
            .map(|url| {
                Ok((
                    ApiClient::new(url, options.token.clone())?,
                    ApiClient::new(url, options.token.clone())?,
                ))
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(Daemon {
            link,
            discovered,
            routes: routes.into(),
            route: Arc::new(AtomicUsize::new(0)),
            node: place.node.clone(),
            cluster: place.cluster,
        })
    }

    /// The client of claims and heartbeats in use.
    fn client(&self) -> &ApiClient {
        &self.routes[self.route.load(Ordering::Relaxed) % self.routes.len()].0
    }

    /// The client an attempt claimed now writes with.
    fn writes(&self) -> ApiClient {
        self.routes[self.route.load(Ordering::Relaxed) % self.routes.len()]
            .1
            .clone()
    }

    /// Which route is in use, for `next_route`.
    fn route_in_use(&self) -> usize {
        self.route.load(Ordering::Relaxed)
    }

    /// After a claim or heartbeat sent on route `used` failed, the next URL
    /// the node is reached through, if there is another; unless the other
    /// loop moved on from `used` already, so one outage moves it once.
    fn next_route(&self, used: usize) {
        if self.routes.len() > 1
            && self
                .route
                .compare_exchange(
                    used,
                    used.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            tracing::info!(server = %self.name(), "reaching the node through the next daemon given");
        }
    }

    /// A claim or heartbeat to `path`, naming this daemon's node if it has one.
    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.client().post(path);
        match &self.node {
            Some(node) => request.header(NODE_HEADER, node),
            None => request,
        }
    }

    /// Where it is, for logs: its URL, and the node named through it.
    fn name(&self) -> String {
        let url = self.client().base_url();
        match &self.node {
            Some(node) => format!("{url} (node {node})"),
            None => url.to_owned(),
        }
    }
}

/// Runs the pool until `stop` (the first signal) and its drain; `kill` (a
/// second signal) cuts the drain short.
///
/// # Errors
/// `Refused` when a daemon refuses the token or the agent (401, 403, 404);
/// `Client` when a URL is invalid.
pub async fn run_pool(
    options: PoolOptions,
    host_env: HostEnv,
    stop: CancellationToken,
    kill: CancellationToken,
) -> Result<(), PoolError> {
    // A daemon given (reached at a URL given) ends the pool when it
    // refuses it; a learned node (named through a front, or at a URL not
    // given) is left out alone.
    let (places, waiting) = discover::first_places(&options, &stop).await?;
    let daemons = places
        .iter()
        .enumerate()
        .map(|(link, place)| {
            let given = discover::is_given(&options, place);
            Daemon::new(link, !given, place, &options)
        })
        .collect::<Result<Vec<_>, ClientError>>()?;
    let options = Arc::new(options);
    let host_env = Arc::new(host_env);
    let shared = Arc::new(Shared::new(MAX_SERVERS, options.concurrency));
    let attempts = TaskTracker::new();
    let beating = CancellationToken::new();
    let hearts = std::sync::Mutex::new(Vec::new());
    let beat = |daemon: &Daemon| {
        if daemon.cluster {
            for (_, writes) in daemon.routes.iter() {
                shared.relays.add(writes);
            }
        }
        let heart = tokio::spawn(heartbeat_loop(
            daemon.clone(),
            Arc::clone(&options),
            Arc::clone(&shared),
            beating.clone(),
        ));
        hearts.lock().unwrap_or_else(|e| e.into_inner()).push(heart);
    };
    daemons.iter().for_each(&beat);
    let (joined_tx, joined) = tokio::sync::mpsc::unbounded_channel();
    let finding = stop.child_token();
    let finder = tokio::spawn(discover::follow(
        Arc::clone(&options),
        places,
        waiting,
        joined_tx,
        finding.clone(),
    ));
    let pool = claim::Pool {
        options: &options,
        host_env: &host_env,
        shared: &shared,
        attempts: &attempts,
    };
    let (claimed, daemons) = claim::claim_all(&pool, daemons, joined, &beat, &stop).await;
    finding.cancel();
    let _ = finder.await;
    attempts.close();
    tokio::select! {
        () = attempts.wait() => {}
        () = tokio::time::sleep(options.drain) => {}
        () = kill.cancelled() => {}
    }
    hand_back(&shared);
    attempts.wait().await;
    let hearts = std::mem::take(&mut *hearts.lock().unwrap_or_else(|e| e.into_inner()));
    stop_beating(&beating, hearts, &daemons, &options, &shared).await;
    claimed
}

/// Stops the heartbeat loops and waits for them to end, then sends each
/// daemon what is left to report (failures, hand-backs) before the pool
/// exits. In that order, no loop takes an end the flush would miss: a
/// loop stopped with a heartbeat in flight gives its ends back first.
async fn stop_beating(
    beating: &CancellationToken,
    hearts: Vec<tokio::task::JoinHandle<()>>,
    daemons: &[Daemon],
    options: &PoolOptions,
    shared: &Shared,
) {
    beating.cancel();
    for heart in hearts {
        let _ = heart.await;
    }
    for daemon in daemons {
        if let Err(error) = flush_ended(daemon, options, shared).await {
            tracing::warn!(%error, server = %daemon.name(), "the last ends were not reported: their attempts are retried when their leases run out");
        }
    }
}

/// Kills what still runs (or waits for a slot) and reports it handed back.
fn hand_back(shared: &Shared) {
    let running: Vec<(AttemptRef, usize, CancellationToken)> = shared
        .running()
        .iter()
        .map(|(at, r)| (*at, r.link, r.cancel.clone()))
        .collect();
    for (at, link, cancel) in running {
        shared.end(
            link,
            at,
            "handed back: the worker pool is stopping".to_owned(),
        );
        cancel.cancel();
    }
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
