//! The flow runner: durable runs of flows, every step an ordinary engine
//! task. It sits above the engine as the spawner stack does and writes
//! nothing itself: a run's record (its journal, `swarmd_flow::run`) is
//! written through the engine's batches, in the same commit as the task a
//! step starts, and the runner follows the engine's event bus to record
//! each step's outcome. After a restart `recover` reads every open run back
//! and continues it: a finished step is never started again (the journal
//! has its outcome), a step whose task was created but not yet journaled is
//! found again by its idempotency key, a wait keeps waiting and a timer
//! keeps its deadline.

mod advance;
pub mod catalog;
mod error;
mod listen;
mod open;
mod shape;
pub mod token;
mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::{
    Engine, Event, FlowDoc, RunFilter, RunId, RunRecord, RunStatus, RunSummary, WriteOp, detached,
};
use swarmd_flow::lint::{InputSchema, lint_calling};
use swarmd_flow::run::Journal;
use swarmd_flow::{Flow, Limits, content_hash};

/// Flow runs one node holds open at most: each keeps its journal and
/// flow in memory until it ends. A start past it is `429 too_many_runs`.
pub const MAX_OPEN_RUNS: usize = 10_000;
/// Flows kept parsed by hash (`Runner::remember`).
const MAX_CACHED_FLOWS: usize = 1_024;

pub use catalog::Catalog;
pub use error::RunError;
pub use open::MAX_OPEN_RUNS_PER_OWNER;
pub use shape::flow_from_value;
pub use view::{NodeView, RunView, TryView, WaitView};

/// A run's durable state as the runner writes it into `RunRecord::state`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct State {
    #[serde(default)]
    pub journal: Journal,
    /// The hash of every flow the run calls, pinned at its start.
    #[serde(default)]
    pub calls: BTreeMap<String, String>,
    /// The base commit each fan-out instance's coding children start from,
    /// by `<fan-out key> <agent>`: resolved when its first child of that
    /// agent starts, so every child starts from one commit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<String, String>,
}

/// Which flow a run runs.
#[derive(Debug, Clone)]
pub enum FlowRef {
    /// A flow of the catalog.
    Named(String),
    /// A flow given with the request (linted like any other).
    Inline(Box<Flow>),
}

/// A request to start a run.
#[derive(Debug, Clone)]
pub struct StartRun {
    pub flow: FlowRef,
    pub input: Value,
    /// A retry with the same key (and the same flow and input) returns the
    /// run the first call started.
    pub idempotency_key: Option<String>,
    /// The MainAI session that owns the run (it gets `run_done`).
    pub session: Option<SessionId>,
    /// Who started it: only they and the admin may cancel it or answer
    /// its waits without a wait token.
    pub owner: Option<String>,
}

/// What the runner asks the daemon about a step's task beyond its result.
pub trait StepFacts: Send + Sync {
    /// The git changes of task `id` (what its last attempt that worked in
    /// a worktree left: branch, base, head, files, …), if any.
    fn changes(&self, id: TaskId) -> Pin<Box<dyn Future<Output = Option<Value>> + Send + '_>>;

    /// The commit agent `agent`'s worktree `base` names now, for an agent
    /// that works in a worktree; `None` for any other agent.
    fn base_commit<'a>(
        &'a self,
        agent: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>> {
        let _ = agent;
        Box::pin(async { None })
    }
}

/// The runner.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("flows", &self.inner.catalog.len())
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub engine: Engine,
    pub catalog: Catalog,
    pub agents: BTreeSet<String>,
    /// The agents of kind merge, when known (`Runner::with_merge_agents`).
    pub merge_agents: std::sync::OnceLock<BTreeSet<String>>,
    /// The agents that work in a worktree, when known
    /// (`Runner::with_worktree_agents`).
    pub worktree_agents: std::sync::OnceLock<BTreeSet<String>>,
    /// The agents' compiled `input_schema`s, when known
    /// (`Runner::with_input_schemas`).
    pub input_schemas: std::sync::OnceLock<BTreeMap<String, InputSchema>>,
    pub caps: Limits,
    pub secret: [u8; 32],
    /// Where a step's git changes are read, when it asks for them.
    pub facts: Option<Arc<dyn StepFacts>>,
    /// Open runs, each behind its own lock (one verb at a time per run).
    pub open: Mutex<open::OpenRuns>,
    /// Open step tasks and the run each belongs to.
    pub tasks: Mutex<HashMap<TaskId, RunId>>,
    /// Flows by hash, as pinned runs read them.
    pub flows: Mutex<HashMap<String, Arc<Flow>>>,
    /// Woken when this node took over runs of a dead node.
    pub adopt: tokio::sync::Notify,
    /// Held while open runs are read back, so two readings never load
    /// one run twice.
    pub reading: tokio::sync::Mutex<()>,
    /// Runs this node holds open at most (`MAX_OPEN_RUNS`).
    pub max_open: std::sync::atomic::AtomicUsize,
    /// Runs one owner holds open here at most (`MAX_OPEN_RUNS_PER_OWNER`).
    pub max_per_owner: std::sync::atomic::AtomicUsize,
}

impl Runner {
    /// A runner over `engine` offering the flows of `catalog`; steps may
    /// name the agents in `agents`; `caps` bounds every flow's limits;
    /// `secret` keys the wait tokens; `facts` reads a step's git changes.
    pub fn new(
        engine: Engine,
        catalog: Catalog,
        agents: BTreeSet<String>,
        caps: Limits,
        secret: [u8; 32],
        facts: Option<Arc<dyn StepFacts>>,
    ) -> Runner {
        Runner {
            inner: Arc::new(Inner {
                engine,
                catalog,
                agents,
                merge_agents: std::sync::OnceLock::new(),
                worktree_agents: std::sync::OnceLock::new(),
                input_schemas: std::sync::OnceLock::new(),
                caps,
                secret,
                facts,
                open: Mutex::new(open::OpenRuns::default()),
                tasks: Mutex::new(HashMap::new()),
                flows: Mutex::new(HashMap::new()),
                adopt: tokio::sync::Notify::new(),
                reading: tokio::sync::Mutex::new(()),
                max_open: std::sync::atomic::AtomicUsize::new(MAX_OPEN_RUNS),
                max_per_owner: std::sync::atomic::AtomicUsize::new(MAX_OPEN_RUNS_PER_OWNER),
            }),
        }
    }

    /// This runner, knowing which of its agents are of kind merge: a
    /// `merge` node's `ref` must then name one of them (lint's
    /// `not_a_merge_agent`). Without them, a `ref` is checked only for
    /// naming an agent. Set once, at start; a later call changes nothing.
    pub fn with_merge_agents(self, merge_agents: BTreeSet<String>) -> Runner {
        let _ = self.inner.merge_agents.set(merge_agents);
        self
    }

    /// This runner, knowing which of its agents work in a worktree: a
    /// `merge` node's `on_conflict` must then name one of them (lint's
    /// `no_worktree`). Set once, at start; a later call changes nothing.
    pub fn with_worktree_agents(self, worktree_agents: BTreeSet<String>) -> Runner {
        let _ = self.inner.worktree_agents.set(worktree_agents);
        self
    }

    /// This runner, knowing its agents' `input_schema`s: a step whose `in`
    /// is a literal must then give an input its agent's schema accepts
    /// (lint's `input_schema`). Set once, at start; a later call changes
    /// nothing.
    pub fn with_input_schemas(self, input_schemas: BTreeMap<String, InputSchema>) -> Runner {
        let _ = self.inner.input_schemas.set(input_schemas);
        self
    }

    /// A runner with no flows, every agent name accepted by nothing, and a
    /// fixed key: for tests of code that needs one but runs no flow.
    pub fn for_tests(engine: Engine) -> Runner {
        Runner::new(
            engine,
            Catalog::default(),
            BTreeSet::new(),
            Limits::default(),
            [0; 32],
            None,
        )
    }

    /// The flows offered by name.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// Every problem of `flow` against the agents and flows this daemon
    /// has and its caps; a `call` counts the steps of the catalog's flow it
    /// names, and a cycle of calls through the catalog is a problem.
    pub fn lint(&self, flow: &Flow) -> Vec<swarmd_flow::Problem> {
        let known = swarmd_flow::lint::Known {
            agents: self.inner.agents.clone(),
            merge_agents: self.inner.merge_agents.get().cloned(),
            worktree_agents: self.inner.worktree_agents.get().cloned(),
            input_schemas: self.inner.input_schemas.get().cloned().unwrap_or_default(),
            flows: self.inner.catalog.names().cloned().collect(),
            caps: self.inner.caps.clone(),
        };
        lint_calling(flow, &known, &self.inner.catalog)
    }

    /// Starts a run (or, for a key seen before, returns the run it
    /// started); `true` when this call started it.
    pub async fn start(&self, request: StartRun) -> Result<(RunRecord, bool), RunError> {
        // Start, cancel and answer change the run in memory, then write
        // it: each runs `detached`, so a caller that goes away between the
        // two leaves neither apart.
        let runner = self.clone();
        detached(async move { runner.start_now(request).await }).await
    }

    async fn start_now(&self, request: StartRun) -> Result<(RunRecord, bool), RunError> {
        let engine = &self.inner.engine;
        if engine.is_draining() {
            return Err(RunError::Engine(swarmd_engine::EngineError::Draining));
        }
        let (flow, hash) = match request.flow {
            FlowRef::Named(name) => {
                let entry = self.inner.catalog.get(&name).ok_or_else(|| {
                    RunError::NotFound(format!(
                        "no flow named {name} (`swarmd flow list` or GET /v1/flows lists them)"
                    ))
                })?;
                (entry.flow.clone(), entry.hash.clone())
            }
            FlowRef::Inline(flow) => {
                let hash = content_hash(&flow);
                (Arc::new(*flow), hash)
            }
        };
        let problems = self.lint(&flow);
        if !problems.is_empty() {
            return Err(RunError::InvalidFlow { problems });
        }
        check_schema(flow.input_schema.as_ref(), &request.input, "input")?;
        if let Some(key) = &request.idempotency_key
            && let Some(id) = engine.run_for_key(key).await?
        {
            let run = engine
                .get_run(id)
                .await?
                .ok_or_else(|| RunError::NotFound(format!("run {id}")))?;
            if run.flow_hash != hash || run.input != request.input {
                return Err(RunError::KeyConflict(
                    "idempotency key reused with another flow or input".into(),
                ));
            }
            return Ok((run, false));
        }
        let max_open = self
            .inner
            .max_open
            .load(std::sync::atomic::Ordering::Relaxed);
        let share = self
            .inner
            .max_per_owner
            .load(std::sync::atomic::Ordering::Relaxed);
        {
            let open = self.open_runs();
            if open.len() >= max_open {
                return Err(RunError::TooMany(format!(
                    "this node holds {max_open} open flow runs; one must end (or be cancelled) before another starts"
                )));
            }
            if let Some(owner) = request.owner.as_deref()
                && open.held_by(owner) >= share
            {
                return Err(RunError::TooMany(format!(
                    "you hold {share} open flow runs on this node, one caller's share; one must end (or be cancelled) before another starts"
                )));
            }
        }
        let called = self
            .inner
            .catalog
            .called_by(&flow)
            .map_err(|name| RunError::NotFound(format!("no flow named {name} (called)")))?;
        let now = now_ms();
        let state = State {
            journal: Journal::default(),
            calls: called
                .iter()
                .map(|(name, e)| (name.clone(), e.hash.clone()))
                .collect(),
            pins: BTreeMap::new(),
        };
        let record = RunRecord {
            id: RunId::new(),
            flow: flow.name.clone(),
            flow_hash: hash.clone(),
            status: RunStatus::Running,
            session: request.session,
            owner: request.owner,
            idempotency_key: request.idempotency_key,
            input: request.input,
            created_ms: now,
            updated_ms: now,
            version: 1,
            state: serde_json::to_value(&state).unwrap_or(Value::Null),
            result: None,
            error: None,
        };
        let mut ops = vec![flow_doc(&flow, &hash)];
        for entry in called.values() {
            ops.push(flow_doc(&entry.flow, &entry.hash));
        }
        ops.push(WriteOp::PutRun(Box::new(record.clone())));
        let event = run_event(&record, None);
        let called_flows: BTreeMap<String, Flow> = called
            .into_iter()
            .map(|(name, e)| (name, (*e.flow).clone()))
            .collect();
        self.remember(&hash, flow.clone());
        let id = record.id;
        let live = advance::Live::new(record, state, flow, Arc::new(called_flows));
        // Open (and locked) before its record exists, so a reading of the
        // store's open runs never loads it a second time.
        let cell = Arc::new(tokio::sync::Mutex::new(live));
        let mut live = cell.clone().lock_owned().await;
        self.open_runs()
            .insert(id, cell, live.record.owner.as_deref());
        if let Err(error) = engine.write_run(ops, vec![event]).await {
            self.open_runs().remove(&id);
            return Err(error.into());
        }
        if let Some(found) = self.lost_key(&mut live).await {
            return found;
        }
        self.advance(&mut live).await;
        Ok((live.record.clone(), true))
    }

    /// After a keyed run's record is written: whether another run took
    /// its idempotency key at the same time (two requests, or two nodes,
    /// each found the key free). Every store leaves a key to the run that
    /// wrote it first, so the later one ends here, cancelled before it
    /// started anything, and the caller gets the first as if it had been
    /// found. `None`: the key is this run's (or could not be read, or the
    /// run could not be ended), so it goes on.
    async fn lost_key(
        &self,
        live: &mut advance::Live,
    ) -> Option<Result<(RunRecord, bool), RunError>> {
        let key = live.record.idempotency_key.clone()?;
        let engine = self.engine();
        let first = match engine.run_for_key(&key).await {
            Ok(Some(first)) if first != live.record.id => first,
            _ => return None,
        };
        let reason = format!("run {first} took the same idempotency key first");
        self.finish(live, RunStatus::Cancelled, None, Some(reason))
            .await
            .ok()?;
        let found = async {
            let run = engine
                .get_run(first)
                .await?
                .ok_or_else(|| RunError::NotFound(format!("run {first}")))?;
            if run.flow_hash != live.record.flow_hash || run.input != live.record.input {
                return Err(RunError::KeyConflict(
                    "idempotency key reused with another flow or input".into(),
                ));
            }
            Ok((run, false))
        };
        Some(found.await)
    }

    /// A run's record.
    pub async fn record(&self, id: RunId) -> Result<RunRecord, RunError> {
        let cell = self.open_runs().get(&id).cloned();
        match cell {
            Some(cell) => Ok(cell.lock().await.record.clone()),
            None => self
                .inner
                .engine
                .get_run(id)
                .await?
                .ok_or_else(|| RunError::NotFound(format!("run {id}"))),
        }
    }

    /// A run with every node's state; `tokens` adds the open waits'
    /// answer tokens (for the run's owner and the admin only).
    pub async fn view(&self, id: RunId, tokens: bool) -> Result<RunView, RunError> {
        let record = self.record(id).await?;
        view::build(self, record, tokens).await
    }

    /// Runs' summaries, newest first.
    pub async fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, RunError> {
        Ok(self.inner.engine.list_runs(filter).await?)
    }

    /// Cancels a run and every step it has running.
    pub async fn cancel(&self, id: RunId, reason: Option<String>) -> Result<RunRecord, RunError> {
        let runner = self.clone();
        detached(async move { runner.cancel_now(id, reason).await }).await
    }

    async fn cancel_now(&self, id: RunId, reason: Option<String>) -> Result<RunRecord, RunError> {
        let Some(cell) = self.open_runs().get(&id).cloned() else {
            let run = self.record(id).await?;
            return Err(RunError::Terminal(format!(
                "run {id} already ended ({})",
                run.status.as_str()
            )));
        };
        let mut live = cell.lock().await;
        if live.record.status.is_terminal() {
            return Err(RunError::Terminal(format!("run {id} already ended")));
        }
        let reason = reason.unwrap_or_else(|| "cancelled".into());
        self.finish(&mut live, RunStatus::Cancelled, None, Some(reason))
            .await?;
        Ok(live.record.clone())
    }

    /// Answers wait `wait` (its name, or its key when several instances
    /// of it are open) of run `id`. `token`, when given, must be that
    /// wait's token; without one the caller must already be allowed (the
    /// run's owner or the admin). `Ok` means the answer is durable; the
    /// run then moves on from it.
    pub async fn answer(
        &self,
        id: RunId,
        wait: &str,
        value: Value,
        token: Option<&str>,
    ) -> Result<RunRecord, RunError> {
        let runner = self.clone();
        let (wait, token) = (wait.to_owned(), token.map(str::to_owned));
        detached(async move { runner.answer_now(id, &wait, value, token.as_deref()).await }).await
    }

    async fn answer_now(
        &self,
        id: RunId,
        wait: &str,
        value: Value,
        token: Option<&str>,
    ) -> Result<RunRecord, RunError> {
        let Some(cell) = self.open_runs().get(&id).cloned() else {
            self.record(id).await?;
            return Err(RunError::Terminal(format!("run {id} already ended")));
        };
        let mut live = cell.lock().await;
        if live.record.status.is_terminal() {
            return Err(RunError::Terminal(format!("run {id} already ended")));
        }
        let open: Vec<(String, Option<Value>)> = live
            .state
            .journal
            .open_waits()
            .filter(|(key, entry)| entry.name == wait || *key == wait)
            .map(|(key, entry)| (key.to_owned(), entry.schema.clone()))
            .collect();
        if open.len() != 1 {
            // What this node holds of the run, for a refusal that surprises
            // (the store's record says `waiting`, say).
            let waits: Vec<(&str, &str, bool)> = live
                .state
                .journal
                .waits
                .iter()
                .map(|(key, entry)| (key.as_str(), entry.name.as_str(), entry.outcome.is_some()))
                .collect();
            tracing::debug!(run_id = %id, wait, version = live.record.version,
                status = live.record.status.as_str(), ?waits, "no one open wait answers");
        }
        let (key, schema) = match open.as_slice() {
            [one] => one.clone(),
            [] => return Err(RunError::WaitNotOpen(no_open_wait(&live, id, wait))),
            many => {
                let keys: Vec<&str> = many.iter().map(|(k, _)| k.as_str()).collect();
                return Err(RunError::WaitNotOpen(format!(
                    "{} waits named {wait} are open; answer one by its key: {}",
                    many.len(),
                    keys.join(", ")
                )));
            }
        };
        if let Some(token) = token
            && !token::verify(&self.inner.secret, &id.to_string(), &key, token)
        {
            return Err(RunError::Forbidden(
                "that token does not answer this wait".into(),
            ));
        }
        check_schema(schema.as_ref(), &value, "answer")?;
        let bytes = advance::json_len(&value);
        live.fits(bytes, "the answer")
            .map_err(RunError::InvalidInput)?;
        let now = now_ms();
        let before = live.state.journal.clone();
        live.state
            .journal
            .end_wait(&key, Ok(value), now)
            .map_err(|e| RunError::WaitNotOpen(e.to_string()))?;
        // The answer is written before the run moves on from it, so a
        // caller told `Ok` holds a durable answer, and one told otherwise
        // finds the wait open still.
        if let Err(error) = self.write(&mut live, key, now).await {
            live.state.journal = before;
            return Err(error);
        }
        live.hold(bytes);
        self.advance(&mut live).await;
        Ok(live.record.clone())
    }

    /// Waits until run `id` ends or `timeout` passes; its record then.
    /// Follows the engine's events, so a run another node drives is
    /// waited for too.
    pub async fn wait_for(&self, id: RunId, timeout: Duration) -> Result<RunRecord, RunError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = self.inner.engine.subscribe();
        let record = self.record(id).await?;
        if record.status.is_terminal() {
            return Ok(record);
        }
        loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => break,
                Ok(Ok(event)) => {
                    if let Event::RunChanged { run_id, status, .. } = &event.event
                        && *run_id == id
                        && status.is_terminal()
                    {
                        break;
                    }
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                    if self.record(id).await?.status.is_terminal() {
                        break;
                    }
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
            }
        }
        self.record(id).await
    }

    /// Reads back, soon, the runs this node took over from a dead one.
    pub fn adopt_soon(&self) {
        self.inner.adopt.notify_one();
    }

    /// The token of the wait `key` of run `id`.
    pub fn wait_token(&self, id: RunId, key: &str) -> String {
        self.wait_token_str(&id.to_string(), key)
    }

    pub(crate) fn wait_token_str(&self, id: &str, key: &str) -> String {
        token::wait_token(&self.inner.secret, id, key)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn open_runs(&self) -> std::sync::MutexGuard<'_, open::OpenRuns> {
        self.inner.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn task_map(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, RunId>> {
        self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `flow` for the next look-up of `hash`. The cache holds at
    /// most `MAX_CACHED_FLOWS`: past it, it is emptied (an open run holds
    /// its own flow, and a look-up that misses reads the store), so
    /// distinct inline flows cannot grow it without end.
    fn remember(&self, hash: &str, flow: Arc<Flow>) {
        let mut flows = self.inner.flows.lock().unwrap_or_else(|e| e.into_inner());
        if flows.len() >= MAX_CACHED_FLOWS && !flows.contains_key(hash) {
            flows.clear();
        }
        flows.insert(hash.to_owned(), flow);
    }

    /// The flow pinned under `hash`.
    pub(crate) async fn pinned(&self, hash: &str) -> Result<Arc<Flow>, RunError> {
        if let Some(flow) = self
            .inner
            .flows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(hash)
        {
            return Ok(flow.clone());
        }
        let doc = self
            .inner
            .engine
            .flow_doc(hash)
            .await?
            .ok_or_else(|| RunError::NotFound(format!("flow {hash}")))?;
        let flow: Flow = serde_json::from_value(doc.doc)
            .map_err(|e| RunError::NotFound(format!("flow {hash} does not parse: {e}")))?;
        let flow = Arc::new(flow);
        self.remember(hash, flow.clone());
        Ok(flow)
    }
}

/// Why no open wait of run `id` answers to `wait`: it was answered
/// already, or the names of the waits that are open (at most ten).
fn no_open_wait(live: &advance::Live, id: RunId, wait: &str) -> String {
    let journal = &live.state.journal;
    let answered = journal
        .waits
        .iter()
        .any(|(key, entry)| (entry.name == wait || key == wait) && entry.outcome.is_some());
    if answered {
        return format!("the wait {wait} of run {id} was answered already");
    }
    let mut names: Vec<&str> = journal.open_waits().map(|(_, e)| e.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return format!("run {id} has no open wait {wait} (none is open)");
    }
    names.truncate(10);
    format!(
        "run {id} has no open wait {wait}; open: {}",
        names.join(", ")
    )
}

fn flow_doc(flow: &Flow, hash: &str) -> WriteOp {
    WriteOp::PutFlow(Box::new(FlowDoc {
        hash: hash.to_owned(),
        name: flow.name.clone(),
        doc: serde_json::to_value(flow).unwrap_or(Value::Null),
    }))
}

/// The event of a run write: its status and the node that changed.
pub(crate) fn run_event(
    record: &RunRecord,
    node: Option<(String, &'static str)>,
) -> (Option<SessionId>, Event) {
    let (node, node_status) = match node {
        Some((key, status)) => (Some(key), Some(status.to_owned())),
        None => (None, None),
    };
    (
        record.session,
        Event::RunChanged {
            run_id: record.id,
            flow: record.flow.clone(),
            status: record.status,
            node,
            node_status,
        },
    )
}

/// Checks `value` against `schema`; the error names the first failing
/// field by its JSON pointer.
fn check_schema(schema: Option<&Value>, value: &Value, what: &str) -> Result<(), RunError> {
    let Some(schema) = schema else {
        return Ok(());
    };
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| RunError::InvalidInput(format!("the {what} schema is not valid: {e}")))?;
    match swarmd_flow::mismatch::mismatches(&validator, value, what) {
        None => Ok(()),
        Some(why) => Err(RunError::InvalidInput(why)),
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "durable_tests.rs"]
mod durable_tests;

#[cfg(test)]
#[path = "runtime_tests.rs"]
mod runtime_tests;
