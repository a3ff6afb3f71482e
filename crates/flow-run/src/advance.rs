//! Moving a run on: evaluate its journal, open the waits and start the
//! steps it asks for (each task's record committed with the journal that
//! names it), cancel the steps no longer wanted, end the run when the graph
//! ends, and arm a timer for the next deadline (a retry's backoff, a wait's
//! timeout). Callers hold the run's lock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use swarmd_engine::ids::TaskId;
use swarmd_engine::{EngineError, RunRecord, RunStatus, Task, TaskSpec, WriteOp};

use swarmd_flow::Flow;
use swarmd_flow::run::{Progress, Spend, StepFacts, StepStart, WaitEntry, evaluate};

use crate::{RunError, Runner, State, now_ms, run_event, token};

/// The largest spilled result a step reads back.
const MAX_SPILLED_BYTES: u64 = 16 * 1024 * 1024;

/// Passes of one `advance` before it yields (a flow of instant steps
/// could otherwise hold its lock for long).
const MAX_PASSES: usize = 1_000;

/// How long a run whose move could not be written waits to try again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The most a run's journal holds, as JSON bytes: its step results (with
/// their changes and sessions), answers and wait prompts. The journal is
/// written whole at every move and evaluated whole at every pass, so what
/// one run keeps is bounded, not the product of its steps and their sizes.
pub(crate) const MAX_JOURNAL_BYTES: usize = 32 * 1024 * 1024;

/// The length of `value` as JSON, counted without building the text.
pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter fails only for a value JSON cannot hold, which
    // the journal never holds (string-keyed maps only).
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The most of a failed step's reason the journal keeps, in bytes; a
/// failed task's reason may quote its whole result.
const MAX_REASON_BYTES: usize = 4096;

/// `reason` cut to `MAX_REASON_BYTES` on a character boundary, marked with
/// an ellipsis when cut.
fn clip_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// An open run in memory.
pub(crate) struct Live {
    pub record: RunRecord,
    pub state: State,
    pub flow: Arc<Flow>,
    pub called: Arc<BTreeMap<String, Flow>>,
    /// Set when the journal changed since the record was last written:
    /// the key of the node that changed.
    pub dirty: Option<String>,
    /// Whether the flow or a sub-flow has a budget: each step's spend is
    /// then read from its task and recorded with its outcome.
    pub budgeted: bool,
    /// The journal's size as JSON, kept up as results, answers and prompts
    /// enter it (at most `MAX_JOURNAL_BYTES`).
    held: usize,
    timer: Option<tokio::task::AbortHandle>,
}

impl Live {
    pub(crate) fn new(
        record: RunRecord,
        state: State,
        flow: Arc<Flow>,
        called: Arc<BTreeMap<String, Flow>>,
    ) -> Live {
        let budgeted = flow.has_budget() || called.values().any(Flow::has_budget);
        let held = json_len(&state.journal);
        Live {
            record,
            state,
            flow,
            called,
            dirty: None,
            budgeted,
            held,
            timer: None,
        }
    }

    /// Whether `bytes` more fit the journal; why not, naming `what`, when
    /// they do not. `hold` counts them once they entered it.
    pub(crate) fn fits(&self, bytes: usize, what: &str) -> Result<(), String> {
        if self.held.saturating_add(bytes) > MAX_JOURNAL_BYTES {
            return Err(format!(
                "{what} ({bytes} bytes) would take the run's journal past {MAX_JOURNAL_BYTES} bytes, with {} held",
                self.held
            ));
        }
        Ok(())
    }

    /// Counts `bytes` that entered the journal.
    pub(crate) fn hold(&mut self, bytes: usize) {
        self.held = self.held.saturating_add(bytes);
    }

    /// The record with the current journal, one version on.
    fn next_record(&self, now: u64) -> RunRecord {
        let mut record = self.record.clone();
        record.state = serde_json::to_value(&self.state).unwrap_or(Value::Null);
        record.version += 1;
        record.updated_ms = now;
        record
    }
}

impl Runner {
    /// Moves the run on as far as it goes now. Errors are logged: the run
    /// stays open, keeps what it has not written yet, and is moved on
    /// again after `RETRY_AFTER` (or sooner by the next outcome; at the
    /// next start when the daemon is draining).
    pub(crate) async fn advance(&self, live: &mut Live) {
        for _ in 0..MAX_PASSES {
            match self.pass(live).await {
                Ok(true) => continue,
                Ok(false) => return,
                Err(RunError::Engine(EngineError::Draining)) => return,
                Err(error) => {
                    tracing::warn!(run_id = %live.record.id, %error, "a flow run could not move on");
                    let again = now_ms().saturating_add(RETRY_AFTER.as_millis() as u64);
                    self.arm(live, Some(again));
                    return;
                }
            }
        }
        // The passes ran out with more to do: the run goes on at once from
        // a turn of its own, after its lock is let go, with what it has
        // not written yet still marked dirty.
        self.arm(live, Some(now_ms()));
    }

    /// One evaluation and what it asks; `true` when another pass may find
    /// more to do.
    async fn pass(&self, live: &mut Live) -> Result<bool, RunError> {
        if live.record.status.is_terminal() {
            return Ok(false);
        }
        let now = now_ms();
        self.expire_waits(live, now);
        let ev = evaluate(
            &live.flow,
            &live.called,
            &live.record.input,
            &live.state.journal,
        );
        match ev.progress {
            Progress::Passed { result } => {
                self.finish(live, RunStatus::Passed, Some(result), None)
                    .await?;
                return Ok(false);
            }
            Progress::Failed { reason } => {
                self.finish(live, RunStatus::Failed, None, Some(reason))
                    .await?;
                return Ok(false);
            }
            Progress::Running | Progress::Waiting => {}
        }
        for (key, task) in ev.to_cancel(&live.state.journal) {
            self.cancel_step(key, task);
        }
        let id = live.record.id.to_string();
        for wait in &ev.waits {
            let bytes = wait.prompt.as_ref().map_or(0, json_len);
            if let Err(reason) = live.fits(bytes, &format!("wait {}: its prompt", wait.name)) {
                self.finish(live, RunStatus::Failed, None, Some(reason))
                    .await?;
                return Ok(false);
            }
            live.hold(bytes);
            let token = token::wait_token(&self.inner.secret, &id, &wait.key);
            live.state.journal.open_wait(
                &wait.key,
                WaitEntry {
                    name: wait.name.clone(),
                    opened_ms: now,
                    deadline_ms: wait
                        .timeout_secs
                        .map(|s| now.saturating_add(u64::from(s) * 1000)),
                    token_digest: token::digest(&token),
                    prompt: wait.prompt.clone(),
                    schema: wait.schema.clone(),
                    outcome: None,
                },
            );
            live.dirty = Some(wait.key.clone());
        }
        let status = match ev.progress {
            Progress::Waiting => RunStatus::Waiting,
            _ => RunStatus::Running,
        };
        if status != live.record.status {
            live.record.status = status;
            live.dirty.get_or_insert_with(String::new);
        }
        let due: Vec<&StepStart> = ev
            .starts
            .iter()
            .filter(|s| s.not_before_ms.is_none_or(|t| t <= now))
            .collect();
        if due.is_empty() {
            if let Some(node) = live.dirty.clone() {
                // Stays dirty until written, so a retry writes it.
                self.write(live, node, now).await?;
                live.dirty = None;
            }
            let next = ev
                .starts
                .iter()
                .filter_map(|s| s.not_before_ms)
                .chain(
                    live.state
                        .journal
                        .open_waits()
                        .filter_map(|(_, w)| w.deadline_ms),
                )
                .min();
            self.arm(live, next);
            return Ok(false);
        }
        let mut ended = false;
        for start in due {
            ended |= self.start_step(live, start).await?;
        }
        if ended || live.dirty.is_some() {
            // An outcome is known already: evaluate again.
            return Ok(true);
        }
        let next = ev
            .starts
            .iter()
            .filter_map(|s| s.not_before_ms.filter(|t| *t > now))
            .chain(
                live.state
                    .journal
                    .open_waits()
                    .filter_map(|(_, w)| w.deadline_ms),
            )
            .min();
        self.arm(live, next);
        Ok(false)
    }

    /// Starts one step try as a task whose record commits with the journal
    /// that names it; `true` when its outcome is known already (a replay
    /// of a task that ended, or one that could not be created).
    async fn start_step(&self, live: &mut Live, start: &StepStart) -> Result<bool, RunError> {
        let now = now_ms();
        let run_id = live.record.id;
        let pinned = self.pinned_base(live, start).await;
        let spec = match step_spec(live, start, pinned) {
            Ok(spec) => spec,
            Err(reason) => {
                live.state
                    .journal
                    .start_step(&start.key, String::new(), now);
                let _ = live.state.journal.end_step(&start.key, Err(reason), now);
                live.dirty = Some(start.key.clone());
                return Ok(true);
            }
        };
        let key = start.key.clone();
        let mut state = live.state.clone();
        let mut record = live.record.clone();
        let commit_key = key.clone();
        let wants = (start.wants_changes, start.wants_session);
        let written: Arc<std::sync::Mutex<Option<RunRecord>>> = Arc::default();
        let slot = written.clone();
        let runner = self.clone();
        let created = self
            .engine()
            .create_task_with(spec, move |task: &Task| {
                // Known before the task can end: its `task_finished` finds
                // its run.
                runner.task_map().insert(task.id, run_id);
                state
                    .journal
                    .start_step(&commit_key, task.id.to_string(), now);
                if let Some(entry) = state.journal.steps.get_mut(&commit_key) {
                    (entry.wants_changes, entry.wants_session) = wants;
                }
                record.state = serde_json::to_value(&state).unwrap_or(Value::Null);
                record.version += 1;
                record.updated_ms = now;
                let event = run_event(&record, Some((commit_key, "running")));
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(record.clone());
                (vec![WriteOp::PutRun(Box::new(record))], vec![event])
            })
            .await;
        match created {
            Ok(task) => {
                live.state
                    .journal
                    .start_step(&key, task.id.to_string(), now);
                if let Some(entry) = live.state.journal.steps.get_mut(&key) {
                    (entry.wants_changes, entry.wants_session) = wants;
                }
                let written = written.lock().unwrap_or_else(|e| e.into_inner()).take();
                live.record = written.unwrap_or_else(|| live.next_record(now));
                live.dirty = None;
                // A replay names a task that may have ended long ago.
                if task.status().is_terminal() {
                    self.record_outcome(live, &task).await;
                    return Ok(true);
                }
                Ok(false)
            }
            Err(EngineError::Draining) => Err(RunError::Engine(EngineError::Draining)),
            Err(error) => {
                // The task could not be created (its agent refused the
                // input, say): the try fails, which retry and try handle.
                live.state.journal.start_step(&key, String::new(), now);
                let _ =
                    live.state
                        .journal
                        .end_step(&key, Err(format!("not started: {error}")), now);
                live.dirty = Some(key);
                Ok(true)
            }
        }
    }

    /// Records how a step's task ended, if it is one of this run's open
    /// tries.
    pub(crate) async fn record_outcome(&self, live: &mut Live, task: &Task) {
        let result = match (task.status(), &task.result) {
            (swarmd_engine::TaskStatus::Pass, Some(result)) if result.ok => {
                Ok(result.value.clone())
            }
            (swarmd_engine::TaskStatus::Pass, None) => Ok(Value::Null),
            (status, result) => Err(task.reason.clone().unwrap_or_else(|| match result {
                Some(r) => format!("{status}: {}", r.value),
                None => status.to_string(),
            })),
        };
        let at = task.finished_ms.unwrap_or_else(now_ms);
        self.record_result(live, task.id, result, at, Some(task))
            .await;
    }

    /// Records the outcome of task `id` (its record, when the caller read
    /// it), if it is one of this run's open tries, with what the step asked
    /// to keep: its git changes, its agent session, and (under a budget)
    /// what its task spent.
    pub(crate) async fn record_result(
        &self,
        live: &mut Live,
        id: TaskId,
        result: Result<Value, String>,
        at: u64,
        task: Option<&Task>,
    ) {
        self.task_map().remove(&id);
        let text = id.to_string();
        let Some(key) = live.state.journal.step_of_task(&text).map(str::to_owned) else {
            return;
        };
        let result = match result {
            Ok(value) => self.resolved(value).await,
            failed => failed,
        };
        let (wants_changes, wants_session) = live
            .state
            .journal
            .steps
            .get(&key)
            .map_or((false, false), |e| (e.wants_changes, e.wants_session));
        let wants_session = wants_session && result.is_ok();
        // The task's record, read once when the caller did not and a
        // session or a budget needs it.
        let read;
        let task = match task {
            Some(task) => Some(task),
            None if live.budgeted || wants_session => {
                read = self.engine().get_task(id).await.ok().flatten();
                read.as_ref()
            }
            None => None,
        };
        let mut facts = StepFacts::default();
        if let (Some(facts_of), true) = (&self.inner.facts, wants_changes && result.is_ok()) {
            facts.changes = facts_of.changes(id).await;
        }
        if let (Some(task), true) = (task, wants_session) {
            facts.session = Some(self.session(task).await);
        }
        if let (Some(task), true) = (task, live.budgeted) {
            facts.spend = Spend {
                cost_usd: task.usage.cost_usd,
                tokens: task.usage.tokens(),
            };
        }
        let result = result.map_err(clip_reason);
        let bytes = match &result {
            Ok(value) => {
                json_len(value)
                    + facts.changes.as_ref().map_or(0, json_len)
                    + facts.session.as_ref().map_or(0, json_len)
            }
            Err(reason) => json_len(reason),
        };
        let what = if result.is_ok() {
            "its result"
        } else {
            "its failure reason"
        };
        let (result, bytes) = match live.fits(bytes, what) {
            Ok(()) => (result, bytes),
            Err(reason) => {
                let bytes = json_len(&reason);
                (Err(reason), bytes)
            }
        };
        if live
            .state
            .journal
            .end_step_with(&key, result, facts, at)
            .is_ok()
        {
            live.hold(bytes);
            live.dirty = Some(key);
        }
    }

    /// The base commit a fan-out child of a worktree agent starts from:
    /// the one pinned for its fan-out instance and agent, else the agent's
    /// base resolved now and pinned (committed with the child's task).
    /// `None` outside a fan-out, for a step that names where it starts,
    /// and for an agent without a worktree.
    async fn pinned_base(&self, live: &mut Live, start: &StepStart) -> Option<String> {
        let scope = start.pin_scope.as_ref()?;
        if start.start_from.is_some() || start.continue_from.is_some() {
            return None;
        }
        let key = format!("{scope} {}", start.agent);
        if let Some(commit) = live.state.pins.get(&key) {
            return Some(commit.clone());
        }
        let commit = self.inner.facts.as_ref()?.base_commit(&start.agent).await?;
        live.state.pins.insert(key, commit.clone());
        Some(commit)
    }

    /// The agent session `task` left, as a step's `session` value:
    /// `{task, agent, session_id?, branch?, head?}`.
    async fn session(&self, task: &Task) -> Value {
        let left = match self.engine().left_by_task(task).await {
            Ok(left) => left,
            Err(error) => {
                tracing::warn!(task_id = %task.id, %error, "could not read a flow step's session");
                Default::default()
            }
        };
        let mut session = Map::new();
        session.insert("task".into(), Value::String(task.id.to_string()));
        session.insert("agent".into(), Value::String(task.agent.clone()));
        for (field, value) in [
            ("session_id", left.session_id),
            ("branch", left.branch),
            ("head", left.head),
        ] {
            if let Some(value) = value {
                session.insert(field.into(), Value::String(value));
            }
        }
        Value::Object(session)
    }

    /// A task's result as the flow sees it: a Final that spilled to a blob
    /// (the daemon's `file_ref`, which no worker can post) is read back and
    /// parsed; one past `MAX_SPILLED_BYTES`, or unreadable, fails the step
    /// rather than hand the flow a reference instead of the value.
    async fn resolved(&self, value: Value) -> Result<Value, String> {
        let Some(sha256) = spilled(&value) else {
            return Ok(value);
        };
        let size = value["size"].as_u64().unwrap_or(u64::MAX);
        if size > MAX_SPILLED_BYTES {
            return Err(format!(
                "its result is {size} bytes, more than a flow step reads ({MAX_SPILLED_BYTES})"
            ));
        }
        match self.engine().outputs().read_blob(sha256).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("its result blob does not parse: {e}")),
            Ok(None) => Err(format!("its result blob {sha256} is missing")),
            Err(e) => Err(format!("its result blob could not be read: {e}")),
        }
    }

    /// Ends the run: its status, result or error, durable; every step it
    /// still runs is cancelled.
    pub(crate) async fn finish(
        &self,
        live: &mut Live,
        status: RunStatus,
        result: Option<Value>,
        error: Option<String>,
    ) -> Result<(), RunError> {
        let now = now_ms();
        let mut record = live.next_record(now);
        record.status = status;
        record.result = result;
        record.error = error;
        let event = run_event(&record, None);
        self.engine()
            .write_run(vec![WriteOp::PutRun(Box::new(record.clone()))], vec![event])
            .await?;
        live.record = record;
        live.dirty = None;
        if let Some(timer) = live.timer.take() {
            timer.abort();
        }
        let open: Vec<(String, String)> = live
            .state
            .journal
            .open_steps()
            .map(|(k, t)| (k.to_owned(), t.to_owned()))
            .collect();
        let why = match (status, &live.record.error) {
            (RunStatus::Cancelled, Some(why)) => Some(format!("run cancelled: {why}")),
            _ => None,
        };
        for (key, task) in &open {
            match &why {
                Some(why) => self.cancel_step_for(task, why.clone()),
                None => self.cancel_step(key, task),
            }
        }
        {
            let mut tasks = self.task_map();
            for (_, task) in &open {
                if let Ok(id) = task.parse::<TaskId>() {
                    tasks.remove(&id);
                }
            }
        }
        self.open_runs().remove(&live.record.id);
        tracing::info!(run_id = %live.record.id, flow = %live.record.flow, status = status.as_str(), "flow run ended");
        Ok(())
    }

    /// Writes the record with the current journal.
    pub(crate) async fn write(
        &self,
        live: &mut Live,
        node: String,
        now: u64,
    ) -> Result<(), RunError> {
        let record = live.next_record(now);
        let node = (!node.is_empty()).then(|| (node, node_status(live, &record)));
        let event = run_event(&record, node);
        self.engine()
            .write_run(vec![WriteOp::PutRun(Box::new(record.clone()))], vec![event])
            .await?;
        live.record = record;
        Ok(())
    }

    /// Fails every open wait whose deadline passed, naming its
    /// `timeout_secs` (however late the daemon got to it).
    pub(crate) fn expire_waits(&self, live: &mut Live, now: u64) {
        let expired: Vec<(String, u64)> = live
            .state
            .journal
            .open_waits()
            .filter_map(|(k, w)| {
                w.deadline_ms
                    .filter(|d| *d <= now)
                    .map(|d| (k.to_owned(), d.saturating_sub(w.opened_ms)))
            })
            .collect();
        for (key, timeout_ms) in expired {
            let _ = live
                .state
                .journal
                .end_wait(&key, Err(timed_out(timeout_ms)), now);
            live.dirty = Some(key);
        }
    }

    /// Cancels the task of step try `key`, which the flow no longer needs
    /// (a join decided without it, a budget used up): its outcome is
    /// recorded with that reason, by which the run view shows it
    /// cancelled.
    fn cancel_step(&self, key: &str, task: &str) {
        self.cancel_step_for(task, no_longer_needed(key));
    }

    /// Cancels the task of an open step try, for `reason`.
    fn cancel_step_for(&self, task: &str, reason: String) {
        let Ok(id) = task.parse::<TaskId>() else {
            return;
        };
        let engine = self.engine().clone();
        tokio::spawn(async move {
            if let Err(error) = engine.cancel_task(id, Some(reason)).await {
                tracing::debug!(task_id = %id, %error, "could not cancel a flow step");
            }
        });
    }

    /// Moves the run on again at `at_ms` (ms since the epoch).
    fn arm(&self, live: &mut Live, at_ms: Option<u64>) {
        if let Some(timer) = live.timer.take() {
            timer.abort();
        }
        let Some(at_ms) = at_ms else {
            return;
        };
        let delay = Duration::from_millis(at_ms.saturating_sub(now_ms()) + 1);
        let runner = self.clone();
        let id = live.record.id;
        let handle = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            runner.poke(id).await;
        });
        live.timer = Some(handle.abort_handle());
    }

    /// Moves run `id` on, if it is open.
    pub(crate) async fn poke(&self, id: swarmd_engine::RunId) {
        let cell = self.open_runs().get(&id).cloned();
        if let Some(cell) = cell {
            let mut live = cell.lock().await;
            self.advance(&mut live).await;
        }
    }
}

fn node_status(live: &Live, _record: &RunRecord) -> &'static str {
    match live.record.status {
        RunStatus::Waiting => "waiting",
        _ => "changed",
    }
}

/// Why a wait whose deadline passed failed: its `timeout_secs` (the time
/// from its opening to its deadline, whole seconds as configured).
fn timed_out(timeout_ms: u64) -> String {
    format!("timed out after {} s (timeout_secs)", timeout_ms / 1000)
}

/// The reason a step try the flow no longer needs is cancelled with, and
/// so the reason its outcome is recorded with.
pub(crate) fn no_longer_needed(key: &str) -> String {
    format!("{NO_LONGER_NEEDED}{key}")
}

/// The start of `no_longer_needed`'s reasons.
pub(crate) const NO_LONGER_NEEDED: &str = "the flow no longer needs step ";

/// The task a step try runs as: a string `in` is its prompt, anything else
/// its input (the prompt then its JSON text); keyed so that starting it
/// again finds the same task.
fn step_spec(live: &Live, start: &StepStart, pinned: Option<String>) -> Result<TaskSpec, String> {
    let continue_from = match &start.continue_from {
        Some(id) => Some(
            id.parse::<TaskId>()
                .map_err(|_| format!("not started: continue: `{id}` is not a task id"))?,
        ),
        None => None,
    };
    let (prompt, input) = match &start.input {
        Value::String(text) => (text.clone(), None),
        other => (other.to_string(), Some(other.clone())),
    };
    let mut metadata = Map::new();
    metadata.insert(
        "flow_run".into(),
        json!({"run": live.record.id.to_string(), "flow": live.record.flow, "step": start.key}),
    );
    let mut spec = TaskSpec {
        agent: start.agent.clone(),
        prompt,
        input,
        metadata: Some(metadata),
        session: live.record.session,
        idempotency_key: Some(format!("flow:{}:{}", live.record.id, start.key)),
        continue_from,
        start_from: start.start_from.clone().or(pinned),
        ..TaskSpec::default()
    };
    spec.policy.queue_timeout_secs = start.queue_timeout_secs.map(u64::from);
    spec.policy.attempt_timeout_secs = start.timeout_secs.map(u64::from);
    // What is left of the budgets around the step bounds its task; a
    // budget already used up never reaches here (the node failed).
    spec.policy.max_cost_usd = start.max_cost_usd.filter(|c| *c > 0.0);
    spec.policy.max_tokens = start.max_tokens.filter(|t| *t > 0);
    Ok(spec)
}

/// The blob digest of a spilled Final's reference, if `value` is one.
fn spilled(value: &Value) -> Option<&str> {
    let map = value.as_object()?;
    let is_ref = map.get("kind").and_then(Value::as_str) == Some("file_ref")
        && map.contains_key("path")
        && map.get("size").is_some_and(Value::is_u64);
    if is_ref {
        map.get("sha256").and_then(Value::as_str)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        assert_eq!(clip_reason("short".into()), "short");
        // Three-byte characters: 4096 is not a boundary of this text.
        let long = "€".repeat(2000);
        let cut = clip_reason(long);
        assert!(cut.ends_with('…'));
        assert_eq!(cut.len(), 4095 + '…'.len_utf8());
        assert!(cut.trim_end_matches('…').chars().all(|c| c == '€'));
    }

    #[test]
    fn json_len_counts_the_text_serde_would_write() {
        let value = serde_json::json!({"a": [1, "two", null], "b": "é\n"});
        assert_eq!(
            json_len(&value),
            serde_json::to_string(&value).unwrap().len()
        );
    }
}
