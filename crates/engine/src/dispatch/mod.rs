//! `dispatch_attempt` (docs/tasks.md, Attempts): one attempt of one task, in the phases
//! prepare → mint → spawn → join → decide → publish. No lock is held across
//! an `.await`: each phase takes the task's lock, changes memory, queues the
//! matching store write, and lets go before anything waits. The decide and
//! publish phases are in `decide`; attempts resumed at recovery in `resume`.
//!
//! Each attempt runs inside its own `attempt` span (task_id, attempt,
//! agent), so every log line of its phases, layers and spawner carries them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Map;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::Engine;
use crate::event::Event;
use crate::host::EngineHost;
use crate::ids::{AttemptId, TaskId};
use crate::live::{RunState, TaskCell, lease_until};
use crate::outcome::Stopped;
use crate::spawn::{
    Attempt, Ctx, Placement, Route, SpawnerAdapter, Worker, WorkerCredential, WorkerError,
};
use crate::store::WriteOp;
use crate::task::{AttemptOutcome, ProcessGroupMark, SpawnerKind, TaskStatus};

mod decide;
mod resume;
mod wait;

/// How the join phase ended: the worker's own end, or why the engine
/// stopped it.
enum Joined {
    Worker(Result<(), WorkerError>),
    Stopped(Stopped),
}

/// What the prepare phase hands to the later ones.
struct Prepared {
    ctx: Ctx,
    cancel: CancellationToken,
    started: Instant,
}

/// The attempt's credential, and the commit that makes it durable when the
/// worker outlives this process (delegated attempts wait for it).
struct Minted {
    credential: Result<WorkerCredential, String>,
    durable: Option<tokio::sync::oneshot::Receiver<Result<(), swarmd_output_store::StoreError>>>,
}

/// The span of one attempt of `task_id`. It is a root: an attempt belongs to
/// no request. `attempt` is recorded later when it is not known yet.
fn attempt_span(task_id: TaskId, attempt: Option<u32>, agent: &str) -> Span {
    tracing::info_span!(parent: None, "attempt", %task_id, attempt, agent)
}

/// What opening an attempt came to.
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per attempt and unpacked at once; a box would allocate per attempt"
)]
enum Opened {
    /// Opened: run it.
    Ready(Prepared, Minted, Arc<dyn SpawnerAdapter>),
    /// Nowhere to run it yet: ask again later.
    Wait,
    /// Waited too long for somewhere to run: fail the task with this reason.
    GaveUp(String),
    /// Nothing to run (the task ended, or failed without an attempt).
    Not,
}

impl Engine {
    /// Runs the next attempt of `id`, which admission has given a slot,
    /// inside the attempt's span.
    pub(crate) async fn dispatch_attempt(&self, id: TaskId, agent: String) {
        let span = attempt_span(id, None, &agent);
        async move {
            let Some(cell) = self.inner.held.live.get(&id) else {
                // Cancelled between admission and now: give the slot back.
                self.release_slot(&agent);
                return;
            };
            // Placing and opening the attempt is synchronous, so nothing of the
            // resolver's answer is held across an await.
            let (prepared, minted, stack) = match self.open_attempt(&cell, &agent) {
                Opened::Ready(prepared, minted, stack) => (prepared, minted, stack),
                Opened::Wait => {
                    self.release_slot(&agent);
                    Box::pin(self.recheck_place(id)).await;
                    return;
                }
                Opened::GaveUp(reason) => {
                    self.fail_unrunnable(&cell, reason);
                    self.release_slot(&agent);
                    return;
                }
                Opened::Not => {
                    self.release_slot(&agent);
                    return;
                }
            };
            let joined = self.spawn_and_join(&cell, &prepared, minted, stack).await;
            if matches!(joined, Joined::Stopped(Stopped::Interrupted)) {
                // The daemon is stopping: leave the attempt open for recovery.
                self.release_slot(&agent);
                return;
            }
            Box::pin(self.decide(&cell, prepared, joined)).await;
        }
        .instrument(span)
        .await;
    }

    /// Asks the resolver where the attempt runs, then, when it has nowhere
    /// to run it now, whether it waits (`place`), and otherwise opens it
    /// (`prepare`).
    fn open_attempt(&self, cell: &Arc<TaskCell>, agent: &str) -> Opened {
        let placement = self.placement(cell, agent);
        if let Some(reason) = placement.unavailable.as_deref() {
            match self.place(cell, reason) {
                wait::Place::Ready => {}
                wait::Place::Wait => return Opened::Wait,
                wait::Place::GaveUp(reason) => return Opened::GaveUp(reason),
            }
        }
        match self.prepare(cell, placement) {
            Some((prepared, minted, stack)) => Opened::Ready(prepared, minted, stack),
            None => Opened::Not,
        }
    }

    /// Asks the resolver once where the task's next attempt runs, outside
    /// the task's lock: the lock is held only to copy the task's route.
    fn placement(&self, cell: &Arc<TaskCell>, agent: &str) -> Placement {
        let (layers, session, operator_sid) = {
            let state = cell.lock();
            let task = &state.task;
            (task.layers.clone(), task.session, task.operator_sid)
        };
        self.resolver().place(Route {
            agent,
            layers: &layers,
            session,
            operator_sid,
        })
    }

    /// Phase 1 (under the task's lock): open the attempt and queue its record.
    fn prepare(
        &self,
        cell: &Arc<TaskCell>,
        placement: Placement,
    ) -> Option<(Prepared, Minted, Arc<dyn SpawnerAdapter>)> {
        let now_ms = self.inner.clock.now_ms();
        let now = Instant::now();
        let mut state = cell.lock();
        if state.task.status().is_terminal() {
            return None;
        }
        state.waiting_since_ms = None;
        let stack = match placement.stack {
            Ok(stack) => stack,
            Err(error) => {
                // Nothing can run this task: fail it without an attempt.
                let reason = format!("link failed: {error}");
                drop(state);
                self.fail_unrunnable(cell, reason);
                return None;
            }
        };
        let (base_kind, allow_subtasks, credential_leaves) = placement
            .profile
            .map_or((SpawnerKind::InProcess, false, false), |p| {
                (p.kind, p.allow_subtasks, p.credential_leaves)
            });
        let verbs = crate::worker_api::worker_verbs(allow_subtasks);
        if let Some(over) = state.task.policy.budget_spent(&state.task.usage) {
            // Earlier attempts spent the budget: no attempt starts again.
            drop(state);
            self.inner.stats.usage.budget_stop(over.limit);
            self.fail_unrunnable(cell, over.reason);
            return None;
        }
        let attempt = match state.task.start_attempt(now_ms) {
            Ok(a) => a,
            Err(_) => return None,
        };
        Span::current().record("attempt", attempt);
        let lease_secs = state.task.policy.attempt_timeout_secs;
        let (lease_deadline, lease_deadline_ms) = lease_until(now, now_ms, lease_secs);
        // Where the attempt runs is decided here, once: the record names it,
        // recovery reads it, and the stack follows `ctx.delegated`.
        let ctx = ctx_for(&state.task, attempt, lease_deadline_ms, placement.delegated);
        let kind = if ctx.delegated {
            SpawnerKind::Operator
        } else {
            base_kind
        };
        let cancel = CancellationToken::new();
        let mut run = RunState {
            attempt,
            open: true,
            cancel: cancel.clone(),
            lease_deadline,
            lease_deadline_ms,
            lease_secs,
            spawner: kind,
            started_ms: now_ms,
            posted: None,
            posted_tx: watch::Sender::new(false),
            token_exp_secs: 0,
            verbs,
            last_final: None,
            next_seq: 1,
            output_bytes: 0,
            stopped: None,
            process_group: None,
            usage: Default::default(),
            over_budget: None,
        };
        let record = run.open_record(state.task.id);
        let mut ops = Vec::with_capacity(3);
        let credential = match self.mint(AttemptId::new(state.task.id, attempt), &run.verbs) {
            Ok((credential, digest, handle)) => {
                run.token_exp_secs = credential.expires_secs();
                ops.push(WriteOp::PutHandle {
                    digest,
                    record: handle,
                });
                Ok(credential)
            }
            Err(error) => Err(format!("could not mint a credential: {error}")),
        };
        state.run = Some(run);
        let task = state.task.clone();
        let events = vec![(
            task.session,
            Event::AttemptStarted {
                task_id: task.id,
                attempt,
                lease_deadline_ms: record.lease_deadline_ms,
            },
        )];
        ops.push(WriteOp::PutTask(Box::new(task)));
        ops.push(WriteOp::PutAttempt(record));
        // In-process workers die with the daemon, so their spawn need not
        // wait for this commit; a delegated SubAgent holds its credential
        // across a restart, so it must be durable before the frame goes out,
        // and so must a credential a pool takes elsewhere, where another
        // node of a cluster reads it from the database.
        let durable = if kind.survives_restart() || (credential_leaves && !ctx.delegated) {
            Some(self.inner.ledger.submit(ops, events))
        } else {
            self.inner.ledger.bus.submit(ops, events, None);
            None
        };
        drop(state);
        self.inner
            .stats
            .attempts_started
            .fetch_add(1, Ordering::Relaxed);
        let prepared = Prepared {
            ctx,
            cancel,
            started: now,
        };
        Some((
            prepared,
            Minted {
                credential,
                durable,
            },
            stack,
        ))
    }

    /// Records the host process group an open attempt's worker runs in, so
    /// that recovery can stop it if the daemon dies first. The write is
    /// queued, not awaited: it only matters after a crash, and a worker that
    /// started is recorded as soon as the store allows.
    pub(crate) fn record_process_group(&self, id: AttemptId, group: ProcessGroupMark) {
        let Some(cell) = self.inner.held.live.get(&id.task) else {
            return;
        };
        let mut state = cell.lock();
        let Some(run) = state.run.as_mut().filter(|r| r.attempt == id.n && r.open) else {
            return;
        };
        run.process_group = Some(group);
        let record = run.open_record(id.task);
        // Queued under the task's lock, so the attempt's end is written after it.
        self.inner
            .ledger
            .bus
            .submit(vec![WriteOp::PutAttempt(record)], Vec::new(), None);
    }

    /// Phases 2–4: mint the credential, spawn, and join raced against cancel
    /// and the lease. The spawn runs in its own allocation, freed before the
    /// join, so a task waiting on its worker holds only the join's state.
    async fn spawn_and_join(
        &self,
        cell: &Arc<TaskCell>,
        p: &Prepared,
        minted: Minted,
        stack: Arc<dyn SpawnerAdapter>,
    ) -> Joined {
        match Box::pin(self.spawn_worker(p, minted, stack)).await {
            Ok(worker) => self.join(cell, p, worker).await,
            Err(joined) => joined,
        }
    }

    /// Phases 2–3: wait for the attempt's record if it must be durable first,
    /// then spawn through the stack, raced against cancel and shutdown.
    async fn spawn_worker(
        &self,
        p: &Prepared,
        minted: Minted,
        stack: Arc<dyn SpawnerAdapter>,
    ) -> Result<Box<dyn Worker>, Joined> {
        let credential = match minted.credential {
            Ok(c) => c,
            Err(reason) => return Err(Joined::Worker(Err(WorkerError::Failed(reason)))),
        };
        if let Some(durable) = minted.durable
            && let Err(error) = crate::ledger::wait_commit(durable).await
        {
            let reason = format!("could not record the attempt: {error}");
            return Err(Joined::Worker(Err(WorkerError::Failed(reason))));
        }
        let attempt = Attempt {
            ctx: p.ctx.clone(),
            credential,
            host: Arc::new(EngineHost {
                engine: self.clone(),
                id: p.ctx.id,
            }),
        };
        let spawned = tokio::select! {
            biased;
            _ = p.cancel.cancelled() => return Err(Joined::Stopped(Stopped::Cancelled)),
            _ = self.inner.shutdown.cancelled() => return Err(Joined::Stopped(Stopped::Interrupted)),
            r = stack.spawn(attempt) => r,
        };
        self.inner
            .stats
            .dispatch_latency
            .observe(p.started.elapsed());
        spawned.map_err(|error| Joined::Worker(Err(WorkerError::Failed(error.to_string()))))
    }

    async fn join(&self, cell: &Arc<TaskCell>, p: &Prepared, worker: Box<dyn Worker>) -> Joined {
        let worker_cancel = worker.cancel_token();
        let join = worker.join();
        tokio::pin!(join);
        let outcome = loop {
            let deadline = match cell.lock().run.as_ref() {
                Some(run) if run.attempt == p.ctx.id.n => run.lease_deadline,
                _ => break Joined::Stopped(Stopped::Cancelled),
            };
            tokio::select! {
                biased;
                r = &mut join => return Joined::Worker(r),
                _ = p.cancel.cancelled() => break Joined::Stopped(Stopped::Cancelled),
                _ = self.inner.shutdown.cancelled() => break Joined::Stopped(Stopped::Interrupted),
                _ = tokio::time::sleep_until(deadline) => {
                    let extended = cell
                        .lock()
                        .run
                        .as_ref()
                        .is_some_and(|r| r.lease_deadline > Instant::now());
                    if !extended {
                        break Joined::Stopped(Stopped::LeaseExpired);
                    }
                }
            }
        };
        // Stop the worker and wait for it, bounded, so nothing outlives the
        // attempt. The layers see only the cancel: keep the reason for them.
        let mut outcome = outcome;
        if let Joined::Stopped(stopped) = &mut outcome
            && let Some(run) = cell.lock().run.as_mut().filter(|r| r.attempt == p.ctx.id.n)
        {
            if run.over_budget.is_some() {
                // The engine cancelled the attempt itself, over budget.
                *stopped = Stopped::OverBudget;
            }
            run.stopped = Some(*stopped);
        }
        worker_cancel.cancel();
        let grace = self.inner.config.kill_grace + Duration::from_secs(1);
        if tokio::time::timeout(grace, &mut join).await.is_err() {
            tracing::warn!(attempt = %p.ctx.id, "worker did not stop within the grace period");
        }
        outcome
    }

    /// Fails a task that cannot run: its agent cannot be linked (its config
    /// changed under it), or it waited too long for somewhere to run.
    fn fail_unrunnable(&self, cell: &Arc<TaskCell>, reason: String) {
        let now_ms = self.inner.clock.now_ms();
        let mut state = cell.lock();
        let id = state.task.id;
        if state
            .task
            .finish(AttemptOutcome::Failed, None, Some(reason), now_ms)
            .is_err()
        {
            return;
        }
        let task = state.task.clone();
        drop(state);
        // Nobody waits for this write; the task leaves memory either way.
        let took = task.duration_ms();
        self.inner
            .stats
            .finished(&task.agent, TaskStatus::Failed, took);
        drop(crate::cancel::submit_failed(&self.inner.ledger, task));
        self.inner.held.retire(cell, id);
    }

    fn release_slot(&self, agent: &str) {
        let start = self.inner.held.admission().release(agent);
        self.start(start);
    }

    /// Mints the attempt's token and handle and registers the handle in
    /// memory; the caller queues the handle's store write.
    fn mint(
        &self,
        id: AttemptId,
        verbs: &[crate::gate::Verb],
    ) -> Result<(WorkerCredential, [u8; 32], crate::store::HandleRecord), crate::EngineError> {
        let (token, expires_secs) = self.workers().mint_worker_token(id, verbs)?;
        let handle = crate::auth::WorkerHandle::generate();
        let digest = handle.digest();
        let record = crate::store::HandleRecord {
            task_id: id.task,
            attempt: id.n,
            verbs: verbs.to_vec(),
            exp_secs: expires_secs,
        };
        self.inner.held.handles().insert(digest, record.clone());
        let credential = WorkerCredential::new(
            token.expose().to_owned(),
            handle.expose().to_owned(),
            expires_secs,
        );
        Ok((credential, digest, record))
    }
}

/// The context of one attempt; `delegated` is the resolver's answer for
/// this attempt (the session may have come or gone since the last one).
/// It carries the task's facts the stack's layers and spawners read (the
/// long-hold threshold, what it continues), so that they need not read
/// the task back through the host.
pub(super) fn ctx_for(
    task: &crate::task::Task,
    attempt: u32,
    lease_deadline_ms: u64,
    delegated: bool,
) -> Ctx {
    Ctx {
        id: AttemptId::new(task.id, attempt),
        agent: task.agent.clone(),
        layers: task.layers.clone(),
        session: task.session,
        operator_sid: task.operator_sid,
        lease_deadline_ms,
        delegated,
        long_hold_warn_secs: task.policy.long_hold_warn_secs,
        continued_from: task.continued_from,
        resume_session: task.resume.as_ref().and_then(|r| r.session_id.clone()),
        meta: Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use swarmd_output_store::MemoryOutputStore;

    use crate::clock::ManualClock;
    use crate::store::MemoryTaskStore;
    use crate::testing::{StaticResolver, engine_with};

    /// Every waiting attempt holds this future; 100 000 of them must fit the
    /// memory floor of docs/benchmarks.md with room to spare. The spawn and decide phases
    /// are boxed so that their state is not held while the worker runs.
    #[tokio::test]
    async fn a_waiting_attempt_holds_a_small_future() {
        let engine = engine_with(
            Arc::new(StaticResolver::new()),
            Arc::new(MemoryTaskStore::new()),
            Arc::new(MemoryOutputStore::new()),
            crate::EngineConfig::default(),
            Arc::new(ManualClock::new(0)),
        );
        let attempt = engine.dispatch_attempt(crate::ids::TaskId::new(), "a".into());
        let size = std::mem::size_of_val(&attempt);
        assert!(size <= 1024, "dispatch_attempt's future is {size} bytes");
    }
}
