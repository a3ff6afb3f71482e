//! Ending a task from outside its attempt: cancel (docs/tasks.md, Cancel) and the
//! queue timeout of a task that never started.

use std::sync::Arc;

use crate::clock::Clock;
use crate::error::EngineError;
use crate::event::Event;
use crate::held::Held;
use crate::ids::TaskId;
use crate::ledger::{Committed, Ledger, wait_commit};
use crate::live::TaskCell;
use crate::metrics::EngineStats;
use crate::store::WriteOp;
use crate::task::{AttemptOutcome, Task, TaskStatus};

/// What ending a task from outside its attempt reaches of the engine: the
/// held tasks, the ledger, the clock and the counters.
pub(crate) struct Ending<'a> {
    pub held: &'a Held,
    pub ledger: &'a Ledger,
    pub clock: &'a dyn Clock,
    pub stats: &'a EngineStats,
}

/// Where a cancel stands once its change is made in memory.
pub(crate) enum Begun {
    /// Nothing left to do: the task as it stands.
    Ended(Task),
    /// Its write is on its way; the task is retired once it is durable
    /// (`retire_cancelled`).
    Writing {
        task: Task,
        committed: Committed,
        cell: Arc<TaskCell>,
    },
}

impl Ending<'_> {
    /// Cancels a task (`Engine::cancel_task`) in memory and queues its
    /// write.
    pub(crate) async fn cancel(
        &self,
        id: TaskId,
        mut reason: Option<String>,
    ) -> Result<Begun, EngineError> {
        if let Some(reason) = &mut reason {
            clip(reason, MAX_CANCEL_REASON);
        }
        let Some(cell) = self.held.live.get(&id) else {
            let task = self.ledger.stored_task(id).await?;
            return match task.status() {
                TaskStatus::Cancelled => Ok(Begun::Ended(task)),
                _ => Err(EngineError::TaskTerminal),
            };
        };
        let now = self.clock.now_ms();
        let (task, done) = {
            let mut state = cell.lock();
            match state.task.status() {
                TaskStatus::Cancelled => return Ok(Begun::Ended(state.task.clone())),
                s if s.is_terminal() => return Err(EngineError::TaskTerminal),
                _ => {}
            }
            // A Final the open attempt already accepted (and acknowledged,
            // or is about to) decides the task: the cancel loses, and says
            // so. A claim whose post went away before it queued its Final
            // holds none: the cancel withdraws it and wins.
            let mut withdrawn = None;
            if let Some(run) = state.run.as_mut().filter(|r| r.open)
                && let Some(posted) = &run.posted
            {
                if !posted.abandoned() {
                    return Err(EngineError::AlreadyFinal);
                }
                run.posted = None;
                withdrawn = Some(WriteOp::DeletePostedFinal {
                    task_id: id,
                    attempt: run.attempt,
                });
            }
            let was_queued = state.task.status() == TaskStatus::Queued
                || state.run.as_ref().is_none_or(|r| !r.open);
            if let Some(run) = state.run.as_mut() {
                run.open = false;
                run.cancel.cancel();
            }
            state
                .task
                .finish(AttemptOutcome::Cancelled, None, reason.clone(), now)?;
            if was_queued {
                self.held
                    .admission()
                    .remove(&state.task.agent, state.task.id);
            }
            let task = state.task.clone();
            let events = vec![
                (
                    task.session,
                    Event::TaskCancelled {
                        task_id: id,
                        reason,
                    },
                ),
                (
                    task.session,
                    Event::TaskFinished {
                        task_id: id,
                        attempt: task.attempt,
                        status: TaskStatus::Cancelled,
                        result: None,
                    },
                ),
            ];
            let mut ops = vec![WriteOp::PutTask(Box::new(task.clone()))];
            ops.extend(withdrawn);
            let done = self.ledger.submit(ops, events);
            (task, done)
        };
        Ok(Begun::Writing {
            task,
            committed: done,
            cell,
        })
    }

    /// Counts a cancelled task whose write is durable and lets it go.
    pub(crate) fn retire_cancelled(&self, task: &Task, cell: &Arc<TaskCell>) {
        self.stats
            .finished(&task.agent, TaskStatus::Cancelled, task.duration_ms());
        self.held.retire(cell, task.id);
    }

    /// Fails a task still waiting for its first attempt (queue timeout).
    pub(crate) async fn expire_queued(&self, id: TaskId) {
        let Some(cell) = self.held.live.get(&id) else {
            return;
        };
        let now = self.clock.now_ms();
        let done = {
            let mut state = cell.lock();
            if state.task.status() != TaskStatus::Queued {
                return;
            }
            let reason = Some("queue timeout".to_owned());
            if state
                .task
                .finish(AttemptOutcome::Failed, None, reason, now)
                .is_err()
            {
                return;
            }
            self.held.admission().remove(&state.task.agent, id);
            let took = state.task.duration_ms();
            (
                submit_failed(self.ledger, state.task.clone()),
                state.task.agent.clone(),
                took,
            )
        };
        let (done, agent, took) = done;
        if let Err(error) = wait_commit(done).await {
            tracing::error!(task_id = %id, %error, "could not record queue timeout");
        }
        self.stats.finished(&agent, TaskStatus::Failed, took);
        self.held.retire(&cell, id);
    }
}

/// Queues the write that records `task`, failed without an attempt
/// deciding it, with its `task_finished` event; resolves once durable.
pub(crate) fn submit_failed(ledger: &Ledger, task: Task) -> Committed {
    let events = vec![(
        task.session,
        Event::TaskFinished {
            task_id: task.id,
            attempt: task.attempt,
            status: TaskStatus::Failed,
            result: None,
        },
    )];
    ledger.submit(vec![WriteOp::PutTask(Box::new(task))], events)
}

/// The longest reason a cancel keeps, in bytes: the routes that take a
/// client's reason refuse a longer one; the engine's own callers (a senior's
/// verdict, a Lua host) are cut to it.
pub const MAX_CANCEL_REASON: usize = 1024;

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn clip(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_cuts_at_a_character_boundary() {
        let mut text = "ab€".to_owned(); // '€' is three bytes: 2..5
        clip(&mut text, 4);
        assert_eq!(text, "ab");
        let mut text = "abc".to_owned();
        clip(&mut text, 3);
        assert_eq!(text, "abc");
    }
}
