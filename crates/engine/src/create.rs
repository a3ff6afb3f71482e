//! Task creation (docs/tasks.md, Tasks): validation, the parent's depth, sub-tasks of
//! a worker behind its attempt's fence, continuations (`continuation`),
//! idempotency keys, the durable record, and admission.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::Engine;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{SessionId, TaskId};
use crate::ledger::wait_then;
use crate::live::TaskCell;
use crate::runs::check_run_ops;
use crate::store::{KeyClaim, WriteOp};
use crate::task::{Policy, Task, TaskSpec};
use crate::worker_api::WorkerAuth;

const MAX_AGENT_NAME: usize = 128;
const MAX_IDEMPOTENCY_KEY: usize = 256;
/// The longest `start_from` branch name.
const MAX_START_FROM: usize = 255;

/// Writes and events that commit with a task's record (`create_task_with`).
pub type RunWrites = (Vec<WriteOp>, Vec<(Option<SessionId>, Event)>);

/// Builds the writes that commit with a task, given the task.
type Extra<'a> = Box<dyn FnOnce(&Task) -> RunWrites + Send + 'a>;

fn no_extra<'a>() -> Extra<'a> {
    Box::new(|_| RunWrites::default())
}

impl Engine {
    /// The one creation path; `extra` rides in the task's write batch, or
    /// in a batch of its own when the task is a replay. A spec naming
    /// `continue_from` is checked against that task and completed first
    /// (`Continuations::continuing`); `worker` is the task of the worker
    /// creating a sub-task, which may continue only its own sub-tasks.
    async fn create(
        &self,
        mut spec: TaskSpec,
        depth: u32,
        worker: Option<TaskId>,
        extra: Extra<'_>,
    ) -> Result<Task, EngineError> {
        let resume = match spec.continue_from {
            Some(from) => Some(
                self.continuations()
                    .continuing(from, &mut spec, worker)
                    .await?,
            ),
            None => None,
        };
        validate_spec(&spec)?;
        let profile = self
            .resolver()
            .check_new(&spec.agent, &spec.layers, spec.input.as_ref())?;
        if depth > self.inner.config.max_spawn_depth {
            return Err(EngineError::DepthExceeded {
                depth,
                limit: self.inner.config.max_spawn_depth,
            });
        }
        let id = TaskId::new();
        let policy = Policy::resolve(&spec.policy, &self.inner.config.defaults);
        let now = self.inner.clock.now_ms();
        let key = spec.idempotency_key.clone();
        let mut task = Task::new(id, spec, policy, depth, now);
        task.resume = resume;
        let cell = TaskCell::with_key(task.clone(), key.clone());
        match &key {
            Some(key) => {
                if let Some(existing) = self.claim_key(key, cell).await? {
                    let replayed = self.replay(existing, &task).await?;
                    let (ops, events) = extra(&replayed);
                    check_run_ops(&ops)?;
                    if !ops.is_empty() || !events.is_empty() {
                        self.inner.ledger.submit_and_wait(ops, events).await?;
                    }
                    return Ok(replayed);
                }
            }
            None => self.inner.held.live.insert(cell),
        }
        let task_key = key.clone();
        let mut ops = vec![WriteOp::PutTask(Box::new(task.clone()))];
        if let Some(key) = key {
            ops.push(WriteOp::IdempotencyKey { key, task_id: id });
        }
        let (extra_ops, extra_events) = extra(&task);
        if let Err(refused) = check_run_ops(&extra_ops) {
            // Nothing was submitted: the task only goes back out of memory.
            if let Some(key) = &task_key {
                self.inner.held.keys().remove(key);
                self.release_claim(key, id).await;
            }
            self.inner.held.live.remove(&id);
            return Err(refused);
        }
        ops.extend(extra_ops);
        let mut events = vec![
            (
                task.session,
                Event::TaskCreated {
                    task_id: id,
                    agent: task.agent.clone(),
                    parent: task.parent,
                },
            ),
            (task.session, Event::TaskQueued { task_id: id }),
        ];
        events.extend(extra_events);
        // The task is admitted as soon as its record is queued, not once it
        // is durable: its attempt's writes queue behind this batch, so they
        // commit in the same group commit or a later one, and nothing about
        // the attempt leaves the daemon before its own (later) commit. The
        // caller hears back only once the task itself is durable.
        let recorded = self.inner.ledger.submit(ops, events);
        self.admit(&task.agent, profile.concurrency, id);
        // Armed with the admission, before the wait: a creator dropped
        // during the wait leaves a task that still expires. A task whose
        // record fails is withdrawn, which the timer then finds ended.
        if let Some(secs) = task.policy.queue_timeout_secs {
            self.arm_queue_timeout(id, Duration::from_secs(secs));
        }
        // A record that fails is withdrawn, also when the creator was
        // dropped meanwhile (`wait_then`).
        let engine = self.clone();
        wait_then(recorded, move |durable| async move {
            if !durable {
                // Boxed: the cancel path inline would size every creation's
                // future, which its callers move whole.
                Box::pin(engine.abandon_unrecorded(id, task_key.as_deref())).await;
            }
        })
        .await?;
        self.inner
            .stats
            .tasks_created
            .fetch_add(1, Ordering::Relaxed);
        Ok(task)
    }

    /// Withdraws a task whose record could not be written, through the
    /// cancel path (out of admission, its attempt fenced and stopped). The
    /// caller gets the write error, so the task was never acknowledged; if
    /// a later commit does succeed it records the task as cancelled.
    async fn abandon_unrecorded(&self, id: TaskId, key: Option<&str>) {
        let reason = "its record could not be written".to_owned();
        if let Err(error) = self.cancel_task(id, Some(reason)).await {
            tracing::warn!(task_id = %id, %error, "could not withdraw an unrecorded task");
        }
        if let Some(key) = key {
            self.inner.held.keys().remove(key);
            self.release_claim(key, id).await;
        }
        self.inner.held.live.remove(&id);
    }

    /// Gives a task's key claim back to the store; a claim left behind
    /// names a task that was never recorded, which the store's claim rule
    /// sees through once its claimant is gone.
    async fn release_claim(&self, key: &str, id: TaskId) {
        if let Err(error) = self.inner.ledger.store.release_key(key, id).await {
            tracing::warn!(task_id = %id, %error, "could not release an idempotency key claim");
        }
    }

    /// Returns the task an idempotency key already names, or claims the key
    /// for the task of `cell`. The cell goes live before the key is
    /// published, under the key map's lock: whoever finds the key finds its
    /// task, in memory or (once it retired) in the store.
    async fn claim_key(
        &self,
        key: &str,
        cell: Arc<TaskCell>,
    ) -> Result<Option<TaskId>, EngineError> {
        if let Some(existing) = self.inner.held.keys().get(key).copied() {
            return Ok(Some(existing));
        }
        let id = cell.lock().task.id;
        if let KeyClaim::Taken(existing) = self.inner.ledger.store.claim_key(key, id).await? {
            return Ok(Some(existing));
        }
        let raced = {
            let mut keys = self.inner.held.keys();
            match keys.get(key).copied() {
                Some(existing) => Some(existing),
                None => {
                    self.inner.held.live.insert(cell);
                    keys.insert(key.to_owned(), id);
                    None
                }
            }
        };
        if let Some(existing) = raced {
            // A creation of this process with the same key won the key map
            // meanwhile (only a store this process alone writes lets both
            // through its claim); this task's claim is given back.
            self.release_claim(key, id).await;
            return Ok(Some(existing));
        }
        Ok(None)
    }

    /// The answer to a retried creation: the task its key names, when the
    /// retry asks for the same task.
    async fn replay(&self, existing: TaskId, retry: &Task) -> Result<Task, EngineError> {
        let task = self
            .get_task(existing)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("task {existing}")))?;
        // A retry must be the same request; a reused key with another
        // request is a client bug, not a retry.
        if !same_request(&task, retry) {
            return Err(EngineError::IdempotencyConflict);
        }
        Ok(task)
    }

    pub(crate) fn arm_queue_timeout(&self, id: TaskId, after: Duration) {
        let engine = self.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(after) => engine.ending().expire_queued(id).await,
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

pub(crate) async fn create_task_with<F>(
    engine: &Engine,
    spec: TaskSpec,
    extra: F,
) -> Result<Task, EngineError>
where
    F: FnOnce(&Task) -> RunWrites + Send,
{
    if engine.is_draining() {
        return Err(EngineError::Draining);
    }
    let depth = match spec.parent {
        Some(parent) => {
            let parent = engine
                .get_task(parent)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("parent task {parent}")))?;
            parent.depth + 1
        }
        None => 0,
    };
    engine.create(spec, depth, None, Box::new(extra)).await
}

pub(crate) async fn create_subtask(
    engine: &Engine,
    parent: &WorkerAuth,
    mut spec: TaskSpec,
) -> Result<Task, EngineError> {
    if engine.is_draining() {
        return Err(EngineError::Draining);
    }
    let cell = engine.inner.held.cell(parent.attempt.task)?;
    let (session, depth) = {
        let state = cell.lock();
        state.check_open(parent.attempt.n)?;
        (state.task.session, state.task.depth)
    };
    spec.parent = Some(parent.attempt.task);
    spec.session = session;
    let worker = Some(parent.attempt.task);
    engine.create(spec, depth + 1, worker, no_extra()).await
}

/// Whether `retry` (built from a retried request) asks for what `task` is.
fn same_request(task: &Task, retry: &Task) -> bool {
    task.agent == retry.agent
        && task.prompt == retry.prompt
        && task.system == retry.system
        && task.input == retry.input
        && task.metadata == retry.metadata
        && task.layers == retry.layers
        && task.parent == retry.parent
        && task.session == retry.session
        && task.operator_sid == retry.operator_sid
        && task.continued_from == retry.continued_from
        && task.policy == retry.policy
}

fn validate_spec(spec: &TaskSpec) -> Result<(), EngineError> {
    if let Some(branch) = &spec.start_from {
        // git checks the name again (as a local branch only) when an
        // attempt starts; this keeps anything that is no branch name out
        // of the task record.
        let plain = !branch.is_empty()
            && branch.len() <= MAX_START_FROM
            && !branch.starts_with('-')
            && !branch.contains("..")
            && !branch.contains("@{")
            && !branch
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c));
        if !plain {
            return Err(EngineError::BadRequest(format!(
                "start_from must be a branch name of 1 to {MAX_START_FROM} bytes"
            )));
        }
        if spec.continue_from.is_some() {
            return Err(EngineError::BadRequest(
                "start_from and continue_from exclude each other".into(),
            ));
        }
    }
    if spec.agent.is_empty() {
        return Err(EngineError::BadRequest(
            "agent is required unless continue_from names a task".into(),
        ));
    }
    if spec.agent.len() > MAX_AGENT_NAME {
        return Err(EngineError::BadRequest(format!(
            "agent must be 1 to {MAX_AGENT_NAME} bytes"
        )));
    }
    if spec
        .idempotency_key
        .as_ref()
        .is_some_and(|k| k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY)
    {
        return Err(EngineError::BadRequest(format!(
            "idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes"
        )));
    }
    if spec.layers.len() > 32 {
        return Err(EngineError::BadRequest("at most 32 layers".into()));
    }
    spec.policy.validate().map_err(EngineError::BadRequest)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_start(branch: &str) -> TaskSpec {
        TaskSpec {
            agent: "coder".into(),
            start_from: Some(branch.into()),
            ..TaskSpec::default()
        }
    }

    #[test]
    fn start_from_takes_a_branch_name_and_nothing_else() {
        for good in ["main", "swarmd/merge-0a1b2c3d-conflict", "fix_1.2"] {
            assert!(validate_spec(&with_start(good)).is_ok(), "{good}");
        }
        let long = "b".repeat(MAX_START_FROM + 1);
        for bad in [
            "",
            "-x",
            "a..b",
            "a b",
            "a\nb",
            "HEAD~1",
            "a^",
            "x:y",
            "main@{1}",
            long.as_str(),
        ] {
            let refused = validate_spec(&with_start(bad));
            assert!(
                matches!(&refused, Err(EngineError::BadRequest(m)) if m.starts_with("start_from")),
                "{bad:?}: {refused:?}"
            );
        }
        let mut both = with_start("main");
        both.continue_from = Some(TaskId::new());
        assert!(matches!(
            validate_spec(&both),
            Err(EngineError::BadRequest(m)) if m.contains("exclude")
        ));
    }
}
