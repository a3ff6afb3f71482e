//! The `Engine` façade: construction, task creation, reads, waits and cancel.
//! Dispatch, the worker-side operations and recovery live in their own
//! modules as further `impl Engine` blocks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use swarmd_output_store::{OutputEvent, OutputRecord, OutputStore};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::Admission;
use crate::audit::AuditRecord;
use crate::auth::TokenAuthority;
use crate::bus::EventBus;
use crate::clock::Clock;
use crate::error::EngineError;
use crate::event::{Event, EventRecord};
use crate::ids::TaskId;
use crate::live::{LiveTasks, RunState, TaskCell};
use crate::metrics::EngineStats;
use crate::operator::OperatorDirectory;
use crate::recent::RecentFinals;
use crate::spawn::SpawnerResolver;
use crate::store::{HandleRecord, TaskFilter, TaskStore, WriteOp, commit};
use crate::task::{AttemptOutcome, AttemptRecord, Policy, Task, TaskSpec, TaskStatus};

/// Engine-wide settings, read once from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Policy fields a task does not set.
    pub defaults: Policy,
    /// Attempts running at once, across all agents.
    pub max_running: usize,
    /// Sub-tasks deeper than this are refused.
    pub max_spawn_depth: u32,
    /// Lifetime of worker tokens and handles.
    pub worker_token_ttl_secs: u64,
    /// How long a cancelled worker may take to stop before dispatch moves on.
    pub kill_grace: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            defaults: Policy::default(),
            max_running: 1024,
            max_spawn_depth: 4,
            worker_token_ttl_secs: 1800,
            kill_grace: Duration::from_secs(5),
        }
    }
}

/// Everything the engine is built from; built in `main`, passed in.
#[derive(Debug, Clone)]
pub struct EngineParts {
    pub config: EngineConfig,
    pub store: Arc<dyn TaskStore>,
    pub outputs: Arc<dyn OutputStore>,
    pub tokens: Arc<TokenAuthority>,
    pub resolver: Arc<dyn SpawnerResolver>,
    pub operators: Arc<dyn OperatorDirectory>,
    pub clock: Arc<dyn Clock>,
}

/// A cheap-to-clone handle on the engine.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub config: EngineConfig,
    pub store: Arc<dyn TaskStore>,
    pub outputs: Arc<dyn OutputStore>,
    pub tokens: Arc<TokenAuthority>,
    pub resolver: Arc<dyn SpawnerResolver>,
    pub operators: Arc<dyn OperatorDirectory>,
    pub clock: Arc<dyn Clock>,
    pub bus: EventBus,
    pub live: LiveTasks,
    /// Lock order: a task's cell lock may be held while taking this one,
    /// never the other way round.
    pub admission: Mutex<Admission>,
    pub handles: Mutex<HashMap<[u8; 32], HandleRecord>>,
    pub keys: Mutex<HashMap<String, TaskId>>,
    pub recent: RecentFinals,
    /// What recovery found, started by `start_recovered`.
    pub recovered: Mutex<Vec<crate::recovery::Pending>>,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
    pub draining: AtomicBool,
    pub stats: EngineStats,
}

/// A task with its attempts, as `GET /v1/tasks/{id}` serves it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskView {
    #[serde(flatten)]
    pub task: Task,
    pub attempts: Vec<AttemptRecord>,
}

const MAX_AGENT_NAME: usize = 128;
const MAX_IDEMPOTENCY_KEY: usize = 256;

impl Engine {
    /// Builds the engine. Nothing runs until `recover` (at boot) or the
    /// first `spawn_task`.
    pub fn new(parts: EngineParts) -> Engine {
        let bus = EventBus::new(parts.store.clone(), parts.clock.clone(), 0);
        Engine {
            inner: Arc::new(Inner {
                admission: Mutex::new(Admission::new(parts.config.max_running)),
                config: parts.config,
                store: parts.store,
                outputs: parts.outputs,
                tokens: parts.tokens,
                resolver: parts.resolver,
                operators: parts.operators,
                clock: parts.clock,
                bus,
                live: LiveTasks::new(),
                handles: Mutex::new(HashMap::new()),
                keys: Mutex::new(HashMap::new()),
                recent: RecentFinals::new(),
                recovered: Mutex::new(Vec::new()),
                tracker: TaskTracker::new(),
                shutdown: CancellationToken::new(),
                draining: AtomicBool::new(false),
                stats: EngineStats::default(),
            }),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    pub fn operators(&self) -> Arc<dyn OperatorDirectory> {
        self.inner.operators.clone()
    }

    pub fn tokens(&self) -> &Arc<TokenAuthority> {
        &self.inner.tokens
    }

    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.inner.store
    }

    pub fn outputs(&self) -> &Arc<dyn OutputStore> {
        &self.inner.outputs
    }

    pub fn stats(&self) -> &EngineStats {
        &self.inner.stats
    }

    /// Creates a task, makes it durable, and queues it. Returns once the
    /// task is acknowledged; its run never depends on the caller.
    pub async fn spawn_task(&self, spec: TaskSpec) -> Result<Task, EngineError> {
        if self.is_draining() {
            return Err(EngineError::Draining);
        }
        validate_spec(&spec)?;
        let profile = self.inner.resolver.profile(&spec.agent, &spec.layers)?;
        let depth = match spec.parent {
            Some(parent) => {
                let parent = self
                    .get_task(parent)
                    .await?
                    .ok_or_else(|| EngineError::NotFound(format!("parent task {parent}")))?;
                parent.depth + 1
            }
            None => 0,
        };
        if depth > self.inner.config.max_spawn_depth {
            return Err(EngineError::DepthExceeded {
                depth,
                limit: self.inner.config.max_spawn_depth,
            });
        }
        let id = TaskId::new();
        let policy = Policy::resolve(&spec.policy, &self.inner.config.defaults);
        if let Some(key) = &spec.idempotency_key
            && let Some(existing) = self.claim_key(key, id).await?
        {
            let task = self
                .get_task(existing)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("task {existing}")))?;
            // A retry must be the same request; a reused key with another
            // request is a client bug, not a retry.
            if !same_request(&task, &spec, &policy) {
                return Err(EngineError::IdempotencyConflict);
            }
            return Ok(task);
        }
        let now = self.inner.clock.now_ms();
        let key = spec.idempotency_key.clone();
        let task = Task::new(id, spec, policy, depth, now);
        let cell = TaskCell::with_key(task.clone(), key.clone());
        self.inner.live.insert(cell);
        let mut ops = vec![WriteOp::PutTask(Box::new(task.clone()))];
        let task_key = key.clone();
        if let Some(key) = key {
            ops.push(WriteOp::IdempotencyKey { key, task_id: id });
        }
        let events = vec![
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
        // The task is admitted as soon as its record is queued, not once it
        // is durable: its attempt's writes queue behind this batch, so they
        // commit in the same group commit or a later one, and nothing about
        // the attempt leaves the daemon before its own (later) commit. The
        // caller hears back only once the task itself is durable.
        let recorded = self.submit(ops, events);
        self.admit(&task.agent, profile.concurrency, id);
        if let Err(e) = wait_commit(recorded).await {
            self.abandon_unrecorded(id, task_key.as_deref()).await;
            return Err(e);
        }
        self.inner
            .stats
            .tasks_created
            .fetch_add(1, Ordering::Relaxed);
        if let Some(secs) = task.policy.queue_timeout_secs {
            self.arm_queue_timeout(id, Duration::from_secs(secs));
        }
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
            self.keys().remove(key);
        }
        self.inner.live.remove(&id);
    }

    /// Returns the task an idempotency key already names, or claims the key
    /// for `id`.
    async fn claim_key(&self, key: &str, id: TaskId) -> Result<Option<TaskId>, EngineError> {
        if let Some(existing) = self.keys().get(key).copied() {
            return Ok(Some(existing));
        }
        if let Some(existing) = self.inner.store.task_for_key(key).await? {
            return Ok(Some(existing));
        }
        let mut keys = self.keys();
        if let Some(existing) = keys.get(key).copied() {
            return Ok(Some(existing));
        }
        keys.insert(key.to_owned(), id);
        Ok(None)
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, TaskId>> {
        self.inner.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task, live or stored.
    pub async fn get_task(&self, id: TaskId) -> Result<Option<Task>, EngineError> {
        if let Some(cell) = self.inner.live.get(&id) {
            return Ok(Some(cell.lock().task.clone()));
        }
        Ok(self.inner.store.task(id).await?)
    }

    /// The session that owns a live task (sub-tasks inherit it).
    pub fn live_session(&self, id: TaskId) -> Option<crate::ids::SessionId> {
        self.inner
            .live
            .get(&id)
            .and_then(|cell| cell.lock().task.session)
    }

    /// The task with its attempt records.
    pub async fn task_view(&self, id: TaskId) -> Result<Option<TaskView>, EngineError> {
        let Some(task) = self.get_task(id).await? else {
            return Ok(None);
        };
        let attempts = self.inner.store.attempts(id).await?;
        Ok(Some(TaskView { task, attempts }))
    }

    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, EngineError> {
        Ok(self.inner.store.list_tasks(filter).await?)
    }

    /// Waits until the task is terminal or `timeout` passes; returns it either way.
    pub async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError> {
        if let Some(cell) = self.inner.live.get(&id) {
            let mut rx = cell.terminal.subscribe();
            let _ = tokio::time::timeout(timeout, rx.wait_for(|t| *t)).await;
            return Ok(cell.lock().task.clone());
        }
        self.get_task(id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("task {id}")))
    }

    /// Cancels a task (SPEC §6.5): fences its attempt, fires the worker's
    /// cancellation, and makes it `cancelled`. Cancelling a cancelled task
    /// returns it unchanged; any other terminal task is `TaskTerminal`.
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
                        status: TaskStatus::Cancelled,
                        result: None,
                    },
                ),
            ];
            let done = self.submit(vec![WriteOp::PutTask(Box::new(task.clone()))], events);
            (task, done)
        };
        wait_commit(done).await?;
        self.inner.stats.finished(TaskStatus::Cancelled);
        self.retire(&cell, id);
        Ok(task)
    }

    /// Appends output events on behalf of a spawner or layer (no credential),
    /// and publishes them. Refused once the attempt is decided or superseded.
    pub async fn record_output(
        &self,
        task_id: TaskId,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let session = {
            let cell = self.live_cell(task_id)?;
            let state = cell.lock();
            crate::worker_api::check_open(&state, attempt)?;
            state.task.session
        };
        self.append_and_publish(task_id, attempt, session, producer, events)
            .await
    }

    /// The last Final of an attempt: the one that decides it.
    pub async fn last_final(
        &self,
        task_id: TaskId,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, EngineError> {
        let cached = self.inner.live.get(&task_id).and_then(|cell| {
            cell.lock()
                .run
                .as_ref()
                .filter(|r| r.attempt == attempt)
                .and_then(|r| r.last_final.clone())
        });
        if cached.is_some() {
            return Ok(cached);
        }
        Ok(self
            .inner
            .outputs
            .last_final(task_id.as_uuid(), attempt)
            .await?)
    }

    /// Resolves once a worker posted a Final for this attempt over HTTP, or
    /// at once if it already has or the attempt is no longer current.
    pub async fn posted_final(&self, task_id: TaskId, attempt: u32) {
        let rx = {
            let Some(cell) = self.inner.live.get(&task_id) else {
                return;
            };
            let state = cell.lock();
            match state.run.as_ref() {
                Some(run) if run.attempt == attempt => run.posted_tx.subscribe(),
                _ => return,
            }
        };
        let mut rx = rx;
        let _ = rx.wait_for(|posted| *posted).await;
    }

    /// Publishes an event (durable, then broadcast).
    pub fn publish(&self, event: Event) {
        let session = event
            .task_id()
            .and_then(|id| self.inner.live.get(&id))
            .and_then(|cell| cell.lock().task.session);
        self.inner
            .bus
            .submit(Vec::new(), vec![(session, event)], None);
    }

    /// Publishes an event that concerns a session rather than a task.
    pub fn publish_for_session(&self, session: crate::ids::SessionId, event: Event) {
        self.inner
            .bus
            .submit(Vec::new(), vec![(Some(session), event)], None);
    }

    /// Writes a durable audit line.
    pub fn audit(&self, record: AuditRecord) {
        self.inner
            .bus
            .submit(vec![WriteOp::Audit(record)], Vec::new(), None);
    }

    pub async fn audit_records(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, EngineError> {
        Ok(self.inner.store.audit(task, limit).await?)
    }

    /// Live events from now on. A receiver that lags resumes with `events_after`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.inner.bus.subscribe()
    }

    pub async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, EngineError> {
        Ok(self.inner.store.events_after(after_seq, limit).await?)
    }

    /// Writes arbitrary store ops (sessions) through the ordered write path.
    pub async fn write(&self, ops: Vec<WriteOp>) -> Result<(), EngineError> {
        Ok(commit(self.inner.store.as_ref(), ops).await?)
    }

    /// Tasks queued and attempts running right now.
    pub fn load(&self) -> (usize, usize) {
        let adm = self.admission();
        (adm.queued(), adm.running())
    }

    /// Number of tasks held in memory (not yet terminal).
    pub fn live_tasks(&self) -> usize {
        self.inner.live.len()
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    /// Stops accepting tasks; running attempts go on.
    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Release);
    }

    /// Waits up to `grace` for running attempts to finish, then cancels the
    /// engine's own timers and workers and waits for them to stop. Attempts
    /// cut off here are left for recovery: their tasks stay `running` in the store.
    pub async fn shutdown(&self, grace: Duration) {
        self.start_draining();
        self.inner.tracker.close();
        let _ = tokio::time::timeout(grace, self.inner.tracker.wait()).await;
        self.inner.shutdown.cancel();
        let _ = tokio::time::timeout(
            self.inner.config.kill_grace + Duration::from_secs(1),
            self.inner.tracker.wait(),
        )
        .await;
    }

    pub async fn healthcheck(&self) -> Result<(), EngineError> {
        Ok(self.inner.store.healthcheck().await?)
    }

    // ---- internal plumbing shared by the other impl blocks ----

    pub(crate) fn admission(&self) -> MutexGuard<'_, Admission> {
        self.inner
            .admission
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the write now; the returned receiver resolves once it is durable.
    pub(crate) fn submit(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<crate::ids::SessionId>, Event)>,
    ) -> tokio::sync::oneshot::Receiver<Result<(), swarmd_output_store::StoreError>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner.bus.submit(
            ops,
            events,
            Some(Box::new(move |res| {
                let _ = tx.send(res);
            })),
        );
        rx
    }

    pub(crate) async fn submit_and_wait(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<crate::ids::SessionId>, Event)>,
    ) -> Result<(), EngineError> {
        wait_commit(self.submit(ops, events)).await
    }

    /// The agent's concurrency limit (none when it no longer resolves).
    pub(crate) fn agent_limit(&self, task: &Task) -> Option<usize> {
        self.inner
            .resolver
            .profile(&task.agent, &task.layers)
            .ok()
            .and_then(|p| p.concurrency)
    }

    /// The live cell of a task; a task no longer in memory is terminal.
    pub(crate) fn live_cell(&self, id: TaskId) -> Result<Arc<TaskCell>, EngineError> {
        self.inner.live.get(&id).ok_or(EngineError::TaskTerminal)
    }

    /// Runs `f` on the task's open run if the task is live and `attempt` is
    /// its current attempt; otherwise does nothing.
    pub(crate) fn with_run(&self, id: TaskId, attempt: u32, f: impl FnOnce(&mut RunState)) {
        if let Some(cell) = self.inner.live.get(&id)
            && let Some(run) = cell.lock().run.as_mut().filter(|r| r.attempt == attempt)
        {
            f(run);
        }
    }

    /// Queues a task for admission and starts whatever may start.
    pub(crate) fn admit(&self, agent: &str, limit: Option<usize>, id: TaskId) {
        let start = self.admission().enqueue(agent, limit, id);
        self.start(start);
    }

    pub(crate) fn start(&self, started: Vec<(TaskId, String)>) {
        for (id, agent) in started {
            let engine = self.clone();
            self.inner
                .tracker
                .spawn(async move { engine.run_attempt(id, agent).await });
        }
    }

    /// Marks a terminal task done for waiters and drops it from memory.
    /// Its idempotency key leaves memory too: the store answers later
    /// retries, so the key map holds live tasks only.
    pub(crate) fn retire(&self, cell: &Arc<TaskCell>, id: TaskId) {
        cell.terminal.send_replace(true);
        self.inner.live.remove(&id);
        if let Some(key) = &cell.key {
            self.keys().remove(key);
        }
    }

    fn arm_queue_timeout(&self, id: TaskId, after: Duration) {
        let engine = self.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(after) => engine.expire_queued(id).await,
                _ = shutdown.cancelled() => {}
            }
        });
    }

    /// Fails a task still waiting for its first attempt (queue timeout).
    async fn expire_queued(&self, id: TaskId) {
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
            let task = state.task.clone();
            let events = vec![(
                task.session,
                Event::TaskFinished {
                    task_id: id,
                    status: TaskStatus::Failed,
                    result: None,
                },
            )];
            self.submit(vec![WriteOp::PutTask(Box::new(task))], events)
        };
        if let Err(error) = wait_commit(done).await {
            tracing::error!(task_id = %id, %error, "could not record queue timeout");
        }
        self.inner.stats.finished(TaskStatus::Failed);
        self.retire(&cell, id);
    }
}

pub(crate) async fn wait_commit(
    rx: tokio::sync::oneshot::Receiver<Result<(), swarmd_output_store::StoreError>>,
) -> Result<(), EngineError> {
    rx.await
        .map_err(|_| EngineError::Store(swarmd_output_store::StoreError::Closed))?
        .map_err(EngineError::Store)
}

/// Whether `spec` (with its resolved `policy`) asks for what `task` is.
fn same_request(task: &Task, spec: &TaskSpec, policy: &Policy) -> bool {
    task.agent == spec.agent
        && task.prompt == spec.prompt
        && task.system == spec.system
        && task.input == spec.input
        && task.metadata == spec.metadata
        && task.layers == spec.layers
        && task.parent == spec.parent
        && task.session == spec.session
        && task.policy == *policy
}

fn validate_spec(spec: &TaskSpec) -> Result<(), EngineError> {
    if spec.agent.is_empty() || spec.agent.len() > MAX_AGENT_NAME {
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
    Ok(())
}
