//! Remote agents' attempts waiting for, and held by, worker pools (docs/protocol.md, Worker
//! pools).
//!
//! [`RemotePools`] is one per daemon. The remote spawner queues each attempt
//! of a `kind = "remote"` agent here ([`RemotePools::enqueue`]); a pool's
//! long-poll claim takes the oldest ones of its agent ([`RemotePools::claim`]);
//! a pool's heartbeat asks which of the attempts it holds are gone
//! ([`RemotePools::wait_gone`]): cancelled, superseded, decided or claimed
//! by another pool. An attempt leaves when its worker ends
//! ([`RemotePools::remove`]), and every change bumps one generation counter
//! that waiting claims and heartbeats watch, so a cancel reaches a waiting
//! heartbeat at once. Nothing here touches the engine: leases are renewed by
//! the server with each attempt's own credential.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::AttemptId;
use swarmd_engine::metrics::Histogram;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::process::{StdinMode, StreamMode};
use swarmd_git::worktree::PriorWork;

/// How long a pool counts as connected after its last claim or heartbeat.
pub const POOL_SEEN_WINDOW: Duration = Duration::from_secs(30);
/// Pools remembered at most (for the connected gauge); past it the longest
/// unseen is forgotten.
pub const MAX_TRACKED_POOLS: usize = 1024;

/// What a pool needs to run one attempt like a local process agent.
#[derive(Debug, Clone)]
pub struct RemoteJob {
    pub attempt: AttemptId,
    pub agent: String,
    /// The attempt's own credential: the pool writes with its handle.
    pub credential: WorkerCredential,
    pub prompt: String,
    pub system: Option<String>,
    pub input: Option<serde_json::Value>,
    pub run: RemoteRun,
    /// The task a continuation continues, and the CLI session it resumes.
    pub continued_from: Option<String>,
    pub resume_session: Option<String>,
    /// Where a continuation's worktree starts: the continued attempt's
    /// branch and head, for a pool with worktrees.
    pub resume_from: Option<PriorWork>,
}

/// The agent's run settings the pool applies (`[agents.NAME]` of kind remote).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRun {
    pub stdin: StdinMode,
    pub stream: StreamMode,
    pub timeout: Option<Duration>,
    pub max_output_bytes: u64,
}

/// How a pool says an attempt it held ended without a Final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolEnd {
    /// The run failed (the child could not start, ended without a Final, …).
    Failed(String),
}

/// A claimed attempt, with how long it waited in the queue.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub job: Arc<RemoteJob>,
    pub waited: Duration,
}

/// Why a pool's report about an attempt is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("the attempt is not held by this pool")]
    NotHeld,
}

/// Attempts a claim took and has not answered with yet: put back in
/// their queues (`RemotePools::put_back`) when dropped, unless the
/// claim said it [answered](Unanswered::answered).
#[derive(Debug)]
pub struct Unanswered<'a> {
    remote: &'a RemotePools,
    pool: &'a str,
    attempts: Vec<AttemptId>,
}

impl<'a> Unanswered<'a> {
    /// What `pool`'s claim took of `remote`.
    pub fn new(remote: &'a RemotePools, pool: &'a str, claimed: &[Claimed]) -> Self {
        Unanswered {
            remote,
            pool,
            attempts: claimed.iter().map(|c| c.job.attempt).collect(),
        }
    }

    /// The claim's answer is made: the pool keeps what it took.
    pub fn answered(mut self) {
        self.attempts.clear();
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.attempts.is_empty() {
            tracing::debug!(pool = %self.pool, attempts = self.attempts.len(),
                "a claim went away before its answer; its attempts are queued again");
            self.remote.put_back(self.pool, &self.attempts);
        }
    }
}

/// One queued attempt.
#[derive(Debug)]
struct Queued {
    job: Arc<RemoteJob>,
    since: Instant,
    ended: oneshot::Sender<PoolEnd>,
}

/// One attempt a pool holds.
#[derive(Debug)]
struct Held {
    job: Arc<RemoteJob>,
    pool: String,
    /// When it was queued, kept for a put-back.
    since: Instant,
    ended: oneshot::Sender<PoolEnd>,
}

#[derive(Debug, Default)]
struct State {
    queues: HashMap<String, VecDeque<Queued>>,
    held: HashMap<AttemptId, Held>,
    /// Pool id → when it last claimed or heartbeat.
    seen: HashMap<String, Instant>,
}

/// The daemon's remote attempts: queued per agent, and held per pool.
#[derive(Debug)]
pub struct RemotePools {
    /// std `Mutex`: held for map work only, never across an await.
    state: Mutex<State>,
    generation: watch::Sender<u64>,
    /// Attempts claimed since start.
    claimed: AtomicU64,
    /// How long each claimed attempt waited in its queue.
    claim_wait: Histogram,
}

impl Default for RemotePools {
    fn default() -> Self {
        RemotePools::new()
    }
}

impl RemotePools {
    pub fn new() -> RemotePools {
        RemotePools {
            state: Mutex::new(State::default()),
            generation: watch::Sender::new(0),
            claimed: AtomicU64::new(0),
            claim_wait: Histogram::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Queues `job` for its agent's pools; the receiver hears how a pool
    /// ended it without a Final.
    pub fn enqueue(&self, job: RemoteJob) -> oneshot::Receiver<PoolEnd> {
        let (ended, heard) = oneshot::channel();
        let agent = job.agent.clone();
        self.state()
            .queues
            .entry(agent)
            .or_default()
            .push_back(Queued {
                job: Arc::new(job),
                since: Instant::now(),
                ended,
            });
        self.bump();
        heard
    }

    /// Takes up to `max` of `agent`'s oldest queued attempts for `pool`,
    /// waiting up to `wait` for the first one. Empty when none came.
    pub async fn claim(&self, agent: &str, pool: &str, max: usize, wait: Duration) -> Vec<Claimed> {
        let deadline = Instant::now() + wait;
        let mut changes = self.generation.subscribe();
        loop {
            changes.mark_unchanged();
            let claimed = self.take(agent, pool, max);
            if !claimed.is_empty() {
                return claimed;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Vec::new(),
            }
        }
    }

    /// Queues again, first in their agents' queues and in their order,
    /// those of `attempts` that `pool` claimed and still holds: a claim
    /// whose answer the pool never got (its request went away before the
    /// answer was made) leaves them to the next claim, not to their leases.
    fn put_back(&self, pool: &str, attempts: &[AttemptId]) {
        let mut state = self.state();
        let mut any = false;
        for attempt in attempts.iter().rev() {
            if state.held.get(attempt).is_none_or(|h| h.pool != pool) {
                continue;
            }
            let Some(held) = state.held.remove(attempt) else {
                continue;
            };
            state
                .queues
                .entry(held.job.agent.clone())
                .or_default()
                .push_front(Queued {
                    job: held.job,
                    since: held.since,
                    ended: held.ended,
                });
            any = true;
        }
        drop(state);
        if any {
            self.bump();
        }
    }

    fn take(&self, agent: &str, pool: &str, max: usize) -> Vec<Claimed> {
        let now = Instant::now();
        let mut state = self.state();
        touch(&mut state.seen, pool, now);
        let Some(queue) = state.queues.get_mut(agent) else {
            return Vec::new();
        };
        let taken: Vec<Queued> = (0..max).map_while(|_| queue.pop_front()).collect();
        if queue.is_empty() {
            state.queues.remove(agent);
        }
        taken
            .into_iter()
            .map(|queued| {
                state.held.insert(
                    queued.job.attempt,
                    Held {
                        job: Arc::clone(&queued.job),
                        pool: pool.to_owned(),
                        since: queued.since,
                        ended: queued.ended,
                    },
                );
                let waited = now.saturating_duration_since(queued.since);
                self.claimed.fetch_add(1, Ordering::Relaxed);
                self.claim_wait.observe(waited);
                Claimed {
                    waited,
                    job: queued.job,
                }
            })
            .collect()
    }

    /// A held attempt's job and the pool holding it.
    pub fn held(&self, attempt: AttemptId) -> Option<(Arc<RemoteJob>, String)> {
        self.state()
            .held
            .get(&attempt)
            .map(|h| (Arc::clone(&h.job), h.pool.clone()))
    }

    /// Which of `attempts` `pool` no longer holds, waiting up to `wait` for
    /// one to go when none has. Counts the call as the pool being seen.
    pub async fn wait_gone(
        &self,
        pool: &str,
        attempts: &[AttemptId],
        wait: Duration,
    ) -> Vec<AttemptId> {
        let deadline = Instant::now() + wait;
        let mut changes = self.generation.subscribe();
        loop {
            changes.mark_unchanged();
            let gone = self.gone(pool, attempts);
            if !gone.is_empty() || attempts.is_empty() {
                return gone;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Vec::new(),
            }
        }
    }

    fn gone(&self, pool: &str, attempts: &[AttemptId]) -> Vec<AttemptId> {
        let mut state = self.state();
        touch(&mut state.seen, pool, Instant::now());
        attempts
            .iter()
            .filter(|a| state.held.get(a).is_none_or(|h| h.pool != pool))
            .copied()
            .collect()
    }

    /// A pool's word that an attempt it holds ended without a Final.
    pub fn report(&self, pool: &str, attempt: AttemptId, end: PoolEnd) -> Result<(), ReportError> {
        let held = {
            let mut state = self.state();
            match state.held.get(&attempt) {
                Some(h) if h.pool == pool => state.held.remove(&attempt),
                _ => None,
            }
        };
        let held = held.ok_or(ReportError::NotHeld)?;
        // The worker may have ended already: nobody listens then.
        let _ = held.ended.send(end);
        self.bump();
        Ok(())
    }

    /// Forgets `attempt`, queued or held: its worker ended (a Final, a
    /// cancel, an expired lease). A pool holding it hears it is gone.
    pub fn remove(&self, attempt: AttemptId, agent: &str) {
        {
            let mut state = self.state();
            if state.held.remove(&attempt).is_none()
                && let Some(queue) = state.queues.get_mut(agent)
            {
                queue.retain(|q| q.job.attempt != attempt);
                if queue.is_empty() {
                    state.queues.remove(agent);
                }
            }
        }
        self.bump();
    }

    /// Pools seen within [`POOL_SEEN_WINDOW`].
    pub fn connected_pools(&self) -> usize {
        let now = Instant::now();
        self.state()
            .seen
            .values()
            .filter(|at| now.saturating_duration_since(**at) < POOL_SEEN_WINDOW)
            .count()
    }

    /// Attempts claimed by pools since start, those put back included.
    pub fn claimed_total(&self) -> u64 {
        self.claimed.load(Ordering::Relaxed)
    }

    /// How long claimed attempts waited in their queue.
    pub fn claim_wait(&self) -> &Histogram {
        &self.claim_wait
    }

    /// Attempts queued for `agent`, not yet claimed.
    pub fn queued(&self, agent: &str) -> usize {
        self.state().queues.get(agent).map_or(0, VecDeque::len)
    }
}

/// Marks `pool` seen at `now`, forgetting the longest unseen pool past the cap.
fn touch(seen: &mut HashMap<String, Instant>, pool: &str, now: Instant) {
    if let Some(at) = seen.get_mut(pool) {
        *at = now;
        return;
    }
    if seen.len() >= MAX_TRACKED_POOLS
        && let Some(oldest) = seen
            .iter()
            .min_by_key(|(_, at)| **at)
            .map(|(p, _)| p.clone())
    {
        seen.remove(&oldest);
    }
    seen.insert(pool.to_owned(), now);
}
