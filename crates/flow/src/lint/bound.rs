//! The most steps a flow can start (each try of a retried step counted)
//! and the most node instances one evaluation of it can visit, its `call`s
//! counted at the bounds of the flows they call, and the cycles of calls
//! through other flows, which a run could only end by failing at its call
//! depth.

use std::collections::{BTreeMap, BTreeSet};

use super::Callees;
use crate::expr::Expr;
use crate::ir::{Limits, MergeStrategy, Node, Retry};
use crate::run::MAX_CALL_DEPTH;

/// Counts steps under one flow's limits: a sub-flow's steps count against
/// the run's `max_steps`, and its fan-outs are bounded by the run's
/// `max_fanout`, so the caller's limits hold for the flows it calls too.
pub(super) struct Bound<'a> {
    pub(super) limits: &'a Limits,
    pub(super) callees: &'a dyn Callees,
    /// The called flows being counted, outermost first: a call of one of
    /// them is a cycle, reported by its own check, and counts as one step
    /// here.
    stack: Vec<String>,
    /// The step bounds of the called flows counted so far, by name.
    counted: BTreeMap<String, u64>,
    /// The node instance bounds of the called flows counted so far.
    visited: BTreeMap<String, u64>,
}

impl<'a> Bound<'a> {
    /// A count under `limits`, the called flows read from `callees`.
    pub(super) fn new(limits: &'a Limits, callees: &'a dyn Callees) -> Bound<'a> {
        Bound {
            limits,
            callees,
            stack: Vec::new(),
            counted: BTreeMap::new(),
            visited: BTreeMap::new(),
        }
    }

    /// The most steps `node` can start (each try of a step's `retry`, loops
    /// at `max`, fan-outs and a merge's rounds at their literal width or
    /// `limits.max_fanout`, calls at their flow's bound): a run counts
    /// every step try against `limits.max_steps`.
    pub(super) fn steps(&mut self, node: &Node) -> u64 {
        match node {
            Node::Step { retry, .. } => tries(retry.as_ref()),
            // A wait counts as a step: the run keeps it, with its prompt,
            // in its journal.
            Node::Wait { .. } => 1,
            Node::Call { flow, .. } => self.call(flow),
            Node::Merge {
                branches,
                strategy,
                judge,
                on_conflict,
                retry,
                ..
            } => {
                // A judge, then rounds of a merge and a resolve; only a
                // resolved `sequence` conflict starts another round, and
                // each round merges at least one branch more.
                let rounds = match (strategy, on_conflict) {
                    (MergeStrategy::Sequence, Some(_)) => self.width(branches),
                    _ => 1,
                };
                let round = 1 + u64::from(on_conflict.is_some());
                // Each inner step is tried as the node's `retry` says.
                u64::from(judge.is_some())
                    .saturating_add(rounds.saturating_mul(round))
                    .saturating_mul(tries(retry.as_ref()))
            }
            Node::Let { .. } => 0,
            Node::Seq { children } => children
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(self.steps(c))),
            Node::Branch {
                then_branch,
                else_branch,
                ..
            } => self.steps(then_branch).max(self.steps(else_branch)),
            Node::Fanout { items, body, .. } => self.width(items).saturating_mul(self.steps(body)),
            Node::Loop { body, max, .. } => {
                u64::from(max.unwrap_or(0)).saturating_mul(self.steps(body))
            }
            Node::Try { body, catch, .. } => self.steps(body).saturating_add(self.steps(catch)),
        }
    }

    /// The most node instances one evaluation of `node` can visit: the
    /// node itself and, under it, a seq's children, a branch's larger
    /// side, a try's body and catch, a loop's body `max` times, a
    /// fan-out's body once per item (its literal width or
    /// `limits.max_fanout`) and a call's flow. A run replays its graph
    /// whole at each step's end, and an evaluation that visits more than
    /// its bound fails the run.
    pub(super) fn nodes(&mut self, node: &Node) -> u64 {
        let under = match node {
            Node::Step { .. } | Node::Wait { .. } | Node::Let { .. } | Node::Merge { .. } => 0,
            Node::Call { flow, .. } => self.call_nodes(flow),
            Node::Seq { children } => children
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(self.nodes(c))),
            Node::Branch {
                then_branch,
                else_branch,
                ..
            } => self.nodes(then_branch).max(self.nodes(else_branch)),
            Node::Fanout { items, body, .. } => self.width(items).saturating_mul(self.nodes(body)),
            Node::Loop { body, max, .. } => {
                u64::from(max.unwrap_or(0)).saturating_mul(self.nodes(body))
            }
            Node::Try { body, catch, .. } => self.nodes(body).saturating_add(self.nodes(catch)),
        };
        under.saturating_add(1)
    }

    /// The items of an array expression: a literal's length, else
    /// `limits.max_fanout` (a fan-out's width, the branches of its steps).
    fn width(&self, items: &Expr) -> u64 {
        match items {
            Expr::Lit { value } => value.as_array().map_or(0, Vec::len) as u64,
            _ => u64::from(self.limits.max_fanout),
        }
    }

    /// A call of flow `name`: that flow's bound; one step when it is not
    /// known (lint reports it) or is being counted (a cycle).
    fn call(&mut self, name: &str) -> u64 {
        if let Some(steps) = self.counted.get(name) {
            return *steps;
        }
        let callees = self.callees;
        let Some(callee) = callees.callee(name) else {
            return 1;
        };
        // Past the call depth a run fails instead of starting more.
        if self.stack.iter().any(|n| n == name) || self.stack.len() > MAX_CALL_DEPTH as usize {
            return 1;
        }
        self.stack.push(name.to_owned());
        let steps = self.steps(&callee.body);
        self.stack.pop();
        self.counted.insert(name.to_owned(), steps);
        steps
    }

    /// The node instances under a call of flow `name`: its body's; none
    /// when it is not known or is being counted, as for [`Bound::call`].
    fn call_nodes(&mut self, name: &str) -> u64 {
        if let Some(nodes) = self.visited.get(name) {
            return *nodes;
        }
        let callees = self.callees;
        let Some(callee) = callees.callee(name) else {
            return 0;
        };
        if self.stack.iter().any(|n| n == name) || self.stack.len() > MAX_CALL_DEPTH as usize {
            return 0;
        }
        self.stack.push(name.to_owned());
        let nodes = self.nodes(&callee.body);
        self.stack.pop();
        self.visited.insert(name.to_owned(), nodes);
        nodes
    }
}

/// The tries of a step or of each inner step of a merge node: its
/// `retry.attempts`, the first try included (1 without a `retry`; an
/// `attempts` of 0, which lint refuses, tries once, as a run does).
fn tries(retry: Option<&Retry>) -> u64 {
    retry.map_or(1, |r| u64::from(r.attempts.max(1)))
}

/// A cycle of calls reached by calling flow `callee` (as `callees` has
/// it, which is the flow a run calls): the names along it, from `callee`
/// to the first name met twice.
pub(super) fn call_cycle(callee: &str, callees: &dyn Callees) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let mut cleared = BTreeSet::new();
    cycle_from(callee, callees, &mut path, &mut cleared)
}

/// Depth first from `name`, along `path`; `cleared` holds the flows known
/// to reach no cycle.
fn cycle_from(
    name: &str,
    callees: &dyn Callees,
    path: &mut Vec<String>,
    cleared: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if path.iter().any(|n| n == name) {
        let mut cycle = path.clone();
        cycle.push(name.to_owned());
        return Some(cycle);
    }
    if cleared.contains(name) {
        return None;
    }
    let flow = callees.callee(name)?;
    path.push(name.to_owned());
    let mut called = Vec::new();
    calls(&flow.body, &mut called);
    for next in called {
        if let Some(cycle) = cycle_from(next, callees, path, cleared) {
            return Some(cycle);
        }
    }
    path.pop();
    cleared.insert(name.to_owned());
    None
}

/// The flow names a graph's `call` nodes name, in order.
fn calls<'n>(node: &'n Node, out: &mut Vec<&'n str>) {
    if let Node::Call { flow, .. } = node {
        out.push(flow);
    }
    for (_, child) in node.children() {
        calls(child, out);
    }
}
