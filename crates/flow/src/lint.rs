//! Lint: every problem of a flow at once, each with the JSON pointer of
//! the place in the IR, a stable code and a hint, so a model that wrote
//! the flow can fix all of them in one pass. Bounds (nesting depth,
//! fan-out width, steps per run, node instances per evaluation, step
//! timeouts) are checked here, before a run starts.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;
use serde_json::Value;

use crate::expr::Expr;
use crate::ir::{Budget, Flow, Limits, MAX_TIMEOUT_SECS, MergeStrategy, Node, Retry};
use crate::path::WritePath;
use crate::run::{MAX_LOOP_ITERATIONS, MAX_NODE_INSTANCES};

mod bound;
mod input;
mod vars;

use bound::{Bound, call_cycle};
pub use input::InputSchema;
use vars::{read_variables, runs_once, written};

/// The largest `max_cost_usd` a budget may set, as a task's.
const MAX_BUDGET_USD: f64 = 1_000_000.0;

/// What a flow may refer to, and the daemon's caps on its limits.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Agent names.
    pub agents: BTreeSet<String>,
    /// The names of the agents of kind merge (`kind = "merge"`), the only
    /// agents a `merge` node's `ref` may name; `None` when the agents'
    /// kinds are not known, and a `ref` is then checked only for naming
    /// an agent.
    pub merge_agents: Option<BTreeSet<String>>,
    /// The names of the agents whose attempts work in a worktree, the only
    /// agents a `merge` node's `on_conflict` can resolve with; `None` when
    /// not known.
    pub worktree_agents: Option<BTreeSet<String>>,
    /// The agents' compiled `input_schema`s, by agent name: a step whose
    /// `in` is a literal must give an input its agent's schema accepts
    /// (`input_schema`). An agent not listed here is not checked.
    pub input_schemas: BTreeMap<String, InputSchema>,
    /// Flow names (`call`).
    pub flows: BTreeSet<String>,
    /// The daemon's caps; a flow's `limits` may not exceed them.
    pub caps: Limits,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// RFC 6901 pointer into the flow's JSON, e.g. `/body/children/2/ref`.
    pub pointer: String,
    /// Stable code, e.g. `unknown_agent`.
    pub code: &'static str,
    pub message: String,
    /// How to fix it.
    pub hint: String,
}

/// The flows a linted flow may call, by name: a `call` counts the steps
/// of the flow it names towards the caller's `max_steps`, and a cycle of
/// calls through them is a problem.
pub trait Callees {
    /// The flow named `name`, if there is one.
    fn callee(&self, name: &str) -> Option<&Flow>;
}

impl Callees for BTreeMap<String, Flow> {
    fn callee(&self, name: &str) -> Option<&Flow> {
        self.get(name)
    }
}

/// Every problem of `flow` against `known`; empty when it may run. A
/// `call` counts as one step: [`lint_calling`] counts the flows it calls.
pub fn lint(flow: &Flow, known: &Known) -> Vec<Problem> {
    lint_calling(flow, known, &BTreeMap::new())
}

/// Every problem of `flow` against `known`, the flows it calls read from
/// `callees`: a `call` counts as the most steps its flow can start, and a
/// call that leads back into a flow already calling is `recursive_call`.
pub fn lint_calling(flow: &Flow, known: &Known, callees: &dyn Callees) -> Vec<Problem> {
    let mut lint = Lint::new(flow, known, callees);
    lint.flow(flow);
    lint.problems
}

/// The variables `flow` reads somewhere before any node writes them on
/// every path, `exists` tests included: those `lint` reports as
/// `unbound_variable`, and those only tested for there that some node
/// writes later or on another path.
pub(crate) fn unbound_variables(flow: &Flow) -> BTreeSet<String> {
    let known = Known::default();
    let callees = BTreeMap::new();
    let mut lint = Lint::new(flow, &known, &callees);
    lint.flow(flow);
    lint.unbound
}

struct Lint<'a> {
    known: &'a Known,
    callees: &'a dyn Callees,
    limits: &'a Limits,
    name: &'a str,
    problems: Vec<Problem>,
    /// Step and wait names seen so far.
    names: HashSet<String>,
    /// Variables read before they are bound.
    unbound: BTreeSet<String>,
    /// Variables some node of the flow writes, on any path.
    written: BTreeSet<String>,
}

/// The variables bound at a point of the graph (`input` always is).
type Scope = BTreeSet<String>;

impl<'a> Lint<'a> {
    fn new(flow: &'a Flow, known: &'a Known, callees: &'a dyn Callees) -> Lint<'a> {
        let mut all_written = BTreeSet::new();
        written(&flow.body, &mut all_written);
        Lint {
            known,
            callees,
            limits: &flow.limits,
            name: &flow.name,
            problems: Vec::new(),
            names: HashSet::new(),
            unbound: BTreeSet::new(),
            written: all_written,
        }
    }

    fn report(&mut self, pointer: &str, code: &'static str, message: String, hint: &str) {
        self.problems.push(Problem {
            pointer: pointer.to_owned(),
            code,
            message,
            hint: hint.to_owned(),
        });
    }

    fn flow(&mut self, flow: &Flow) {
        let valid_name = !flow.name.is_empty()
            && flow.name.len() <= 64
            && flow
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !valid_name {
            self.report(
                "/name",
                "bad_name",
                format!("the flow's name `{}` is not a valid name", flow.name),
                "use 1 to 64 of a-z, 0-9, `_` and `-`",
            );
        }
        self.limits(&flow.limits);
        if let Some(budget) = &flow.budget {
            self.budget("/budget", budget);
        }
        if let Some(schema) = &flow.input_schema {
            self.schema("/input_schema", schema);
        }
        let mut scope: Scope = BTreeSet::from(["input".to_owned()]);
        self.node(&flow.body, "/body", 1, &mut scope);
        if let Some(output) = &flow.output {
            self.reads("/output", output, &scope);
        }
        let mut bound = Bound::new(&flow.limits, self.callees);
        let steps = bound.steps(&flow.body);
        if steps > u64::from(flow.limits.max_steps) {
            self.report(
                "/body",
                "too_many_steps",
                format!(
                    "the flow may start {steps} steps, more than limits.max_steps ({})",
                    flow.limits.max_steps
                ),
                "lower a loop's `max`, a fan-out's width, a step's retry.attempts or the steps of a called flow, or raise limits.max_steps",
            );
        }
        let nodes = bound.nodes(&flow.body);
        if nodes > MAX_NODE_INSTANCES {
            self.report(
                "/body",
                "too_many_nodes",
                format!(
                    "one evaluation of the flow may visit {nodes} node instances, \
                     more than a run allows ({MAX_NODE_INSTANCES})"
                ),
                "lower the `max` of nested loops or the width of nested fan-outs \
                 (the nodes of a called flow count too)",
            );
        }
    }

    fn limits(&mut self, limits: &Limits) {
        let caps = &self.known.caps;
        for (field, value, cap) in [
            ("max_steps", limits.max_steps, caps.max_steps),
            ("max_fanout", limits.max_fanout, caps.max_fanout),
            ("max_depth", limits.max_depth, caps.max_depth),
        ] {
            if value > cap {
                self.report(
                    &format!("/limits/{field}"),
                    "limit_too_high",
                    format!("limits.{field} is {value}; this daemon allows at most {cap}"),
                    "lower it, or ask the operator to raise the daemon's flow limits",
                );
            }
        }
    }

    fn budget(&mut self, pointer: &str, budget: &Budget) {
        if budget.max_cost_usd.is_none() && budget.max_tokens.is_none() {
            self.report(
                pointer,
                "bad_budget",
                "a budget sets neither max_cost_usd nor max_tokens".to_owned(),
                "set one of them, or drop the budget",
            );
        }
        if let Some(cost) = budget.max_cost_usd
            && !(cost > 0.0 && cost <= MAX_BUDGET_USD)
        {
            self.report(
                &format!("{pointer}/max_cost_usd"),
                "bad_budget",
                format!("max_cost_usd is {cost}"),
                "give more than 0 and at most 1000000 (US dollars)",
            );
        }
        if budget.max_tokens == Some(0) {
            self.report(
                &format!("{pointer}/max_tokens"),
                "bad_budget",
                "max_tokens is 0".to_owned(),
                "give at least 1",
            );
        }
    }

    fn agent(&mut self, pointer: &str, agent: &str) {
        if !self.known.agents.contains(agent) {
            let known: Vec<&str> = self.known.agents.iter().map(String::as_str).collect();
            self.report(
                pointer,
                "unknown_agent",
                format!("no agent is named `{agent}`"),
                &format!("use one of: {}", known.join(", ")),
            );
        }
    }

    /// A step's or a merge node's `retry` counts its first try.
    fn retry(&mut self, at: &str, retry: Option<&Retry>) {
        if let Some(retry) = retry
            && retry.attempts == 0
        {
            self.report(
                &format!("{at}/retry/attempts"),
                "bad_retry",
                "retry.attempts is 0".to_owned(),
                "count the first try: 1 means no retry",
            );
        }
    }

    /// A step's or a merge node's timeout, which its task's policy bounds.
    fn timeout(&mut self, at: &str, field: &str, secs: Option<u32>) {
        if let Some(secs) = secs
            && !(1..=MAX_TIMEOUT_SECS).contains(&secs)
        {
            self.report(
                &format!("{at}/{field}"),
                "bad_timeout",
                format!("{field} is {secs}, not 1 to {MAX_TIMEOUT_SECS}"),
                &format!(
                    "give 1 to {MAX_TIMEOUT_SECS} seconds (7 days), as a task's policy allows, \
                     or leave it out"
                ),
            );
        }
    }

    /// A `merge` node's `ref` names an agent of kind merge, when the
    /// agents' kinds are known (an unknown agent is `unknown_agent`).
    fn merge_agent(&mut self, pointer: &str, agent: &str) {
        let Some(merge_agents) = &self.known.merge_agents else {
            return;
        };
        if !self.known.agents.contains(agent) || merge_agents.contains(agent) {
            return;
        }
        let hint = if merge_agents.is_empty() {
            "no agent is of kind merge: configure one with `kind = \"merge\"` \
             (docs/configuration.md, Merge agents)"
                .to_owned()
        } else {
            let names: Vec<&str> = merge_agents.iter().map(String::as_str).collect();
            format!("use a merge agent: {}", names.join(", "))
        };
        self.report(
            pointer,
            "not_a_merge_agent",
            format!("`{agent}` is not a merge agent (`kind = \"merge\"`)"),
            &hint,
        );
    }

    /// A `merge` node's `on_conflict` names an agent that works in a
    /// worktree, when that is known: only its commits can resolve.
    fn resolver(&mut self, pointer: &str, agent: &str) {
        let Some(worktree_agents) = &self.known.worktree_agents else {
            return;
        };
        if !self.known.agents.contains(agent) || worktree_agents.contains(agent) {
            return;
        }
        self.report(
            pointer,
            "no_worktree",
            format!("`{agent}` works in no worktree, so it can never resolve a conflict"),
            "name an agent with a `worktree`, whose attempt commits the resolution on a branch",
        );
    }

    fn schema(&mut self, pointer: &str, schema: &Value) {
        if let Err(error) = jsonschema::validator_for(schema) {
            self.report(
                pointer,
                "bad_schema",
                format!("not a valid JSON Schema: {error}"),
                "write a JSON Schema (draft 2020-12), e.g. {\"type\": \"object\", \"properties\": {…}}",
            );
        }
    }

    fn node(&mut self, node: &Node, at: &str, depth: u32, scope: &mut Scope) {
        if depth > self.limits.max_depth {
            self.report(
                at,
                "too_deep",
                format!(
                    "nested {depth} deep, more than limits.max_depth ({})",
                    self.limits.max_depth
                ),
                "flatten the graph or move a part into a flow of its own (`call`)",
            );
            return;
        }
        match node {
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
                self.agent(&format!("{at}/ref"), agent);
                if let Some(name) = name {
                    self.unique_name(&format!("{at}/name"), name);
                }
                self.retry(at, retry.as_ref());
                self.timeout(at, "queue_timeout_secs", *queue_timeout_secs);
                self.timeout(at, "timeout_secs", *timeout_secs);
                self.reads(&format!("{at}/in"), input, scope);
                self.step_input(at, agent, input);
                if let Some(from) = continue_from {
                    self.reads(&format!("{at}/continue"), from, scope);
                }
                if let Some(from) = start_from {
                    self.reads(&format!("{at}/start_from"), from, scope);
                    if continue_from.is_some() {
                        self.report(
                            &format!("{at}/start_from"),
                            "start_and_continue",
                            "a step both continues a task and starts from a branch".to_owned(),
                            "keep one: a continuation starts from its task's branch",
                        );
                    }
                }
                self.write(&format!("{at}/out"), out, scope);
                if let Some(changes) = changes {
                    self.write(&format!("{at}/changes"), changes, scope);
                }
                if let Some(session) = session {
                    self.write(&format!("{at}/session"), session, scope);
                }
            }
            Node::Seq { children } => {
                for (i, child) in children.iter().enumerate() {
                    self.node(child, &format!("{at}/children/{i}"), depth + 1, scope);
                }
            }
            Node::Branch {
                cond,
                then_branch,
                else_branch,
            } => {
                self.reads(&format!("{at}/cond"), cond, scope);
                if let Expr::Lit { value } = cond {
                    let dead = if value == &Value::Bool(true) {
                        "else"
                    } else {
                        "then"
                    };
                    self.report(
                        &format!("{at}/{dead}"),
                        "unreachable",
                        format!("the condition is the literal {value}, so `{dead}` never runs"),
                        "test a variable, or replace the branch by the node that runs",
                    );
                }
                // A variable is bound after a branch only when both sides bind it.
                let mut then_scope = scope.clone();
                self.node(
                    then_branch,
                    &format!("{at}/then"),
                    depth + 1,
                    &mut then_scope,
                );
                let mut else_scope = scope.clone();
                self.node(
                    else_branch,
                    &format!("{at}/else"),
                    depth + 1,
                    &mut else_scope,
                );
                scope.extend(then_scope.intersection(&else_scope).cloned());
            }
            Node::Fanout {
                items,
                bind,
                body,
                out,
                concurrency,
                budget,
                ..
            } => {
                if let Some(budget) = budget {
                    self.budget(&format!("{at}/budget"), budget);
                }
                self.reads(&format!("{at}/items"), items, scope);
                if let Expr::Lit { value } = items {
                    match value.as_array() {
                        Some(list) if list.len() > self.limits.max_fanout as usize => self.report(
                            &format!("{at}/items"),
                            "fanout_too_wide",
                            format!(
                                "{} items, more than limits.max_fanout ({})",
                                list.len(),
                                self.limits.max_fanout
                            ),
                            "split the items or raise limits.max_fanout",
                        ),
                        Some(_) => {}
                        None => self.report(
                            &format!("{at}/items"),
                            "not_an_array",
                            "a fan-out's items must be an array".to_owned(),
                            "give an array, or a `select` of one",
                        ),
                    }
                }
                match concurrency {
                    None => self.report(
                        &format!("{at}/concurrency"),
                        "unbounded_fanout",
                        "the fan-out does not say how many branches run at once".to_owned(),
                        "add `concurrency`: the branches running at once (e.g. 5)",
                    ),
                    Some(0) => self.report(
                        &format!("{at}/concurrency"),
                        "unbounded_fanout",
                        "concurrency is 0: no branch could run".to_owned(),
                        "give at least 1",
                    ),
                    Some(_) => {}
                }
                let mut inner = scope.clone();
                self.write(&format!("{at}/bind"), bind, &mut inner);
                self.node(body, &format!("{at}/body"), depth + 1, &mut inner);
                self.write(&format!("{at}/out"), out, scope);
            }
            Node::Loop {
                counter,
                cond,
                body,
                max,
            } => {
                if max.is_none_or(|m| m == 0) {
                    self.report(
                        &format!("{at}/max"),
                        "loop_without_max",
                        "a loop needs `max`, the most iterations (at least 1)".to_owned(),
                        "add `max`, e.g. 5",
                    );
                } else if max.is_some_and(|m| m > MAX_LOOP_ITERATIONS) {
                    self.report(
                        &format!("{at}/max"),
                        "limit_too_high",
                        format!("a loop runs at most {MAX_LOOP_ITERATIONS} times"),
                        &format!("lower `max` to {MAX_LOOP_ITERATIONS} or less"),
                    );
                }
                self.write(&format!("{at}/counter"), counter, scope);
                self.reads(&format!("{at}/cond"), cond, scope);
                // `cond` is tested before the first iteration too: the
                // body's writes are bound after the loop only when it
                // surely runs once.
                let mut body_scope = scope.clone();
                self.node(body, &format!("{at}/body"), depth + 1, &mut body_scope);
                if runs_once(counter, cond, *max) {
                    *scope = body_scope;
                }
            }
            Node::Try {
                body,
                catch,
                err_at,
            } => {
                // The catch sees only what held before the body: its writes
                // are undone.
                let mut body_scope = scope.clone();
                self.node(body, &format!("{at}/body"), depth + 1, &mut body_scope);
                let mut catch_scope = scope.clone();
                if let Some(err_at) = err_at {
                    self.write(&format!("{at}/err_at"), err_at, &mut catch_scope);
                }
                self.node(catch, &format!("{at}/catch"), depth + 1, &mut catch_scope);
                scope.extend(body_scope.intersection(&catch_scope).cloned());
            }
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
                self.retry(at, retry.as_ref());
                self.timeout(at, "timeout_secs", *timeout_secs);
                for (field, name) in [
                    ("ref", Some(agent)),
                    ("judge", judge.as_ref()),
                    ("on_conflict", on_conflict.as_ref()),
                ] {
                    if let Some(name) = name {
                        self.agent(&format!("{at}/{field}"), name);
                    }
                }
                self.merge_agent(&format!("{at}/ref"), agent);
                if let Some(resolver) = on_conflict {
                    self.resolver(&format!("{at}/on_conflict"), resolver);
                }
                match (strategy, judge) {
                    (MergeStrategy::PickBest, None) => self.report(
                        &format!("{at}/judge"),
                        "missing_judge",
                        "pick_best needs a judge agent".to_owned(),
                        "add `judge`: the agent that names the best branch",
                    ),
                    (MergeStrategy::Sequence | MergeStrategy::Octopus, Some(_)) => self.report(
                        &format!("{at}/judge"),
                        "unused_judge",
                        format!("{} merges every branch; no judge runs", strategy.as_str()),
                        "drop `judge`, or use strategy pick_best",
                    ),
                    _ => {}
                }
                self.reads(&format!("{at}/branches"), branches, scope);
                self.write(&format!("{at}/out"), out, scope);
            }
            Node::Let { at: target, value } => {
                self.reads(&format!("{at}/value"), value, scope);
                self.write(&format!("{at}/at"), target, scope);
            }
            Node::Wait {
                name,
                prompt,
                schema,
                out,
                ..
            } => {
                self.unique_name(&format!("{at}/name"), name);
                if let Some(prompt) = prompt {
                    self.reads(&format!("{at}/prompt"), prompt, scope);
                }
                if let Some(schema) = schema {
                    self.schema(&format!("{at}/schema"), schema);
                }
                self.write(&format!("{at}/out"), out, scope);
            }
            Node::Call { flow, input, out } => {
                if flow == self.name {
                    self.report(
                        &format!("{at}/flow"),
                        "recursive_call",
                        format!("the flow calls itself (`{flow}`)"),
                        "use a `loop` with a `max` instead",
                    );
                } else if !self.known.flows.contains(flow) {
                    self.report(
                        &format!("{at}/flow"),
                        "unknown_flow",
                        format!("no flow is named `{flow}`"),
                        "declare it in the flows directory, or fix the name",
                    );
                } else if let Some(cycle) = call_cycle(flow, self.callees) {
                    self.report(
                        &format!("{at}/flow"),
                        "recursive_call",
                        format!(
                            "calling `{flow}` leads to a cycle of calls ({})",
                            cycle.join(" → ")
                        ),
                        "break the cycle: repeat work with a `loop` with a `max` instead",
                    );
                }
                self.reads(&format!("{at}/in"), input, scope);
                self.write(&format!("{at}/out"), out, scope);
            }
        }
    }

    fn unique_name(&mut self, pointer: &str, name: &str) {
        if !self.names.insert(name.to_owned()) {
            self.report(
                pointer,
                "duplicate_name",
                format!("the name `{name}` is used twice"),
                "give every step and wait a name of its own",
            );
        }
    }

    /// Checks an expression and that every variable it reads is bound,
    /// or, one it only tests for (`exists`, a template's `is defined`),
    /// written by some node.
    fn reads(&mut self, pointer: &str, expr: &Expr, scope: &Scope) {
        if let Err(error) = expr.check() {
            self.report(
                pointer,
                "bad_expression",
                error.to_string(),
                "see docs/flows.md, Expressions",
            );
            return;
        }
        let reads = read_variables(expr);
        for variable in &reads.needed {
            if !scope.contains(variable) {
                self.unbound.insert(variable.clone());
                let bound: Vec<&str> = scope.iter().map(String::as_str).collect();
                self.report(
                    pointer,
                    "unbound_variable",
                    format!("`{variable}` is read before any node writes it"),
                    &format!("bound here: {}", bound.join(", ")),
                );
            }
        }
        for variable in &reads.tested {
            if scope.contains(variable) {
                continue;
            }
            self.unbound.insert(variable.clone());
            if !self.written.contains(variable) {
                let written: Vec<&str> = std::iter::once("input")
                    .chain(self.written.iter().map(String::as_str))
                    .collect();
                self.report(
                    pointer,
                    "unbound_variable",
                    format!("`{variable}` is tested for, but no node writes it"),
                    &format!("written in this flow: {}", written.join(", ")),
                );
            }
        }
    }

    /// Checks a write target (`path` with a plain `$.name…`) and binds it.
    fn write(&mut self, pointer: &str, target: &Expr, scope: &mut Scope) {
        let parsed = match target {
            Expr::Path { at } => WritePath::parse(at).map_err(|e| e.to_string()),
            other => Err(format!(
                "a write target must be a \"path\", not a \"{}\"",
                op_name(other)
            )),
        };
        match parsed {
            Ok(path) => {
                scope.insert(path.variable().to_owned());
            }
            Err(message) => self.report(
                pointer,
                "bad_write_path",
                message,
                "write to {\"op\": \"path\", \"at\": \"$.name\"}",
            ),
        }
    }
}

/// The `op` an expression is written with.
fn op_name(expr: &Expr) -> &'static str {
    match expr {
        Expr::Path { .. } => "path",
        Expr::Select { .. } => "select",
        Expr::Exists { .. } => "exists",
        Expr::Lit { .. } => "lit",
        Expr::Eq { .. } => "eq",
        Expr::Ne { .. } => "ne",
        Expr::Lt { .. } => "lt",
        Expr::Gt { .. } => "gt",
        Expr::And { .. } => "and",
        Expr::Or { .. } => "or",
        Expr::Not { .. } => "not",
        Expr::Len { .. } => "len",
        Expr::Template { .. } => "template",
    }
}

#[cfg(test)]
#[path = "lint_tests.rs"]
mod tests;
