//! Phases 5–6 of `dispatch_attempt` (docs/tasks.md, Attempts): decide the attempt's outcome
//! by the rule in `outcome`, then retry or finish the task, durably, and
//! publish.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Joined, Prepared};
use crate::Engine;
use crate::event::Event;
use crate::ids::TaskId;
use crate::live::TaskCell;
use crate::outcome::Verdict;
use crate::store::WriteOp;
use crate::task::{AttemptOutcome, AttemptRecord, TaskResult};

impl Engine {
    /// Phases 5–6: decide the outcome by the one rule (`outcome`), then
    /// retry or finish, and publish.
    pub(super) async fn decide(&self, cell: &Arc<TaskCell>, p: Prepared, joined: Joined) {
        let ended = Instant::now();
        let end = match joined {
            Joined::Worker(joined) => self.appends().attempt_end(p.ctx.id, joined).await,
            Joined::Stopped(stopped) => stopped.end(),
        };
        let Verdict {
            outcome,
            result,
            reason,
        } = end.verdict();
        self.settle(cell, p, outcome, result, reason).await;
        self.inner.stats.settle_latency.observe(ended.elapsed());
    }

    async fn settle(
        &self,
        cell: &Arc<TaskCell>,
        p: Prepared,
        mut outcome: AttemptOutcome,
        mut result: Option<TaskResult>,
        mut reason: Option<String>,
    ) {
        let task_id = p.ctx.id.task;
        let now_ms = self.inner.clock.now_ms();
        let elapsed_ms = p.started.elapsed().as_millis() as u64;
        let (agent, retry_after, terminal, done) = {
            let mut state = cell.lock();
            let mut record = None;
            let mut over_budget = None;
            if let Some(run) = state.run.as_mut().filter(|r| r.attempt == p.ctx.id.n) {
                run.open = false;
                over_budget = run.over_budget.take();
                record = Some(AttemptRecord {
                    finished_ms: Some(now_ms),
                    process_group: None,
                    ..run.open_record(task_id)
                });
            }
            if let Some(rec) = &record {
                state.task.usage.add(&rec.usage.totals);
            }
            let already_terminal = state.task.status().is_terminal();
            if already_terminal {
                outcome = AttemptOutcome::Cancelled;
            } else if let Some(over) = &over_budget {
                // Past a budget the attempt fails, whatever its worker did.
                (outcome, result, reason) =
                    (AttemptOutcome::Failed, None, Some(over.reason.clone()));
            }
            let mut events = Vec::new();
            let session = state.task.session;
            events.push((
                session,
                Event::AttemptFinished {
                    task_id,
                    attempt: p.ctx.id.n,
                    outcome,
                    reason: reason.clone(),
                    elapsed_ms,
                },
            ));
            let policy = &state.task.policy;
            let retry = !already_terminal
                && over_budget.is_none()
                && !self.is_draining()
                && policy.retries(outcome)
                && state.task.counted_attempts(p.ctx.id.n) < policy.max_attempts;
            let mut retry_after = None;
            let mut terminal = false;
            if retry {
                let jitter: f64 = rand::random();
                retry_after = Some(Duration::from_millis(
                    policy.backoff_ms(p.ctx.id.n + 1, jitter),
                ));
            } else if !already_terminal
                && state
                    .task
                    .finish(outcome, result.clone(), reason.clone(), now_ms)
                    .is_ok()
            {
                terminal = true;
                events.push((
                    session,
                    Event::TaskFinished {
                        task_id,
                        attempt: p.ctx.id.n,
                        status: state.task.status(),
                        result,
                    },
                ));
            }
            let mut ops = vec![WriteOp::PutTask(Box::new(state.task.clone()))];
            if let Some(mut rec) = record {
                rec.outcome = Some(outcome);
                rec.reason = reason;
                ops.push(WriteOp::PutAttempt(rec));
            }
            let done = self.inner.ledger.submit(ops, events);
            (state.task.agent.clone(), retry_after, terminal, done)
        };
        self.inner.stats.attempt_finished(outcome);
        self.release_slot(&agent);
        if let Err(error) = crate::ledger::wait_commit(done).await {
            tracing::error!(task_id = %task_id, %error, "could not record the attempt's end");
        }
        if terminal {
            let (status, took) = {
                let state = cell.lock();
                (state.task.status(), state.task.duration_ms())
            };
            self.inner.stats.finished(&agent, status, took);
            self.inner.held.retire(cell, task_id);
        }
        if let Some(after) = retry_after {
            self.schedule_retry(task_id, after).await;
        }
    }

    /// Waits the backoff, then queues the task for its next attempt.
    pub(super) async fn schedule_retry(&self, id: TaskId, after: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(after) => {}
            _ = self.inner.shutdown.cancelled() => return,
        }
        self.readmit(id);
    }

    /// Queues a live, unfinished task for its next attempt.
    pub(super) fn readmit(&self, id: TaskId) {
        let Some(cell) = self.inner.held.live.get(&id) else {
            return;
        };
        // The agent and its layers are copied out: the resolver is never
        // asked under a task's lock (the lock order in `engine.rs`).
        let (agent, layers) = {
            let state = cell.lock();
            if state.task.status().is_terminal() {
                return;
            }
            (state.task.agent.clone(), state.task.layers.clone())
        };
        let limit = self.agent_limit(&agent, &layers);
        self.admit(&agent, limit, id);
    }
}
