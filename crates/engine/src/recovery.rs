//! Recovery at start (docs/tasks.md, Recovery), run before the daemon reports ready: an
//! open attempt whose Final was stored before the crash is decided by it;
//! an in-process attempt that died with the old process and can resume (it
//! reported a CLI session and recorded a `worktree` artifact) is closed and
//! the attempt after it resumes that session in its checkout
//! (`resume_interrupted`; docs/tasks.md, Restarts); other in-process
//! attempts fail as `interrupted` (and retry if the policy allows); other
//! delegated attempts keep running with their lease re-armed; queued tasks
//! are queued again.
//!
//! A node of a cluster applies the same rules at run time to the live
//! tasks it takes over from a dead node (`adopt`), except that it leaves
//! the dead node's process groups alone: they are another host's.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Engine;
use crate::continuation::Restart;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::TaskId;
use crate::live::{RunState, TaskCell, lease_until};
use crate::outcome::AttemptEnd;
use crate::store::{LiveSnapshot, SessionRecord, WriteOp};
use crate::task::{AttemptOutcome, AttemptRecord, Task, TaskResult, TaskStatus};

/// What recovery did, for the boot log.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RecoveryReport {
    pub requeued: usize,
    /// Open attempts decided by a Final stored before the crash.
    pub decided: usize,
    pub interrupted: usize,
    /// Interrupted attempts whose next attempt resumes them.
    pub continued: usize,
    pub retried: usize,
    pub resumed: usize,
    pub handles: usize,
    /// Sessions read back from the store, for the server to restore.
    pub sessions: Vec<SessionRecord>,
    /// Delegated attempts that are waiting on an external SubAgent again.
    pub delegated: Vec<(TaskId, u32)>,
}

/// The reason an attempt a restart interrupted is closed with when the
/// attempt after it resumes it.
pub(crate) const RESUMED_REASON: &str = "interrupted; resumed after restart";

/// How many times a task's attempts may be resumed after a restart: a
/// daemon that keeps dying while the task runs ends it `interrupted`.
pub(crate) const MAX_RESTARTS: u32 = 3;

/// Whether the task's closed attempts and this open one used more than a
/// budget.
fn past_budget(task: &Task, attempt: &AttemptRecord) -> bool {
    let mut spent = task.usage;
    spent.add(&attempt.usage.totals);
    task.policy.over_budget(&spent).is_some()
}

/// Whose live tasks recovery reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// This daemon's own, at start.
    Restart,
    /// A dead node's, taken over at run time.
    Takeover,
}

/// Work recovery found but does not start until `start_recovered`.
#[derive(Debug)]
pub(crate) enum Pending {
    Admit {
        agent: String,
        limit: Option<usize>,
        id: TaskId,
    },
    Resume {
        cell: Arc<TaskCell>,
        attempt: u32,
        cancel: CancellationToken,
    },
    /// An in-process attempt that died with the old process and reported a
    /// CLI session: `resume_interrupted` resumes or fails it.
    Interrupted {
        task: Box<Task>,
        attempt: Box<AttemptRecord>,
    },
}

impl Engine {
    async fn recover_snapshot(
        &self,
        snapshot: LiveSnapshot,
        origin: Origin,
    ) -> Result<RecoveryReport, EngineError> {
        let mut report = RecoveryReport {
            handles: snapshot.handles.len(),
            sessions: snapshot.sessions,
            ..RecoveryReport::default()
        };
        {
            let mut handles = self.inner.held.handles();
            for (digest, record) in snapshot.handles {
                handles.insert(digest, record);
            }
        }
        for task in snapshot.tasks {
            let latest = snapshot
                .attempts
                .iter()
                .find(|a| a.task_id == task.id && a.attempt == task.attempt)
                .cloned();
            self.recover_task(task, latest, origin, &mut report).await?;
        }
        self.inner.held.retire_handles_of_finished();
        Ok(report)
    }

    async fn recover_task(
        &self,
        task: Task,
        latest: Option<AttemptRecord>,
        origin: Origin,
        report: &mut RecoveryReport,
    ) -> Result<(), EngineError> {
        let id = task.id;
        let open_attempt = latest.filter(|a| a.outcome.is_none());
        let stored_final = match &open_attempt {
            Some(attempt) if task.status() == TaskStatus::Running => {
                self.inner
                    .ledger
                    .outputs
                    .last_final(id.as_uuid(), attempt.attempt)
                    .await?
            }
            _ => None,
        };
        match (task.status(), open_attempt, stored_final) {
            // The attempt produced its Final (and may have acknowledged it)
            // before the crash: that Final decides it, whatever ran it.
            (TaskStatus::Running, Some(attempt), Some(record)) => {
                report.decided += 1;
                let verdict = AttemptEnd::Finished(Ok(Some(record))).verdict();
                if self
                    .close_recovered(
                        task,
                        attempt,
                        origin,
                        (verdict.outcome, verdict.result, verdict.reason),
                    )
                    .await?
                {
                    report.retried += 1;
                }
            }
            // A delegated attempt past its budget is not resumed: it is
            // closed below, and fails `budget_exceeded` there.
            (TaskStatus::Running, Some(attempt), None)
                if attempt.spawner.survives_restart() && !past_budget(&task, &attempt) =>
            {
                report.resumed += 1;
                report.delegated.push((id, attempt.attempt));
                self.resume_delegated(task, attempt).await?;
            }
            (TaskStatus::Running, Some(attempt), None)
                if origin == Origin::Restart
                    && !attempt.spawner.survives_restart()
                    && task.restarts < MAX_RESTARTS
                    && !past_budget(&task, &attempt)
                    && self
                        .continuations()
                        .session_of(&task, &attempt)
                        .await?
                        .is_some() =>
            {
                report.interrupted += 1;
                // Stopped now, before the worktrees of the old process are
                // concluded; decided once they are (`resume_interrupted`).
                if let Some(group) = &attempt.process_group {
                    self.resolver().reap_leftover(group);
                }
                self.defer(Pending::Interrupted {
                    task: Box::new(task),
                    attempt: Box::new(attempt),
                });
            }
            (TaskStatus::Running, Some(attempt), None) => {
                report.interrupted += 1;
                if self.interrupt(task, attempt, origin).await? {
                    report.retried += 1;
                }
            }
            // Queued, or running between attempts (a retry was pending).
            _ => {
                let agent = task.agent.clone();
                let limit = self.agent_limit(&task.agent, &task.layers);
                self.inner.held.live.insert(TaskCell::new(task));
                self.defer(Pending::Admit { agent, limit, id });
                report.requeued += 1;
            }
        }
        Ok(())
    }

    /// Records an interrupted in-process attempt (or a delegated one past
    /// its budget) as failed; queues a retry when the policy allows one.
    /// Returns whether it did.
    async fn interrupt(
        &self,
        task: Task,
        attempt: AttemptRecord,
        origin: Origin,
    ) -> Result<bool, EngineError> {
        let reason = Some("interrupted".to_owned());
        self.close_recovered(
            task,
            attempt,
            origin,
            (AttemptOutcome::Failed, None, reason),
        )
        .await
    }

    /// Records the end of an attempt that was open at the crash, durably,
    /// and finishes the task or queues a retry (at once: the daemon failed,
    /// not the attempt) as its policy says. Returns whether it retries.
    async fn close_recovered(
        &self,
        mut task: Task,
        mut attempt: AttemptRecord,
        origin: Origin,
        end: (AttemptOutcome, Option<TaskResult>, Option<String>),
    ) -> Result<bool, EngineError> {
        let (mut outcome, mut result, mut reason) = end;
        // A worker that outlived the old daemon must not run beside a retry.
        // A dead node's workers ran on its own host, and die with it.
        if let Some(group) = &attempt.process_group
            && origin == Origin::Restart
        {
            self.resolver().reap_leftover(group);
        }
        task.usage.add(&attempt.usage.totals);
        let over_budget = task.policy.over_budget(&task.usage);
        if let Some(over) = &over_budget {
            // The attempt passed a budget before the crash: it fails so.
            self.inner.stats.usage.budget_stop(over.limit);
            (outcome, result, reason) = (AttemptOutcome::Failed, None, Some(over.reason.clone()));
        }
        let now_ms = self.inner.clock.now_ms();
        attempt.outcome = Some(outcome);
        attempt.reason = reason.clone();
        attempt.finished_ms = Some(now_ms);
        let mut events = vec![(
            task.session,
            Event::AttemptFinished {
                task_id: task.id,
                attempt: attempt.attempt,
                outcome,
                reason: reason.clone(),
                elapsed_ms: now_ms.saturating_sub(attempt.started_ms),
            },
        )];
        let retry = over_budget.is_none()
            && task.policy.retries(outcome)
            && attempt.attempt < task.policy.max_attempts;
        if !retry {
            task.finish(outcome, result.clone(), reason, now_ms)?;
            events.push((
                task.session,
                Event::TaskFinished {
                    task_id: task.id,
                    attempt: attempt.attempt,
                    status: task.status(),
                    result,
                },
            ));
        }
        let ops = vec![
            WriteOp::PutTask(Box::new(task.clone())),
            WriteOp::PutAttempt(attempt),
        ];
        self.inner.ledger.submit_and_wait(ops, events).await?;
        if retry {
            let id = task.id;
            let agent = task.agent.clone();
            let limit = self.agent_limit(&task.agent, &task.layers);
            self.inner.held.live.insert(TaskCell::new(task));
            self.defer(Pending::Admit { agent, limit, id });
        }
        Ok(retry)
    }

    /// The interrupted attempts `recover` left for `resume_interrupted`.
    fn take_interrupted(&self) -> Vec<(Task, AttemptRecord)> {
        let mut recovered = self
            .inner
            .recovered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (interrupted, rest) = std::mem::take(&mut *recovered)
            .into_iter()
            .partition::<Vec<_>, _>(|p| matches!(p, Pending::Interrupted { .. }));
        *recovered = rest;
        interrupted
            .into_iter()
            .filter_map(|p| match p {
                Pending::Interrupted { task, attempt } => Some((*task, *attempt)),
                _ => None,
            })
            .collect()
    }

    /// Closes an attempt a restart interrupted, durably, and queues its
    /// task for the attempt that resumes it: that attempt is not counted
    /// against `policy.max_attempts` (`Task::restarts`).
    async fn close_resumed(
        &self,
        mut task: Task,
        mut attempt: AttemptRecord,
        restart: Restart,
    ) -> Result<(), EngineError> {
        task.usage.add(&attempt.usage.totals);
        let now_ms = self.inner.clock.now_ms();
        let outcome = AttemptOutcome::Failed;
        let reason = Some(RESUMED_REASON.to_owned());
        attempt.outcome = Some(outcome);
        attempt.reason.clone_from(&reason);
        attempt.finished_ms = Some(now_ms);
        tracing::info!(
            task_id = %task.id,
            attempt = attempt.attempt,
            branch = %restart.branch,
            "resuming an attempt the restart interrupted"
        );
        task.restart = Some(restart);
        task.restarts += 1;
        let events = vec![(
            task.session,
            Event::AttemptFinished {
                task_id: task.id,
                attempt: attempt.attempt,
                outcome,
                reason,
                elapsed_ms: now_ms.saturating_sub(attempt.started_ms),
            },
        )];
        let ops = vec![
            WriteOp::PutTask(Box::new(task.clone())),
            WriteOp::PutAttempt(attempt),
        ];
        self.inner.ledger.submit_and_wait(ops, events).await?;
        let id = task.id;
        let agent = task.agent.clone();
        let limit = self.agent_limit(&task.agent, &task.layers);
        self.inner.held.live.insert(TaskCell::new(task));
        self.defer(Pending::Admit { agent, limit, id });
        Ok(())
    }

    /// Puts a delegated attempt back in memory with a fresh lease and waits
    /// for its SubAgent's Final, a cancel, or the lease, like a live attempt.
    async fn resume_delegated(
        &self,
        task: Task,
        attempt: AttemptRecord,
    ) -> Result<(), EngineError> {
        // The attempt's outputs so far are stored; new ones go on after them.
        let last_seq = self
            .inner
            .ledger
            .outputs
            .last_seq(task.id.as_uuid(), attempt.attempt)
            .await?;
        let now_ms = self.inner.clock.now_ms();
        let lease_secs = task.policy.attempt_timeout_secs;
        let (lease_deadline, lease_deadline_ms) = lease_until(Instant::now(), now_ms, lease_secs);
        let cancel = CancellationToken::new();
        let allow_subtasks = self
            .resolver()
            .profile(&task.agent, &task.layers)
            .is_ok_and(|p| p.allow_subtasks);
        let cell = TaskCell::new(task.clone());
        cell.lock().run = Some(RunState {
            attempt: attempt.attempt,
            open: true,
            cancel: cancel.clone(),
            lease_deadline,
            lease_deadline_ms,
            lease_secs,
            spawner: attempt.spawner,
            started_ms: attempt.started_ms,
            posted: None,
            posted_tx: watch::Sender::new(false),
            token_exp_secs: 0,
            verbs: crate::worker_api::worker_verbs(allow_subtasks),
            last_final: None,
            next_seq: last_seq + 1,
            output_bytes: 0,
            stopped: None,
            process_group: attempt.process_group.clone(),
            usage: attempt.usage.clone(),
            over_budget: None,
        });
        self.inner.held.live.insert(cell.clone());
        // The resumed attempt holds a running slot like any other.
        let limit = self.agent_limit(&task.agent, &task.layers);
        self.inner.held.admission().occupy(&task.agent, limit);
        self.defer(Pending::Resume {
            cell,
            attempt: attempt.attempt,
            cancel,
        });
        Ok(())
    }

    fn defer(&self, pending: Pending) {
        self.inner
            .recovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pending);
    }
}

pub(crate) async fn recover(engine: &Engine) -> Result<RecoveryReport, EngineError> {
    let now_secs = engine.inner.clock.now_secs();
    let snapshot = engine.inner.ledger.store.load_live(now_secs).await?;
    engine
        .inner
        .ledger
        .bus
        .resume_after(snapshot.last_event_seq);
    engine.recover_snapshot(snapshot, Origin::Restart).await
}

pub(crate) async fn adopt(
    engine: &Engine,
    mut snapshot: LiveSnapshot,
) -> Result<RecoveryReport, EngineError> {
    snapshot
        .tasks
        .retain(|task| engine.inner.held.live.get(&task.id).is_none());
    snapshot.sessions.clear();
    let report = engine.recover_snapshot(snapshot, Origin::Takeover).await?;
    engine.start_recovered();
    Ok(report)
}

pub(crate) async fn resume_interrupted(
    engine: &Engine,
    report: &mut RecoveryReport,
) -> Result<(), EngineError> {
    for (task, attempt) in engine.take_interrupted() {
        match engine.continuations().restart_of(&task, &attempt).await? {
            Some(restart) => {
                report.continued += 1;
                engine.close_resumed(task, attempt, restart).await?;
            }
            None => {
                if engine.interrupt(task, attempt, Origin::Restart).await? {
                    report.retried += 1;
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn start_recovered(engine: &Engine) {
    let pending = std::mem::take(
        &mut *engine
            .inner
            .recovered
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    let mut undecided = Vec::new();
    for item in pending {
        match item {
            Pending::Interrupted { .. } => undecided.push(item),
            Pending::Admit { agent, limit, id } => engine.admit(&agent, limit, id),
            Pending::Resume {
                cell,
                attempt,
                cancel,
            } => {
                let resumer = engine.clone();
                engine.inner.tracker.spawn(async move {
                    resumer.dispatch_resumed(cell, attempt, cancel).await;
                });
            }
        }
    }
    if !undecided.is_empty() {
        for item in undecided {
            engine.defer(item);
        }
        let decider = engine.clone();
        engine.inner.tracker.spawn(async move {
            let mut report = RecoveryReport::default();
            if let Err(error) = decider.resume_interrupted(&mut report).await {
                tracing::warn!(%error, "interrupted attempts were not decided");
            }
            decider.start_recovered();
        });
    }
}
