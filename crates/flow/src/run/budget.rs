//! Budgets over a run or a fan-out: what the steps under one reported they
//! spent (each try's task usage, recorded with its outcome), added up.
//!
//! The rule mirrors a task's budget (docs/tasks.md, Budgets): a node still
//! running fails once its steps used the whole budget (the limit or more),
//! and nothing more starts under it; a node that ended fails when its steps
//! used more than the limit. Outcomes are taken in the order they were
//! recorded: the node fails at the first outcome that used the whole budget
//! while it was still running (one recorded before its own deciding
//! outcome), else, once it ended, when the outcomes up to its deciding one
//! used more than the limit. Outcomes recorded after that never count, so
//! a budget's verdict, its reason and its amount stay what they were when
//! first reached, whatever a cancelled step reports later. Each step
//! started under a budget gets what is left of it as its task's own
//! budget, so one runaway step stops at the limit too.
//!
//! A flow's budget (the run's, or a called flow's over each call) caps
//! its whole body, except that a body which is a `try` takes the budget
//! over the try's own body: past it that body fails and the catch runs,
//! outside the budget, as a `try` around a budgeted fan-out does.

use serde_json::Value;

use super::eval::{Eval, NodeStatus, Place, Res};
use super::journal::Spend;
use crate::ir::{Budget, Flow, Node};

/// The outcomes read under one budget so far: (journal seq, spend).
pub(super) type Spent = Vec<(u64, Spend)>;

/// A flow's budget and how its reasons name it (`""` for the run's flow,
/// `flow NAME: ` for one a `call` runs).
#[derive(Debug)]
pub(super) struct FlowBudget<'a> {
    pub(super) budget: &'a Budget,
    pub(super) named: String,
}

impl<'a> Eval<'a> {
    /// Counts one recorded outcome's spend against every budget around it.
    pub(super) fn spent(&mut self, seq: u64, spend: Spend) {
        if spend.is_zero() {
            return;
        }
        for scope in &mut self.budgets {
            scope.push((seq, spend));
        }
    }

    /// Evaluates the run's flow's body under its budget.
    pub(super) fn flow_body(&mut self, flow: &'a Flow, ctx: Value) -> Res {
        self.flow_body_at(flow, "", &Place::root("/body"), ctx)
    }

    /// Evaluates `flow`'s body at `at` under `flow`'s budget (the run's
    /// flow, or one a `call` runs), whose reasons name it `{named}/budget`;
    /// a body that is a `try` hands the budget to its own body
    /// (`Eval::tried`).
    pub(super) fn flow_body_at(
        &mut self,
        flow: &'a Flow,
        named: &str,
        at: &Place,
        ctx: Value,
    ) -> Res {
        let budget = flow.budget.as_ref().map(|budget| FlowBudget {
            budget,
            named: named.to_owned(),
        });
        if matches!(flow.body, Node::Try { .. }) {
            self.body_budget = budget;
            return self.node(&flow.body, at, ctx);
        }
        self.flow_budgeted(budget, &flow.body, at, ctx)
    }

    /// Evaluates `node` at `at` under a flow's `budget`; a node the
    /// budget failed shows that failure as its own.
    pub(super) fn flow_budgeted(
        &mut self,
        budget: Option<FlowBudget<'_>>,
        node: &Node,
        at: &Place,
        ctx: Value,
    ) -> Res {
        let (budget, named) = match &budget {
            Some(flow) => (Some(flow.budget), flow.named.as_str()),
            None => (None, ""),
        };
        let res = self.budgeted(budget, &Place::root(named), "/budget", |eval| {
            eval.node(node, at, ctx)
        });
        if let Res::Failed { reason, .. } = &res
            && let Some(state) = self.out.nodes.get_mut(&at.key())
        {
            state.status = NodeStatus::Failed;
            state.reason = Some(reason.clone());
        }
        res
    }

    /// Evaluates a node under `budget` (none: as it is).
    pub(super) fn budgeted(
        &mut self,
        budget: Option<&Budget>,
        at: &Place,
        field: &str,
        run: impl FnOnce(&mut Self) -> Res,
    ) -> Res {
        let Some(budget) = budget else {
            return run(self);
        };
        // What the node asks for is kept apart until the budget's verdict.
        let outer = std::mem::take(&mut self.out);
        self.budgets.push(Vec::new());
        let res = run(self);
        let mut counted = self.budgets.pop().unwrap_or_default();
        let mut inner = std::mem::replace(&mut self.out, outer);
        counted.sort_by_key(|(seq, _)| *seq);
        // The node's deciding outcome; none while it runs.
        let end = match &res {
            Res::Done { seq, .. } | Res::Failed { seq, .. } => Some(*seq),
            Res::Blocked { .. } => None,
        };
        let pointer = format!("{}{field}", at.pointer);
        let mut used = Spend::default();
        let mut verdict = None;
        for (seq, spend) in &counted {
            if end.is_some_and(|end| *seq >= end) {
                break;
            }
            used = add(used, *spend);
            if let Some(reason) = over(budget, used, false, &pointer) {
                verdict = Some((reason, *seq));
                break;
            }
        }
        if let (None, Some(end)) = (&verdict, end) {
            used = counted
                .iter()
                .filter(|(seq, _)| *seq <= end)
                .fold(Spend::default(), |sum, (_, s)| add(sum, *s));
            verdict = over(budget, used, true, &pointer).map(|reason| (reason, end));
        }
        if let Some((reason, seq)) = verdict {
            // Nothing under the budget starts or stays live (the runner
            // cancels what runs there), and what ran there shows stopped.
            self.planned = self
                .planned
                .saturating_sub(inner.starts.len() + inner.waits.len());
            for (key, mut node) in inner.nodes {
                if matches!(node.status, NodeStatus::Running | NodeStatus::Waiting) {
                    node.status = NodeStatus::Cancelled;
                }
                self.out.nodes.insert(key, node);
            }
            return Res::Failed { reason, seq };
        }
        for start in inner.starts.iter_mut() {
            if let Some(max) = budget.max_cost_usd {
                let left = max - used.cost_usd;
                start.max_cost_usd = Some(start.max_cost_usd.map_or(left, |c| c.min(left)));
            }
            if let Some(max) = budget.max_tokens {
                let left = max.saturating_sub(used.tokens);
                start.max_tokens = Some(start.max_tokens.map_or(left, |t| t.min(left)));
            }
        }
        self.out.starts.append(&mut inner.starts);
        self.out.waits.append(&mut inner.waits);
        self.out.live.append(&mut inner.live);
        self.out.nodes.append(&mut inner.nodes);
        res
    }
}

fn add(sum: Spend, more: Spend) -> Spend {
    Spend {
        cost_usd: sum.cost_usd + more.cost_usd,
        tokens: sum.tokens.saturating_add(more.tokens),
    }
}
/// Why `used` is past `budget`, if it is: for a node still running, the
/// limit reached; for one that ended, the limit passed.
fn over(budget: &Budget, used: Spend, ended: bool, pointer: &str) -> Option<String> {
    if let Some(max) = budget.max_cost_usd {
        let past = if ended {
            used.cost_usd > max
        } else {
            used.cost_usd >= max
        };
        if past {
            return Some(format!(
                "budget_exceeded: ${:.4} used, {pointer}.max_cost_usd is {max}",
                used.cost_usd
            ));
        }
    }
    if let Some(max) = budget.max_tokens {
        let past = if ended {
            used.tokens > max
        } else {
            used.tokens >= max
        };
        if past {
            return Some(format!(
                "budget_exceeded: {} tokens used, {pointer}.max_tokens is {max}",
                used.tokens
            ));
        }
    }
    None
}
