//! Ending a task from outside its attempt: cancel (docs/tasks.md, Cancel) and the
//! queue timeout of a task that never started.

use crate::Engine;
use crate::engine::wait_commit;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::TaskId;
use crate::store::WriteOp;
use crate::task::{AttemptOutcome, Task, TaskStatus};

impl Engine {
    /// Cancels a task (docs/tasks.md, Cancel): fences its attempt, fires the worker's
    /// cancellation, and makes it `cancelled`. Cancelling a cancelled task
    /// returns it unchanged; any other terminal task is `TaskTerminal`, and a
    /// task whose open attempt already accepted a posted Final is
    /// `AlreadyFinal`: exactly one of the result and the cancel wins.
    pub async fn cancel_task(
        &self,
        id: TaskId,
        reason: Option<String>,
    ) -> Result<Task, EngineError> {
        let Some(cell) = self.inner.live.get(&id) else {
            let task = self
                .inner
                .store
                .task(id)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("task {id}")))?;
            return match task.status() {
                TaskStatus::Cancelled => Ok(task),
                _ => Err(EngineError::TaskTerminal),
            };
        };
        let now = self.inner.clock.now_ms();
        let (task, done) = {
            let mut state = cell.lock();
            match state.task.status() {
                TaskStatus::Cancelled => return Ok(state.task.clone()),
                s if s.is_terminal() => return Err(EngineError::TaskTerminal),
                _ => {}
            }
            // A Final the open attempt already accepted (and acknowledged,
            // or is about to) decides the task: the cancel loses, and says so.
            if state
                .run
                .as_ref()
                .is_some_and(|r| r.open && r.posted.is_some())
            {
                return Err(EngineError::AlreadyFinal);
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
                self.admission().remove(&state.task.agent, state.task.id);
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
            let done = self.submit(vec![WriteOp::PutTask(Box::new(task.clone()))], events);
            (task, done)
        };
        wait_commit(done).await?;
        self.inner
            .stats
            .finished(&task.agent, TaskStatus::Cancelled, task.duration_ms());
        self.retire(&cell, id);
        Ok(task)
    }

    /// Fails a task still waiting for its first attempt (queue timeout).
    pub(crate) async fn expire_queued(&self, id: TaskId) {
        let Some(cell) = self.inner.live.get(&id) else {
            return;
        };
        let now = self.inner.clock.now_ms();
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
            self.admission().remove(&state.task.agent, id);
            let took = state.task.duration_ms();
            (
                self.submit_failed(state.task.clone()),
                state.task.agent.clone(),
                took,
            )
        };
        let (done, agent, took) = done;
        if let Err(error) = wait_commit(done).await {
            tracing::error!(task_id = %id, %error, "could not record queue timeout");
        }
        self.inner.stats.finished(&agent, TaskStatus::Failed, took);
        self.retire(&cell, id);
    }

    /// Queues the write that records `task`, failed without an attempt
    /// deciding it, with its `task_finished` event; resolves once durable.
    pub(crate) fn submit_failed(
        &self,
        task: Task,
    ) -> tokio::sync::oneshot::Receiver<Result<(), swarmd_output_store::StoreError>> {
        let events = vec![(
            task.session,
            Event::TaskFinished {
                task_id: task.id,
                attempt: task.attempt,
                status: TaskStatus::Failed,
                result: None,
            },
        )];
        self.submit(vec![WriteOp::PutTask(Box::new(task))], events)
    }
}
