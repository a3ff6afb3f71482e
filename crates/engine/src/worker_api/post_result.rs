//! Posting an attempt's one Final (docs/tasks.md, Late writes): the claim
//! under the task's lock, the write, and the replay a retry gets. A `200`
//! for a result always means its Final is durable: a retry that arrives
//! while the first post's write is in flight waits for that write's outcome
//! and answers as the first post does.

use std::sync::Arc;

use futures_util::FutureExt;
use swarmd_output_store::{ContentRef, Durable, OutputEvent, StoreError};
use tokio::sync::oneshot;

use super::{ResultAck, ResultPost, WorkerAuth, Workers};
use crate::error::EngineError;
use crate::ids::{SessionId, TaskId};
use crate::live::{FinalOutcome, FinalWrite, PostedClaim, PostedFinal, TaskCell};
use crate::store::WriteOp;

/// Why a posted Final was not claimed.
enum Claim {
    /// The attempt already accepted a Final: this one replays it or conflicts.
    Replay(PostedClaim),
    /// The attempt is not open (superseded, decided, or the task is over).
    Closed(EngineError),
}

/// What a claim hands the post that made it: the task's session, and where
/// the Final's durability goes once it is queued.
struct Claimed {
    session: Option<SessionId>,
    queued: oneshot::Sender<Durable>,
    outcome: FinalOutcome,
}

/// The outcome future of one claim: resolves when the queued Final's write
/// does, or as `Abandoned` when the claimant drops `queued` unsent.
fn final_outcome(queued: oneshot::Receiver<Durable>) -> FinalOutcome {
    async move {
        match queued.await {
            Ok(durable) => match durable.await {
                Ok(()) => FinalWrite::Stored,
                Err(e) => FinalWrite::Failed(Arc::new(e)),
            },
            Err(_) => FinalWrite::Abandoned,
        }
    }
    .boxed()
    .shared()
}

/// The producer of the Finals workers post.
const WORKER: &str = "worker";

/// How many times a post takes over a claim whose claimant went away
/// before queuing its Final; each takeover needs a claimant to vanish
/// again, so the bound is never reached in practice.
const MAX_TAKEOVERS: usize = 8;

impl Workers<'_> {
    /// Claims the open attempt's one Final for `mine`, under the task's
    /// lock: from here on a cancel loses to it (`AlreadyFinal`). Queues the
    /// fingerprint's write before the Final's, so it is durable whenever the
    /// Final is.
    fn claim_final(
        &self,
        cell: &TaskCell,
        task_id: TaskId,
        attempt: u32,
        mine: &PostedFinal,
    ) -> Result<Claimed, Claim> {
        let mut state = cell.lock();
        if let Some(first) = state
            .run
            .as_ref()
            .filter(|r| r.attempt == attempt)
            .and_then(|r| r.posted.as_ref())
        {
            return Err(Claim::Replay(first.clone()));
        }
        state.check_open(attempt).map_err(Claim::Closed)?;
        self.touch(&mut state, attempt);
        let (queued, receiver) = oneshot::channel();
        let outcome = final_outcome(receiver);
        if let Some(run) = state.run.as_mut() {
            run.posted = Some(PostedClaim {
                first: mine.clone(),
                outcome: outcome.clone(),
            });
        }
        self.ledger.bus.submit(
            vec![WriteOp::PutPostedFinal {
                task_id,
                attempt,
                posted: mine.clone(),
            }],
            Vec::new(),
            None,
        );
        Ok(Claimed {
            session: state.task.session,
            queued,
            outcome,
        })
    }

    /// The fingerprint of the Final a closed attempt's worker posted, when
    /// that Final is durable. The fingerprint is written first, so it alone
    /// proves nothing: the Final's write may have failed after it (a node
    /// fenced between the two, a crash), and the worker was then never told
    /// yes. So the worker's Final is read from the store, never from memory,
    /// where a Final sits from the moment it is queued.
    async fn stored_post(
        &self,
        task_id: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, EngineError> {
        let Some(first) = self.ledger.store.posted_final(task_id, attempt).await? else {
            return Ok(None);
        };
        let stored = self
            .ledger
            .outputs
            .last_final(task_id.as_uuid(), attempt)
            .await?;
        Ok(stored.filter(|r| r.producer == WORKER).map(|_| first))
    }

    /// Frees the attempt's Final for another post after the claim behind
    /// `outcome` ended without a stored Final; the fingerprint's withdrawal
    /// is queued under the task's lock, so it cannot land after a later
    /// claim's. A claim that is no longer the attempt's is left alone.
    fn withdraw_claim(&self, task_id: TaskId, attempt: u32, outcome: &FinalOutcome) {
        let Some(cell) = self.held.live.get(&task_id) else {
            return;
        };
        let mut state = cell.lock();
        let Some(run) = state.run.as_mut().filter(|r| r.attempt == attempt) else {
            return;
        };
        if !run
            .posted
            .as_ref()
            .is_some_and(|p| p.outcome.ptr_eq(outcome))
        {
            return;
        }
        run.posted = None;
        self.ledger.bus.submit(
            vec![WriteOp::DeletePostedFinal { task_id, attempt }],
            Vec::new(),
            None,
        );
    }
}

pub(crate) async fn post_result(
    workers: Workers<'_>,
    auth: &WorkerAuth,
    post: ResultPost,
) -> Result<ResultAck, EngineError> {
    let task_id = crate::worker_api::Workers::bind(auth, post.task_id)?;
    if let Some(named) = post.attempt.filter(|a| *a != auth.attempt.n) {
        return Err(workers.attempt_mismatch(task_id, auth.attempt.n, named));
    }
    let ack = ResultAck {
        task_id,
        attempt: auth.attempt.n,
        accepted: true,
    };
    let mine = PostedFinal {
        idempotency_key: post.idempotency_key.clone(),
        body_digest: post.body_digest,
    };
    let mut takeovers = 0;
    let claimed = loop {
        let claim = match workers.held.live.get(&task_id) {
            Some(cell) => workers.claim_final(&cell, task_id, auth.attempt.n, &mine),
            None => Err(Claim::Closed(EngineError::TaskTerminal)),
        };
        match claim {
            Ok(claimed) => break claimed,
            Err(Claim::Replay(first)) => {
                // A first post that went away before it queued its Final
                // (its caller was dropped) holds no Final: this post takes
                // it over, whatever its key.
                if !first.abandoned() && !same_post(&first.first, &mine) {
                    return Err(EngineError::AlreadyFinal);
                }
                match first.outcome.clone().await {
                    FinalWrite::Stored => return Ok(ack),
                    FinalWrite::Failed(e) => {
                        workers.withdraw_claim(task_id, auth.attempt.n, &first.outcome);
                        return Err(StoreError::Batch(e).into());
                    }
                    FinalWrite::Abandoned if takeovers < MAX_TAKEOVERS => {
                        workers.withdraw_claim(task_id, auth.attempt.n, &first.outcome);
                        takeovers += 1;
                    }
                    FinalWrite::Abandoned => return Err(EngineError::AlreadyFinal),
                }
            }
            Err(Claim::Closed(error)) => {
                return match workers.stored_post(task_id, auth.attempt.n).await? {
                    Some(first) if same_post(&first, &mine) => Ok(ack),
                    Some(_) => Err(EngineError::AlreadyFinal),
                    None => Err(error),
                };
            }
        }
    };
    let event = OutputEvent::Final {
        content: ContentRef::Inline { value: post.value },
        ok: post.ok,
    };
    // The attempt is decided as soon as its Final is queued (its
    // terminal writes queue behind it); the worker hears back once the
    // Final is durable.
    let started = std::time::Instant::now();
    let queued = workers
        .appends()
        .queue_output(auth.attempt, claimed.session, WORKER, vec![event], |run| {
            run.posted_tx.send_replace(true);
        })
        .await;
    let durable = match queued {
        Ok((_, durable)) => durable,
        Err(e) => {
            drop(claimed.queued);
            workers.withdraw_claim(task_id, auth.attempt.n, &claimed.outcome);
            return Err(e);
        }
    };
    // From here the write's outcome no longer depends on this request:
    // a retry polls the same shared future if this one is dropped.
    let _ = claimed.queued.send(durable);
    match claimed.outcome.clone().await {
        FinalWrite::Stored => {
            workers
                .stats
                .store_append_latency
                .observe(started.elapsed());
            Ok(ack)
        }
        FinalWrite::Failed(e) => {
            workers.withdraw_claim(task_id, auth.attempt.n, &claimed.outcome);
            Err(StoreError::Batch(e).into())
        }
        // The receiver was sent its durability just above.
        FinalWrite::Abandoned => Err(EngineError::AlreadyFinal),
    }
}

/// Whether a retry is the first post again: the same key *and* body. Any
/// other post, a reused key with another body included, is a second result.
fn same_post(first: &PostedFinal, mine: &PostedFinal) -> bool {
    matches!(
        (&first.idempotency_key, &mine.idempotency_key),
        (Some(a), Some(b)) if a == b && first.body_digest == mine.body_digest
    )
}
