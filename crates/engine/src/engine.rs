//! The `Engine` façade: every public method of the engine, listed here.
//! Reads go to one part of its state; every verb calls the module that
//! does it (`create`, `cancel`, `worker_api`, `recovery`, `retention`,
//! `runs`, `epilogue`, `continuation`), handing it the narrow handles it
//! uses where they suffice (docs/ARCHITECTURE.md, `crates/engine`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarmd_output_store::{OutputEvent, OutputRecord, OutputStore};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::AuditRecord;
use crate::auth::TokenAuthority;
use crate::bus::{EventBus, Follower};
use crate::clock::Clock;
use crate::config::{EngineConfig, EngineParts};
use crate::continuation::Resume;
use crate::create::RunWrites;
use crate::error::EngineError;
use crate::event::{Event, EventRecord, Logged};
use crate::gate::Verb;
use crate::held::Held;
use crate::ids::{AttemptId, RunId, SessionId, TaskId};
use crate::ledger::{Ledger, wait_commit};
use crate::metrics::EngineStats;
use crate::recovery::RecoveryReport;
use crate::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use crate::spawn::SpawnerResolver;
use crate::store::{HandleRecord, LiveSnapshot};
use crate::store::{SessionRecord, TaskFilter, TaskListing, WriteOp};
use crate::task::TaskSpec;
use crate::task::{AttemptRecord, Task, TaskStatus};
use crate::worker_api::{HeartbeatAck, Prompt, ResultAck, ResultPost, WorkerAuth};
use crate::{create, recovery};
use crate::{runs, worker_api};
use swarmd_output_store::BlobSweep;

/// How long [`Engine::get_task`] waits for the write of a task's end (a
/// group commit takes milliseconds; a store that does not answer is
/// waited for this long at most).
pub(crate) const END_WRITE_PATIENCE: Duration = Duration::from_secs(5);

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
/// 1. `held.keys`, the idempotency map, which is held while a new task
///    goes into `held.live`;
/// 2. one task's cell lock (`live::TaskCell::lock`), never two tasks' at
///    once;
/// 3. under it: `held.admission`, `held.handles`, the token authority's
///    keyring (read to mint), the usage meter (`stats.usage`), the event
///    bus (`ledger.bus`: its sequence, then the store's submit queue) and
///    a `held.live` shard; each of these is a leaf that takes no other
///    lock.
///
/// The resolver and, through it, the session registry are never asked under
/// a task's lock: dispatch asks `SpawnerResolver::place` once per attempt
/// before it takes the lock (`dispatch::placement`).
#[derive(Debug)]
pub(crate) struct Inner {
    pub config: EngineConfig,
    /// The stores and the event bus: every durable write (`ledger`).
    pub ledger: Ledger,
    /// The tasks held in memory, their keys, admission and handles (`held`).
    pub held: Held,
    pub tokens: Arc<TokenAuthority>,
    pub resolver: Arc<dyn SpawnerResolver>,
    pub clock: Arc<dyn Clock>,
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
                held: Held::new(parts.config.max_running),
                config: parts.config,
                ledger: Ledger {
                    store: parts.store,
                    outputs: parts.outputs,
                    bus,
                },
                tokens: parts.tokens,
                resolver: parts.resolver,
                clock: parts.clock,
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
        &self.inner.ledger.outputs
    }

    pub fn stats(&self) -> &EngineStats {
        &self.inner.stats
    }

    /// The task, live or stored. A live task that has ended in memory is
    /// answered once its end is written (its cell is retired then), so a
    /// caller never sees a task finished whose end, and its attempt's, a
    /// crash could still lose: it waits for that write, at most
    /// `END_WRITE_PATIENCE`.
    pub async fn get_task(&self, id: TaskId) -> Result<Option<Task>, EngineError> {
        if let Some(cell) = self.inner.held.live.get(&id) {
            let task = cell.lock().task.clone();
            if !task.status().is_terminal() {
                return Ok(Some(task));
            }
            let mut written = cell.terminal.subscribe();
            let _ = tokio::time::timeout(END_WRITE_PATIENCE, written.wait_for(|t| *t)).await;
            return Ok(Some(cell.lock().task.clone()));
        }
        Ok(self.inner.ledger.store.task(id).await?)
    }

    /// The task's attempt records, oldest first.
    pub async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, EngineError> {
        Ok(self.inner.ledger.store.attempts(id).await?)
    }

    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, EngineError> {
        Ok(self.inner.ledger.store.list_tasks(filter).await?)
    }

    /// `list_tasks`, ending once the tasks read weigh `max_bytes` as
    /// stored (`TaskStore::list_page`).
    pub async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, EngineError> {
        Ok(self.inner.ledger.store.list_page(filter, max_bytes).await?)
    }

    /// The newest `window` tasks of `status`, counted by agent.
    pub async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, EngineError> {
        Ok(self
            .inner
            .ledger
            .store
            .count_by_agent(status, window)
            .await?)
    }

    /// Waits until the task is terminal or `timeout` passes; returns it either way.
    ///
    /// A task live in another cluster node's memory (or taken over and not
    /// loaded here yet) is waited for on the bus, which the event pump
    /// feeds with every node's events: its `task_finished` is broadcast
    /// once the terminal write is durable, and the store then reads it.
    pub async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError> {
        if let Some(cell) = self.inner.held.live.get(&id) {
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
        if let Some(cell) = self.inner.held.live.get(&id) {
            return Ok(cell.lock().task.clone());
        }
        read().await
    }

    /// Publishes an event that concerns a session rather than a task.
    pub fn publish_for_session(&self, session: crate::ids::SessionId, event: Event) {
        self.inner.ledger.publish(Some(session), event);
    }

    pub async fn audit_records(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, EngineError> {
        Ok(self.inner.ledger.store.audit(task, limit).await?)
    }

    /// The seq of the last durable event: every task row written with an
    /// event up to it is readable, so a list read after this, followed by
    /// the log after it, sees every task once.
    pub fn last_event_seq(&self) -> u64 {
        self.inner.ledger.bus.durable_seq()
    }

    /// Live events from now on. A receiver that lags resumes with `events_after`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.inner.ledger.bus.subscribe()
    }

    /// The log as the cluster's event pump read it (`log_after`): whole
    /// records are broadcast in seq order, bare seqs stepped past in it.
    pub fn offer_log(&self, entries: Vec<Logged>) {
        self.inner.ledger.bus.offer_log(entries);
    }

    /// Another node's group as its notification gave it (its seqs in
    /// order, the acted-on kinds whole), offered as `offer_log` does;
    /// refused (false) while something follows the log, which wants every
    /// record whole, so the pump reads it instead.
    pub fn offer_notified(&self, entries: Vec<Logged>) -> bool {
        let bus = &self.inner.ledger.bus;
        if bus.followed() {
            return false;
        }
        bus.offer_log(entries);
        true
    }

    /// Marks the caller as a subscriber that needs every event (a
    /// client's feed) until the guard drops; take it before `subscribe`.
    pub fn follow(&self) -> Follower {
        self.inner.ledger.bus.follow()
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
        let whole = (!self.inner.ledger.bus.followed()).then_some(&Event::ACTED_ON[..]);
        Ok(self
            .inner
            .ledger
            .store
            .log_after(after_seq, limit, whole)
            .await?)
    }

    /// Gives up on the events before `seq` that were never broadcast (the
    /// log cannot give them: unreadable or pruned), so later ones flow.
    pub fn skip_events_before(&self, seq: u64) {
        self.inner.ledger.bus.resume_after(seq.saturating_sub(1));
    }

    /// Resolves when this node's committed events wait behind events it
    /// has not seen (another node's): the pump then reads the log.
    pub async fn event_gap(&self) {
        self.inner.ledger.bus.gap().await;
    }

    /// Whether committed events wait behind events this node has not seen.
    pub fn event_gapped(&self) -> bool {
        self.inner.ledger.bus.gapped()
    }

    pub async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, EngineError> {
        Ok(self
            .inner
            .ledger
            .store
            .events_after(after_seq, limit)
            .await?)
    }

    /// Queues the write of an operator session's record in the ordered write
    /// path now (so a caller holding its own lock fixes the order); the
    /// returned future resolves once it is durable.
    pub fn persist_session(
        &self,
        record: SessionRecord,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'static {
        wait_commit(
            self.inner
                .ledger
                .submit(vec![WriteOp::PutSession(Box::new(record))], Vec::new()),
        )
    }

    /// Queues the deletion of an operator session's record, like
    /// `persist_session`.
    pub fn delete_session(
        &self,
        sid: SessionId,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'static {
        wait_commit(
            self.inner
                .ledger
                .submit(vec![WriteOp::DeleteSession(sid)], Vec::new()),
        )
    }

    /// The operator sessions in the store, as a restart would restore them.
    pub async fn stored_sessions(&self) -> Result<Vec<SessionRecord>, EngineError> {
        let now_secs = self.inner.clock.now_secs();
        Ok(self.inner.ledger.store.load_live(now_secs).await?.sessions)
    }

    /// Tasks queued and attempts running right now.
    pub fn load(&self) -> (usize, usize) {
        let adm = self.inner.held.admission();
        (adm.queued(), adm.running())
    }

    /// Number of tasks held in memory (not yet terminal).
    pub fn live_tasks(&self) -> usize {
        self.inner.held.live.len()
    }

    /// Whether task `id` is live in this engine's memory: on a cluster
    /// node, whether this node holds it.
    pub fn holds_task(&self, id: TaskId) -> bool {
        self.inner.held.live.get(&id).is_some()
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
        Ok(self.inner.ledger.store.healthcheck().await?)
    }

    /// Creates a task, makes it durable, and queues it. Returns once the
    /// task is acknowledged; its run never depends on the caller.
    pub async fn create_task(&self, spec: TaskSpec) -> Result<Task, EngineError> {
        create::create_task_with(self, spec, |_| RunWrites::default()).await
    }

    /// Creates a task exactly as `create_task` does, committing the ops and
    /// events `extra` builds from the new task in the same write batch as
    /// the task's record. When the spec's idempotency key already names a
    /// task (a replay), `extra` is given that task and its ops and events
    /// are committed in a batch of their own before the task is returned.
    /// The ops may only be `PutRun` and `PutFlow` (else `BadRequest`, and
    /// nothing is written).
    pub async fn create_task_with<F>(&self, spec: TaskSpec, extra: F) -> Result<Task, EngineError>
    where
        F: FnOnce(&Task) -> RunWrites + Send,
    {
        create::create_task_with(self, spec, extra).await
    }

    /// Creates a sub-task for the worker `parent` authenticates: a write of
    /// that worker's attempt, so it passes the same fence as its other
    /// writes (`task_terminal` once the task is over, `attempt_superseded`
    /// once another attempt runs). The sub-task is a child of the worker's
    /// task, owned by the same session, one level deeper.
    pub async fn create_subtask(
        &self,
        parent: &WorkerAuth,
        spec: TaskSpec,
    ) -> Result<Task, EngineError> {
        create::create_subtask(self, parent, spec).await
    }

    /// What `task`'s last attempt left for a continuation: the CLI session
    /// it reported and the branch and head it committed on.
    ///
    /// # Errors
    /// The store's or the output store's.
    pub async fn left_by_task(&self, task: &Task) -> Result<Resume, EngineError> {
        self.continuations().left_by_task(task).await
    }

    /// Learns the handle of a task this engine does not hold, read from the
    /// shared store (a task another node of a cluster held, now finished),
    /// so that its worker gets the fence's answer (`410 task_terminal`, or
    /// its result's replay) here rather than `401`. It joins the retired
    /// window; a handle of a task this engine holds is never replaced.
    pub fn learn_retired_handle(&self, digest: [u8; 32], record: HandleRecord) {
        self.inner.held.learn_retired_handle(digest, record)
    }

    /// Worker handles held in memory: those of live tasks plus the retired
    /// window.
    pub fn handle_count(&self) -> usize {
        self.inner.held.handles().len()
    }

    /// Commits `ops` (`PutRun` and `PutFlow` only) and `events` as one
    /// batch; returns once it is durable. Accepted while draining too, so
    /// that a run can record its cancel during a drain.
    pub async fn write_run(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
    ) -> Result<(), EngineError> {
        runs::write_run(&self.inner.ledger, ops, events).await
    }

    pub async fn get_run(&self, id: RunId) -> Result<Option<RunRecord>, EngineError> {
        Ok(self.inner.ledger.store.run(id).await?)
    }

    /// The run an idempotency key names.
    pub async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, EngineError> {
        Ok(self.inner.ledger.store.run_for_key(key).await?)
    }

    /// Newest first, as `RunFilter` says.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, EngineError> {
        Ok(self.inner.ledger.store.list_runs(filter).await?)
    }

    /// Every run not terminal, oldest first: what the runner resumes at boot.
    pub async fn open_runs(&self) -> Result<Vec<RunRecord>, EngineError> {
        Ok(self.inner.ledger.store.open_runs().await?)
    }

    pub async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, EngineError> {
        Ok(self.inner.ledger.store.flow_doc(hash).await?)
    }

    /// Tells every task waiting for somewhere to run to ask again now.
    pub fn wake_waiting(&self) {
        self.inner.place_changed.notify_waiters()
    }

    /// Prunes terminal tasks finished more than `keep` ago; returns how many.
    pub async fn prune(&self, keep: Duration) -> Result<usize, EngineError> {
        self.retention().prune(keep).await
    }

    /// Deletes the spilled blobs that no stored output references (see
    /// `OutputStore::sweep_blobs`). `prune` runs it whenever it deleted
    /// outputs; the retention job also runs it once at start, for blobs
    /// whose append a crash cut off.
    pub async fn sweep_blobs(&self) -> Result<BlobSweep, EngineError> {
        self.retention().sweep_blobs().await
    }

    /// The retention loop: runs `prune(keep)` every `every` until the engine
    /// shuts down. The caller spawns it where it tracks its background tasks;
    /// the loop outlives that call, so it holds a clone of the engine.
    pub fn retention_loop(
        &self,
        keep: Duration,
        every: Duration,
    ) -> impl Future<Output = ()> + Send + 'static {
        let engine = self.clone();
        let shutdown = self.inner.shutdown.clone();
        async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut swept_since_start = false;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                match engine.prune(keep).await {
                    Ok(0) => {}
                    Ok(n) => {
                        swept_since_start = true;
                        tracing::info!(pruned = n, "retention pruned terminal tasks");
                    }
                    Err(error) => tracing::warn!(%error, "retention run failed"),
                }
                if !swept_since_start {
                    match engine.sweep_blobs().await {
                        Ok(_) => swept_since_start = true,
                        Err(error) => tracing::warn!(%error, "blob sweep failed"),
                    }
                }
            }
        }
    }

    /// Appends `events`, none of them a Final, to attempt `id`'s tail, open
    /// or closed, and publishes them once durable.
    ///
    /// # Errors
    /// `BadRequest` for a Final; `NotFound` for an unknown task or an
    /// attempt it never started; `OutputBudgetExceeded` when the events
    /// alone exceed the per-attempt output budget; a store error.
    pub async fn record_epilogue(
        &self,
        id: AttemptId,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.appends().record_epilogue(id, producer, events).await
    }

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
        match self.ending().cancel(id, reason).await? {
            crate::cancel::Begun::Ended(task) => Ok(task),
            crate::cancel::Begun::Writing {
                task,
                committed,
                cell,
            } => {
                // Retired once durable, also when this caller was dropped
                // meanwhile (`wait_then`).
                let (engine, cancelled) = (self.clone(), task.clone());
                crate::ledger::wait_then(committed, move |durable| async move {
                    if durable {
                        engine.ending().retire_cancelled(&cancelled, &cell);
                    }
                })
                .await?;
                Ok(task)
            }
        }
    }

    /// Loads the live state from the store and records what must run again:
    /// interrupted in-process attempts are failed (or queued for a retry),
    /// delegated attempts are put back in memory with a fresh lease, queued
    /// tasks are queued again. Nothing is dispatched until
    /// `start_recovered`, so the caller can restore sessions first. Call
    /// once, before serving.
    pub async fn recover(&self) -> Result<RecoveryReport, EngineError> {
        recovery::recover(self).await
    }

    /// Takes over the live tasks of a dead node of the cluster, read from
    /// the store once they are this node's (`snapshot`): the rules of
    /// recovery at start, at run time, and what they found is started at
    /// once. Tasks already in memory are left as they are.
    pub async fn adopt(&self, snapshot: LiveSnapshot) -> Result<RecoveryReport, EngineError> {
        recovery::adopt(self, snapshot).await
    }

    /// Decides the attempts a restart interrupted that reported a CLI
    /// session: one whose `worktree` artifact names its branch is closed
    /// (`RESUMED_REASON`) and its task queued for the attempt that resumes
    /// it; the others fail `interrupted` as any interrupted attempt does.
    /// Call after the previous process's worktrees are recovered (their
    /// artifacts name the branches) and before `start_recovered`, which
    /// otherwise does this itself, after the daemon is up.
    pub async fn resume_interrupted(&self, report: &mut RecoveryReport) -> Result<(), EngineError> {
        recovery::resume_interrupted(self, report).await
    }

    /// Starts what `recover` found: queued tasks enter admission, delegated
    /// attempts are announced again to their sessions (with a fresh handle;
    /// the old one stays valid) and wait for their SubAgent; interrupted
    /// attempts not yet decided are decided (`resume_interrupted`) in the
    /// background, and what that queues starts then.
    pub fn start_recovered(&self) {
        recovery::start_recovered(self)
    }

    /// Verification steps 1–6 (docs/security.md) for a worker bearer and the route's `verb`.
    pub fn authenticate_worker(&self, bearer: &str, verb: Verb) -> Result<WorkerAuth, EngineError> {
        self.workers().authenticate_worker(bearer, verb)
    }

    /// The task of a `wh-` handle this engine holds, for routing only:
    /// nothing about the handle (expiry, verbs) is checked. `None` for a
    /// malformed or unknown handle.
    pub fn handle_task(&self, bearer: &str) -> Option<TaskId> {
        self.workers().handle_task(bearer)
    }

    /// The prompt of the credential's task; extends the lease of an open attempt.
    pub async fn fetch_prompt(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
    ) -> Result<Prompt, EngineError> {
        self.workers().fetch_prompt(auth, task).await
    }

    /// Appends worker output (no Finals: those go through `post_result`).
    /// Returns the last sequence number written.
    pub async fn worker_output(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
        events: Vec<OutputEvent>,
    ) -> Result<u64, EngineError> {
        self.workers().worker_output(auth, task, events).await
    }

    /// Extends the lease; re-mints the token (and moves the expiry of every
    /// handle of the attempt) when less than a third of its lifetime is left
    /// (docs/security.md, Lifetimes).
    pub async fn heartbeat(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
    ) -> Result<HeartbeatAck, EngineError> {
        self.workers().heartbeat(auth, task).await
    }

    /// A fresh token for the same attempt and handle, with the handle's
    /// expiry moved along (a parked `spawn` re-minted at
    /// delivery). Refused once the attempt is no longer the open one.
    pub async fn refresh_credential(
        &self,
        id: AttemptId,
        old: &crate::spawn::WorkerCredential,
    ) -> Result<crate::spawn::WorkerCredential, EngineError> {
        self.workers().refresh_credential(id, old).await
    }

    /// Posts the attempt's Final: once per attempt; a retry with the same
    /// `Idempotency-Key` and body replays the first answer for as long as
    /// the task is retained, across restarts too.
    pub async fn post_result(
        &self,
        auth: &WorkerAuth,
        post: ResultPost,
    ) -> Result<ResultAck, EngineError> {
        worker_api::post_result::post_result(self.workers(), auth, post).await
    }
}
