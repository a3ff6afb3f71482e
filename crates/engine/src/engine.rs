//! The `Engine` façade: construction, reads, waits, events, and the plumbing
//! the other modules share. Creation (`create`), cancel (`cancel`),
//! dispatch, the worker-side operations, recovery and retention live in
//! their own modules as further `impl Engine` blocks.

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
use crate::bus::{EventBus, Follower};
use crate::clock::Clock;
use crate::error::EngineError;
use crate::event::{Event, EventRecord, Logged};
use crate::handles::{HandleTable, RETIRED_KEEP};
use crate::ids::{AttemptId, SessionId, TaskId};
use crate::live::{LiveTasks, RunState, TaskCell};
use crate::metrics::EngineStats;
use crate::spawn::SpawnerResolver;
use crate::store::{SessionRecord, TaskFilter, TaskStore, WriteOp};
use crate::task::{AttemptRecord, Policy, Task};

/// Default of `EngineConfig::max_output_bytes_per_attempt`: 64 MiB.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES_PER_ATTEMPT: u64 = 64 * 1024 * 1024;

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
    /// Bytes of output one attempt may store (records plus spilled blobs).
    pub max_output_bytes_per_attempt: u64,
    /// How long a task may wait for somewhere to run (a session to take an
    /// operator attempt) when its policy sets no `queue_timeout_secs`.
    pub unavailable_wait: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            defaults: Policy::default(),
            max_running: 1024,
            max_spawn_depth: 4,
            worker_token_ttl_secs: 1800,
            kill_grace: Duration::from_secs(5),
            max_output_bytes_per_attempt: DEFAULT_MAX_OUTPUT_BYTES_PER_ATTEMPT,
            unavailable_wait: Duration::from_secs(600),
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
    pub clock: Arc<dyn Clock>,
}

/// A cheap-to-clone handle on the engine.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

/// The engine's state, shared by every clone of the façade.
///
/// # Lock order
///
/// Every lock here is a std `Mutex` (or `RwLock`) held for a few statements
/// and never across an `.await`. Where two are held together, they are
/// taken in this order and never the other way round:
///
/// 1. `keys`, the idempotency map, which is held while a new task goes into
///    `live`;
/// 2. one task's cell lock (`live::TaskCell::lock`), never two tasks' at
///    once;
/// 3. under it: `admission`, `handles`, the token authority's keyring
///    (read to mint), the usage meter (`stats.usage`), the event bus
///    (`bus`: its sequence, then the store's submit queue) and a `live`
///    shard; each of these is a leaf that takes no other lock.
///
/// The resolver and, through it, the session registry are never asked under
/// a task's lock: dispatch asks `SpawnerResolver::place` once per attempt
/// before it takes the lock (`dispatch::placement`).
#[derive(Debug)]
pub(crate) struct Inner {
    pub config: EngineConfig,
    pub store: Arc<dyn TaskStore>,
    pub outputs: Arc<dyn OutputStore>,
    pub tokens: Arc<TokenAuthority>,
    pub resolver: Arc<dyn SpawnerResolver>,
    pub clock: Arc<dyn Clock>,
    pub bus: EventBus,
    pub live: LiveTasks,
    /// Taken under a task's cell lock, never the other way round (see
    /// "Lock order" above).
    pub admission: Mutex<Admission>,
    pub handles: Mutex<HandleTable>,
    pub keys: Mutex<HashMap<String, TaskId>>,
    /// What recovery found, started by `start_recovered`.
    pub recovered: Mutex<Vec<crate::recovery::Pending>>,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
    pub draining: AtomicBool,
    pub stats: EngineStats,
    /// Fired when somewhere to run may have appeared (`wake_waiting`).
    pub place_changed: tokio::sync::Notify,
}

impl Engine {
    /// Builds the engine. Nothing runs until `recover` (at boot) or the
    /// first `create_task`.
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
                clock: parts.clock,
                bus,
                live: LiveTasks::new(),
                handles: Mutex::new(HandleTable::new(RETIRED_KEEP)),
                keys: Mutex::new(HashMap::new()),
                recovered: Mutex::new(Vec::new()),
                tracker: TaskTracker::new(),
                shutdown: CancellationToken::new(),
                draining: AtomicBool::new(false),
                stats: EngineStats::default(),
                place_changed: tokio::sync::Notify::new(),
            }),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    pub fn tokens(&self) -> &Arc<TokenAuthority> {
        &self.inner.tokens
    }

    pub fn outputs(&self) -> &Arc<dyn OutputStore> {
        &self.inner.outputs
    }

    pub fn stats(&self) -> &EngineStats {
        &self.inner.stats
    }

    /// The task, live or stored.
    pub async fn get_task(&self, id: TaskId) -> Result<Option<Task>, EngineError> {
        if let Some(cell) = self.inner.live.get(&id) {
            return Ok(Some(cell.lock().task.clone()));
        }
        Ok(self.inner.store.task(id).await?)
    }

    /// The task's attempt records, oldest first.
    pub async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, EngineError> {
        Ok(self.inner.store.attempts(id).await?)
    }

    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, EngineError> {
        Ok(self.inner.store.list_tasks(filter).await?)
    }

    /// Waits until the task is terminal or `timeout` passes; returns it either way.
    ///
    /// A task live in another cluster node's memory (or taken over and not
    /// loaded here yet) is waited for on the bus, which the event pump
    /// feeds with every node's events: its `task_finished` is broadcast
    /// once the terminal write is durable, and the store then reads it.
    pub async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError> {
        if let Some(cell) = self.inner.live.get(&id) {
            let mut rx = cell.terminal.subscribe();
            let _ = tokio::time::timeout(timeout, rx.wait_for(|t| *t)).await;
            return Ok(cell.lock().task.clone());
        }
        // Subscribed before the read, so an end between the two is seen.
        let mut events = self.subscribe();
        let read = || async {
            self.get_task(id)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("task {id}")))
        };
        let task = read().await?;
        if task.status().is_terminal() || timeout.is_zero() {
            return Ok(task);
        }
        let ended = async {
            loop {
                match events.recv().await {
                    Ok(record) => {
                        if matches!(&record.event, Event::TaskFinished { task_id, .. } if *task_id == id)
                        {
                            return;
                        }
                    }
                    // Missed events: the store says whether it ended.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if read().await.is_ok_and(|t| t.status().is_terminal()) {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        let _ = tokio::time::timeout(timeout, ended).await;
        if let Some(cell) = self.inner.live.get(&id) {
            return Ok(cell.lock().task.clone());
        }
        read().await
    }

    /// Appends output events on behalf of a spawner or layer (no credential),
    /// and publishes them. Refused once the attempt is decided or superseded.
    pub(crate) async fn record_output(
        &self,
        id: AttemptId,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let session = {
            let cell = self.live_cell(id.task)?;
            let state = cell.lock();
            crate::worker_api::check_open(&state, id.n)?;
            state.task.session
        };
        self.append_and_publish(id, session, producer, events).await
    }

    /// The last Final of an attempt: the one that decides it.
    pub(crate) async fn last_final(
        &self,
        id: AttemptId,
    ) -> Result<Option<OutputRecord>, EngineError> {
        let cached = self.inner.live.get(&id.task).and_then(|cell| {
            cell.lock()
                .run
                .as_ref()
                .filter(|r| r.attempt == id.n)
                .and_then(|r| r.last_final.clone())
        });
        if cached.is_some() {
            return Ok(cached);
        }
        Ok(self
            .inner
            .outputs
            .last_final(id.task.as_uuid(), id.n)
            .await?)
    }

    /// Resolves once a worker posted a Final for this attempt over HTTP, or
    /// at once if it already has or the attempt is no longer current.
    pub(crate) async fn posted_final(&self, id: AttemptId) {
        let rx = {
            let Some(cell) = self.inner.live.get(&id.task) else {
                return;
            };
            let state = cell.lock();
            match state.run.as_ref() {
                Some(run) if run.attempt == id.n => run.posted_tx.subscribe(),
                _ => return,
            }
        };
        let mut rx = rx;
        let _ = rx.wait_for(|posted| *posted).await;
    }

    /// Publishes an event (durable, then broadcast).
    pub(crate) fn publish(&self, event: Event) {
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
    pub(crate) fn audit(&self, record: AuditRecord) {
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

    /// The seq of the last durable event: every task row written with an
    /// event up to it is readable, so a list read after this, followed by
    /// the log after it, sees every task once.
    pub fn last_event_seq(&self) -> u64 {
        self.inner.bus.durable_seq()
    }

    /// Live events from now on. A receiver that lags resumes with `events_after`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.inner.bus.subscribe()
    }

    /// The log as the cluster's event pump read it (`log_after`): whole
    /// records are broadcast in seq order, bare seqs stepped past in it.
    pub fn offer_log(&self, entries: Vec<Logged>) {
        self.inner.bus.offer_log(entries);
    }

    /// Marks the caller as a subscriber that needs every event (a
    /// client's feed) until the guard drops; take it before `subscribe`.
    pub fn follow(&self) -> Follower {
        self.inner.bus.follow()
    }

    /// The log after `after_seq` as the cluster's event pump reads it:
    /// every record whole while something follows the log (`follow`),
    /// otherwise only the kinds the node acts on (`Event::ACTED_ON`)
    /// whole and every other record as its seq.
    pub async fn log_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Logged>, EngineError> {
        let whole = (!self.inner.bus.followed()).then_some(&Event::ACTED_ON[..]);
        Ok(self.inner.store.log_after(after_seq, limit, whole).await?)
    }

    /// Gives up on the events before `seq` that were never broadcast (the
    /// log cannot give them: unreadable or pruned), so later ones flow.
    pub fn skip_events_before(&self, seq: u64) {
        self.inner.bus.resume_after(seq.saturating_sub(1));
    }

    /// Resolves when this node's committed events wait behind events it
    /// has not seen (another node's): the pump then reads the log.
    pub async fn event_gap(&self) {
        self.inner.bus.gap().await;
    }

    pub async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, EngineError> {
        Ok(self.inner.store.events_after(after_seq, limit).await?)
    }

    /// Queues the write of an operator session's record in the ordered write
    /// path now (so a caller holding its own lock fixes the order); the
    /// returned future resolves once it is durable.
    pub fn persist_session(
        &self,
        record: SessionRecord,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'static {
        wait_commit(self.submit(vec![WriteOp::PutSession(Box::new(record))], Vec::new()))
    }

    /// Queues the deletion of an operator session's record, like
    /// `persist_session`.
    pub fn delete_session(
        &self,
        sid: SessionId,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'static {
        wait_commit(self.submit(vec![WriteOp::DeleteSession(sid)], Vec::new()))
    }

    /// The operator sessions in the store, as a restart would restore them.
    pub async fn stored_sessions(&self) -> Result<Vec<SessionRecord>, EngineError> {
        let now_secs = self.inner.clock.now_secs();
        Ok(self.inner.store.load_live(now_secs).await?.sessions)
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

    /// Whether task `id` is live in this engine's memory: on a cluster
    /// node, whether this node holds it.
    pub fn holds_task(&self, id: TaskId) -> bool {
        self.inner.live.get(&id).is_some()
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

    /// The resolver. It is never asked under a task's lock (the lock order
    /// above); debug builds assert that.
    pub(crate) fn resolver(&self) -> &dyn SpawnerResolver {
        debug_assert!(
            !crate::live::task_lock_held(),
            "the resolver is asked under a task's lock"
        );
        &*self.inner.resolver
    }

    /// The agent's concurrency limit (none when it no longer resolves).
    pub(crate) fn agent_limit(&self, agent: &str, layers: &[String]) -> Option<usize> {
        self.resolver()
            .profile(agent, layers)
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
                .spawn(async move { engine.dispatch_attempt(id, agent).await });
        }
    }

    /// Marks a terminal task done for waiters and drops it from memory.
    /// Its idempotency key leaves memory too: the store answers later
    /// retries, so the key map holds live tasks only. Its handles move to
    /// the handle table's bounded window of retired handles.
    pub(crate) fn retire(&self, cell: &Arc<TaskCell>, id: TaskId) {
        cell.terminal.send_replace(true);
        self.inner.live.remove(&id);
        if let Some(key) = &cell.key {
            self.keys().remove(key);
        }
        self.handles().retire_task(id);
    }
}

pub(crate) async fn wait_commit(
    rx: tokio::sync::oneshot::Receiver<Result<(), swarmd_output_store::StoreError>>,
) -> Result<(), EngineError> {
    rx.await
        .map_err(|_| EngineError::Store(swarmd_output_store::StoreError::Closed))?
        .map_err(EngineError::Store)
}
