//! Evaluation: the pinned flow replayed over its journal. Every node is
//! evaluated from the start each time; a step or wait the journal has an
//! outcome for gives that outcome, one it has no entry for is asked to
//! start, and evaluation of that path stops there. Nothing else is read
//! (no clock, no randomness), so the same flow and journal always give the
//! same context, the same branches taken and the same steps to start: a
//! finished step never runs again and no branch is taken twice.
//!
//! Keys name node instances: the node's JSON pointer in its flow, then one
//! index per enclosing fan-out item (`[i]`) and loop iteration (`#i`); a
//! step's retries add `~n` (n ≥ 2); a sub-flow's nodes are keyed under the
//! key of its `call`, then `>name`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::budget::{FlowBudget, Spent};
use super::journal::{Journal, Outcome};
use crate::expr::Expr;
use crate::ir::{Flow, Node, Retry};
use crate::path::{MAX_CONTEXT_DEPTH, WritePath, deeper_than};

/// Nesting of `call`s past which a run fails (lint refuses a flow calling
/// itself; this bounds longer cycles).
pub const MAX_CALL_DEPTH: u32 = 8;
/// The most iterations of one loop: lint refuses a larger `max` or none;
/// this bounds a flow that was not linted.
pub const MAX_LOOP_ITERATIONS: u32 = 10_000;
/// Node instances one evaluation may visit; past this the run fails. Every
/// evaluation replays the whole graph on a runtime thread, so this bounds
/// its time and memory whatever loops and fan-outs nest inside each other.
pub const MAX_NODE_INSTANCES: u64 = 100_000;

/// What the run needs now, computed from its flow and journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evaluation {
    pub progress: Progress,
    /// Step tries to start (no journal entry yet).
    pub starts: Vec<StepStart>,
    /// Waits to open (no journal entry yet).
    pub waits: Vec<WaitOpen>,
    /// Step and wait keys the run still needs: open ones and those to
    /// start. An open step not in it is no longer wanted (a fan-out's
    /// loser) and is cancelled.
    pub live: BTreeSet<String>,
    /// Every node instance evaluated, by key.
    pub nodes: BTreeMap<String, NodeState>,
}

/// Where the run is.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Progress {
    /// A step runs or is to start.
    #[default]
    Running,
    /// Only waits are open.
    Waiting,
    /// The graph ended; the run's result.
    Passed { result: Value },
    /// The graph failed.
    Failed { reason: String },
}

/// A step try to start as a task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepStart {
    pub key: String,
    pub agent: String,
    /// The step's `in`: a string is the prompt.
    pub input: Value,
    /// The step's name in the flow, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Not before this time (a retry's backoff), in ms since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_timeout_secs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u32>,
    /// Whether the step wants its task's git changes (`changes`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wants_changes: bool,
    /// Whether the step wants its task's agent session (`session`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wants_session: bool,
    /// The finished task this step's task continues (`continue`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continue_from: Option<String>,
    /// The branch the step's worktree starts from (`start_from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_from: Option<String>,
    /// The key of the innermost fan-out instance around the step: its
    /// coding children all start from one base commit, pinned by the
    /// runner under this key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin_scope: Option<String>,
    /// What is left of the budgets around the step, in US dollars.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// What is left of the budgets around the step, in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// A wait to open.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitOpen {
    pub key: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u32>,
}

/// One node instance's state, for the run view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeState {
    /// The node's pointer in its flow (a sub-flow's nodes: in that flow).
    pub pointer: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub status: NodeStatus,
    /// A step's tries, in order (journal keys).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tries: Vec<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A node instance's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Running,
    Waiting,
    Passed,
    Failed,
    /// Stopped because the run no longer needs it: a fan-out's loser once
    /// the join was decided, or what ran under a budget once it was used.
    Cancelled,
}

/// How a node instance's evaluation ended.
pub(super) enum Res {
    /// It ended; the context after it, and the latest outcome it read.
    Done { ctx: Value, seq: u64 },
    /// It failed; why, and the outcome that decided it.
    Failed { reason: String, seq: u64 },
    /// It waits for a step or a wait; `on_waits` when only for waits (no
    /// step under it runs or is to start).
    Blocked { on_waits: bool },
}

/// Evaluates `flow` (its sub-flows in `called`, by name) with `input` over
/// `journal`.
pub fn evaluate(
    flow: &Flow,
    called: &BTreeMap<String, Flow>,
    input: &Value,
    journal: &Journal,
) -> Evaluation {
    let mut eval = Eval {
        journal,
        called,
        max_steps: flow.limits.max_steps as usize,
        max_fanout: flow.limits.max_fanout as usize,
        out: Evaluation::default(),
        touched: 0,
        visited: 0,
        planned: 0,
        budgets: Vec::new(),
        body_budget: None,
        fanouts: Vec::new(),
        validators: BTreeMap::new(),
    };
    let res = eval.flow_body(flow, json!({ "input": input }));
    let mut out = eval.out;
    out.progress = match res {
        Res::Done { ctx, .. } => match &flow.output {
            Some(expr) => match expr.eval(&ctx).map_err(|e| e.to_string()).and_then(shallow) {
                Ok(result) => Progress::Passed { result },
                Err(e) => Progress::Failed {
                    reason: format!("output: {e}"),
                },
            },
            None => Progress::Passed { result: ctx },
        },
        Res::Failed { reason, .. } => Progress::Failed { reason },
        Res::Blocked { .. } => {
            let is_wait =
                |k: &String| journal.waits.contains_key(k) || out.waits.iter().any(|w| &w.key == k);
            if out.starts.is_empty() && !out.live.is_empty() && out.live.iter().all(is_wait) {
                Progress::Waiting
            } else {
                Progress::Running
            }
        }
    };
    if matches!(
        out.progress,
        Progress::Passed { .. } | Progress::Failed { .. }
    ) {
        out.starts.clear();
        out.waits.clear();
        out.live.clear();
    }
    out
}

impl Evaluation {
    /// Open step tries the run no longer needs: (key, task).
    pub fn to_cancel<'j>(&self, journal: &'j Journal) -> Vec<(&'j str, &'j str)> {
        journal
            .open_steps()
            .filter(|(key, _)| !self.live.contains(*key))
            .collect()
    }
}

/// Where a node instance is: its key's scope (a sub-flow's call), its
/// pointer in its flow, and its instance indices.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub(super) scope: String,
    pub pointer: String,
    pub inst: String,
    pub call_depth: u32,
}

impl Place {
    pub(super) fn root(pointer: &str) -> Place {
        Place {
            scope: String::new(),
            pointer: pointer.to_owned(),
            inst: String::new(),
            call_depth: 0,
        }
    }

    pub(super) fn key(&self) -> String {
        format!("{}{}{}", self.scope, self.pointer, self.inst)
    }

    pub(super) fn child(&self, field: &str) -> Place {
        Place {
            pointer: format!("{}/{field}", self.pointer),
            ..self.clone()
        }
    }

    pub(super) fn instance(&self, suffix: String) -> Place {
        Place {
            inst: format!("{}{suffix}", self.inst),
            ..self.clone()
        }
    }
}

pub(super) struct Eval<'a> {
    pub journal: &'a Journal,
    pub called: &'a BTreeMap<String, Flow>,
    max_steps: usize,
    pub max_fanout: usize,
    pub out: Evaluation,
    /// Journal entries read so far; a subtree that read none has not
    /// started.
    pub touched: u64,
    /// Node instances evaluated so far (bounded by `MAX_NODE_INSTANCES`).
    visited: u64,
    /// Step tries asked to start and waits asked to open so far (a
    /// fan-out takes back those of branches it does not start).
    pub planned: usize,
    /// The budgets around the node being evaluated, innermost last.
    pub budgets: Vec<Spent>,
    /// The flow's budget, until its body (a `try`) takes it for the try's
    /// own body (`Eval::flow_body`, `Eval::tried`).
    pub body_budget: Option<FlowBudget<'a>>,
    /// The keys of the fan-outs around the node, innermost last.
    pub fanouts: Vec<String>,
    /// The called flows' input schemas, compiled (or why not), by name.
    pub validators: BTreeMap<String, Result<jsonschema::Validator, String>>,
}

impl Eval<'_> {
    /// Evaluates one node instance and records its state.
    pub(super) fn node(&mut self, node: &Node, at: &Place, ctx: Value) -> Res {
        self.visited += 1;
        if self.visited > MAX_NODE_INSTANCES {
            return failed(format!(
                "{}: the run's graph grew past {MAX_NODE_INSTANCES} node instances; \
                 bound its loops and fan-outs",
                at.pointer
            ));
        }
        let (res, tries) = match node {
            Node::Step {
                agent,
                input,
                out,
                name,
                retry,
                queue_timeout_secs,
                timeout_secs,
                changes,
                session,
                continue_from,
                start_from,
            } => {
                let step = StepNode {
                    agent,
                    input,
                    out,
                    name,
                    retry: retry.as_ref(),
                    queue_timeout_secs: *queue_timeout_secs,
                    timeout_secs: *timeout_secs,
                    changes: changes.as_ref(),
                    session: session.as_ref(),
                    continue_from: continue_from.as_ref(),
                    start_from: start_from.as_ref(),
                };
                self.step(&step, at, ctx)
            }
            Node::Seq { children } => (self.seq(children, at, ctx), Vec::new()),
            Node::Branch {
                cond,
                then_branch,
                else_branch,
            } => (
                match cond.test(&ctx) {
                    Ok(true) => self.node(then_branch, &at.child("then"), ctx),
                    Ok(false) => self.node(else_branch, &at.child("else"), ctx),
                    Err(e) => failed(format!("{}/cond: {e}", at.pointer)),
                },
                Vec::new(),
            ),
            Node::Fanout {
                items,
                bind,
                body,
                join,
                out,
                concurrency,
                budget,
            } => {
                let fanout = super::fanout::FanoutNode {
                    items,
                    bind,
                    body,
                    join: *join,
                    out,
                    concurrency: *concurrency,
                };
                let res = self.budgeted(budget.as_ref(), at, "/budget", |eval| {
                    eval.fanout(&fanout, at, ctx)
                });
                (res, Vec::new())
            }
            Node::Loop {
                counter,
                cond,
                body,
                max,
            } => (self.looped(counter, cond, body, *max, at, ctx), Vec::new()),
            Node::Try {
                body,
                catch,
                err_at,
            } => (
                self.tried(body, catch, err_at.as_ref(), at, ctx),
                Vec::new(),
            ),
            Node::Let { at: target, value } => (
                match value
                    .eval(&ctx)
                    .map_err(|e| format!("{}/value: {e}", at.pointer))
                    .and_then(|v| write(target, ctx, v))
                {
                    Ok(ctx) => Res::Done { ctx, seq: 0 },
                    Err(reason) => failed(reason),
                },
                Vec::new(),
            ),
            Node::Wait {
                name,
                prompt,
                schema,
                timeout_secs,
                out,
            } => {
                let wait = WaitOpen {
                    key: at.key(),
                    name: name.clone(),
                    prompt: None,
                    schema: schema.clone(),
                    timeout_secs: *timeout_secs,
                };
                (self.wait(wait, prompt.as_ref(), out, ctx), Vec::new())
            }
            Node::Call { flow, input, out } => (self.call(flow, input, out, at, ctx), Vec::new()),
            Node::Merge {
                agent,
                branches,
                strategy,
                judge,
                on_conflict,
                retry,
                timeout_secs,
                out,
            } => {
                let merge = super::merge::MergeNode {
                    agent,
                    branches,
                    strategy: *strategy,
                    judge: judge.as_ref(),
                    on_conflict: on_conflict.as_ref(),
                    retry: retry.as_ref(),
                    timeout_secs: *timeout_secs,
                    out,
                };
                self.merge_node(&merge, at, ctx)
            }
        };
        let (status, reason) = match &res {
            Res::Done { .. } => (NodeStatus::Passed, None),
            Res::Failed { reason, .. } => (NodeStatus::Failed, Some(reason.clone())),
            // A container blocked only on waits under it waits too.
            Res::Blocked { on_waits: true } => (NodeStatus::Waiting, None),
            Res::Blocked { on_waits: false } => (NodeStatus::Running, None),
        };
        let name = match node {
            Node::Step { name, .. } => name.clone(),
            Node::Wait { name, .. } => Some(name.clone()),
            Node::Call { flow, .. } => Some(flow.clone()),
            _ => None,
        };
        self.out.nodes.insert(
            at.key(),
            NodeState {
                pointer: at.pointer.clone(),
                kind: node.kind(),
                name,
                status,
                tries,
                reason,
            },
        );
        res
    }

    fn seq(&mut self, children: &[Node], at: &Place, mut ctx: Value) -> Res {
        let mut latest = 0;
        for (i, child) in children.iter().enumerate() {
            match self.node(child, &at.child(&format!("children/{i}")), ctx) {
                Res::Done { ctx: next, seq } => {
                    ctx = next;
                    latest = latest.max(seq);
                }
                other => return other,
            }
        }
        Res::Done { ctx, seq: latest }
    }

    pub(super) fn step(
        &mut self,
        step: &StepNode<'_>,
        at: &Place,
        ctx: Value,
    ) -> (Res, Vec<String>) {
        let base = at.key();
        let attempts = step.retry.map_or(1, |r| r.attempts.max(1));
        let mut tries = Vec::new();
        let mut not_before_ms = None;
        for n in 1..=attempts {
            let key = if n == 1 {
                base.clone()
            } else {
                format!("{base}~{n}")
            };
            tries.push(key.clone());
            let Some(entry) = self.journal.steps.get(&key) else {
                return (self.start(step, key, not_before_ms, at, &ctx), tries);
            };
            self.touched += 1;
            if let Some(outcome) = &entry.outcome {
                self.spent(outcome.seq(), outcome.spend());
            }
            match &entry.outcome {
                None => {
                    self.out.live.insert(key);
                    return (Res::Blocked { on_waits: false }, tries);
                }
                Some(Outcome::Passed {
                    value,
                    seq,
                    changes,
                    session,
                    ..
                }) => {
                    let session = session
                        .clone()
                        .unwrap_or_else(|| json!({"task": entry.task, "agent": step.agent}));
                    let written = write(step.out, ctx, value.clone())
                        .and_then(|ctx| match step.changes {
                            Some(target) => {
                                write(target, ctx, changes.clone().unwrap_or(Value::Null))
                            }
                            None => Ok(ctx),
                        })
                        .and_then(|ctx| match step.session {
                            Some(target) => write(target, ctx, session),
                            None => Ok(ctx),
                        });
                    let res = match written {
                        Ok(ctx) => Res::Done { ctx, seq: *seq },
                        Err(reason) => Res::Failed { reason, seq: *seq },
                    };
                    return (res, tries);
                }
                Some(Outcome::Failed {
                    reason, seq, at_ms, ..
                }) => {
                    let retryable = step
                        .retry
                        .is_none_or(|r| !r.non_retryable.iter().any(|nr| reason.starts_with(nr)));
                    if n == attempts || !retryable {
                        let reason = match step.name {
                            Some(name) => format!("step {name}: {reason}"),
                            None => format!("step {}: {reason}", at.pointer),
                        };
                        return (Res::Failed { reason, seq: *seq }, tries);
                    }
                    let backoff = step.retry.map_or(0, |r| u64::from(r.backoff_secs));
                    let factor = 1u64 << (n - 1).min(16);
                    not_before_ms = Some(at_ms.saturating_add(backoff * factor * 1000));
                }
            }
        }
        unreachable_failed(tries)
    }

    fn start(
        &mut self,
        step: &StepNode<'_>,
        key: String,
        not_before_ms: Option<u64>,
        at: &Place,
        ctx: &Value,
    ) -> Res {
        if let Some(over) = self.over_max_steps() {
            return over;
        }
        let input = match step
            .input
            .eval(ctx)
            .map_err(|e| e.to_string())
            .and_then(shallow)
        {
            Ok(v) => v,
            Err(e) => return failed(format!("{}/in: {e}", at.pointer)),
        };
        let continue_from = match step.continue_from.map(|expr| expr.eval(ctx)) {
            None => None,
            Some(Ok(value)) => match continued_task(&value) {
                Some(task) => Some(task),
                None => {
                    return failed(format!(
                        "{}/continue: wants a session (an object with a `task`) or a task id",
                        at.pointer
                    ));
                }
            },
            Some(Err(e)) => return failed(format!("{}/continue: {e}", at.pointer)),
        };
        let start_from = match step.start_from.map(|expr| expr.eval(ctx)) {
            None => None,
            Some(Ok(Value::String(branch))) => Some(branch),
            Some(Ok(_)) => {
                return failed(format!(
                    "{}/start_from: wants a branch name (a string)",
                    at.pointer
                ));
            }
            Some(Err(e)) => return failed(format!("{}/start_from: {e}", at.pointer)),
        };
        self.planned += 1;
        self.out.live.insert(key.clone());
        self.out.starts.push(StepStart {
            key,
            agent: step.agent.clone(),
            input,
            name: step.name.clone(),
            not_before_ms,
            queue_timeout_secs: step.queue_timeout_secs,
            timeout_secs: step.timeout_secs,
            wants_changes: step.changes.is_some(),
            wants_session: step.session.is_some(),
            continue_from,
            start_from,
            pin_scope: self.fanouts.last().cloned(),
            max_cost_usd: None,
            max_tokens: None,
        });
        Res::Blocked { on_waits: false }
    }

    /// The run's failure when it has spent `limits.max_steps`: its step
    /// tries and waits, journalled and asked for in this evaluation. A
    /// wait counts as a step: it is kept in the journal with its prompt.
    fn over_max_steps(&self) -> Option<Res> {
        let spent = self.journal.steps.len() + self.journal.waits.len() + self.planned;
        (spent >= self.max_steps).then(|| {
            failed(format!(
                "the run reached its limit of {} steps and waits (limits.max_steps)",
                self.max_steps
            ))
        })
    }

    fn wait(&mut self, mut open: WaitOpen, prompt: Option<&Expr>, out: &Expr, ctx: Value) -> Res {
        let Some(entry) = self.journal.waits.get(&open.key) else {
            if let Some(over) = self.over_max_steps() {
                return over;
            }
            if let Some(prompt) = prompt {
                match prompt
                    .eval(&ctx)
                    .map_err(|e| e.to_string())
                    .and_then(shallow)
                    .and_then(small_prompt)
                {
                    Ok(v) => open.prompt = Some(v),
                    Err(e) => return failed(format!("wait {}: prompt: {e}", open.name)),
                }
            }
            self.planned += 1;
            self.out.live.insert(open.key.clone());
            self.out.waits.push(open);
            return Res::Blocked { on_waits: true };
        };
        self.touched += 1;
        match &entry.outcome {
            None => {
                self.out.live.insert(open.key);
                Res::Blocked { on_waits: true }
            }
            Some(Outcome::Passed { value, seq, .. }) => match write(out, ctx, value.clone()) {
                Ok(ctx) => Res::Done { ctx, seq: *seq },
                Err(reason) => Res::Failed { reason, seq: *seq },
            },
            Some(Outcome::Failed { reason, seq, .. }) => Res::Failed {
                reason: format!("wait {}: {reason}", open.name),
                seq: *seq,
            },
        }
    }
}

/// A step's fields, borrowed from its node.
pub(super) struct StepNode<'a> {
    pub agent: &'a String,
    pub input: &'a Expr,
    pub out: &'a Expr,
    pub name: &'a Option<String>,
    pub retry: Option<&'a Retry>,
    pub queue_timeout_secs: Option<u32>,
    pub timeout_secs: Option<u32>,
    pub changes: Option<&'a Expr>,
    pub session: Option<&'a Expr>,
    pub continue_from: Option<&'a Expr>,
    pub start_from: Option<&'a Expr>,
}

/// The task a `continue` value names: a task id, or a session's `task`.
fn continued_task(value: &Value) -> Option<String> {
    let id = match value {
        Value::String(id) => id,
        Value::Object(map) => map.get("task")?.as_str()?,
        _ => return None,
    };
    (!id.is_empty() && id.len() <= 64).then(|| id.to_owned())
}

/// `value` if it nests no deeper than a run's variables may
/// (`MAX_CONTEXT_DEPTH`): what a step, a call, a wait or the run's result
/// is given is stored and read back.
pub(super) fn shallow(value: Value) -> Result<Value, String> {
    if deeper_than(&value, MAX_CONTEXT_DEPTH) {
        return Err(format!(
            "the value nests deeper than {MAX_CONTEXT_DEPTH} levels"
        ));
    }
    Ok(value)
}

/// The most a wait's prompt may weigh as JSON: it is kept in the run's
/// journal, rewritten with each of the run's moves, and shown to a person.
pub(crate) const MAX_WAIT_PROMPT_BYTES: usize = 256 * 1024;

/// `prompt` if its JSON is at most [`MAX_WAIT_PROMPT_BYTES`].
fn small_prompt(prompt: Value) -> Result<Value, String> {
    let size = serde_json::to_vec(&prompt).map_or(usize::MAX, |v| v.len());
    if size > MAX_WAIT_PROMPT_BYTES {
        return Err(format!(
            "it is {size} bytes as JSON, more than {MAX_WAIT_PROMPT_BYTES}"
        ));
    }
    Ok(prompt)
}

pub(super) fn failed(reason: String) -> Res {
    Res::Failed { reason, seq: 0 }
}

fn unreachable_failed(tries: Vec<String>) -> (Res, Vec<String>) {
    (failed("a step has no tries".into()), tries)
}

/// Writes `value` at the write path `target` (a `path` expression).
pub(super) fn write(target: &Expr, mut ctx: Value, value: Value) -> Result<Value, String> {
    let Expr::Path { at } = target else {
        return Err("a write target must be a `path` expression".into());
    };
    let path = WritePath::parse(at).map_err(|e| e.to_string())?;
    if deeper_than(&value, MAX_CONTEXT_DEPTH.saturating_sub(path.depth())) {
        return Err(format!(
            "{at}: the value written there would nest the run's variables deeper \
             than {MAX_CONTEXT_DEPTH} levels"
        ));
    }
    path.write(&mut ctx, value);
    Ok(ctx)
}

/// The variables `child` has that `parent` has not, or has otherwise.
pub(super) fn overlay(parent: &Value, child: Value) -> Value {
    let Value::Object(child) = child else {
        return child;
    };
    let fields: Map<String, Value> = child
        .into_iter()
        .filter(|(k, v)| parent.get(k) != Some(v))
        .collect();
    Value::Object(fields)
}
