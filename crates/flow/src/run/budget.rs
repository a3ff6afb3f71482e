//! Budgets over a run or a fan-out: what the steps under one reported they
//! spent (each try's task usage, recorded with its outcome), added up.
//!
//! The rule mirrors a task's budget (docs/tasks.md, Budgets): a node still
//! running fails once its steps used the whole budget (the limit or more),
//! and nothing more starts under it; a node that ended fails when its steps
//! used more than the limit. Only outcomes recorded up to the node's own
//! deciding outcome count for a node that ended, so a cancelled loser's
//! late outcome never turns a decided fan-out into a failed one. Each step
//! started under a budget gets what is left of it as its task's own budget,
//! so one runaway step stops at the limit too.

use std::collections::BTreeSet;

use super::eval::{Eval, Place, Res};
use super::journal::Spend;
use crate::ir::Budget;

/// The outcomes read under one budget so far: (journal seq, spend).
pub(super) type Spent = Vec<(u64, Spend)>;

impl Eval<'_> {
    /// Counts one recorded outcome's spend against every budget around it.
    pub(super) fn spent(&mut self, seq: u64, spend: Spend) {
        if spend.is_zero() {
            return;
        }
        for scope in &mut self.budgets {
            scope.push((seq, spend));
        }
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
        let starts: BTreeSet<String> = self.out.starts.iter().map(|s| s.key.clone()).collect();
        let waits: BTreeSet<String> = self.out.waits.iter().map(|w| w.key.clone()).collect();
        let live = self.out.live.clone();
        self.budgets.push(Vec::new());
        let res = run(self);
        let counted = self.budgets.pop().unwrap_or_default();
        let (cutoff, ended) = match &res {
            Res::Done { seq, .. } => (*seq, true),
            Res::Blocked { .. } => (u64::MAX, false),
            Res::Failed { .. } => return res,
        };
        let used = counted.iter().filter(|(seq, _)| *seq <= cutoff).fold(
            Spend::default(),
            |sum, (_, s)| Spend {
                cost_usd: sum.cost_usd + s.cost_usd,
                tokens: sum.tokens.saturating_add(s.tokens),
            },
        );
        let last = counted.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
        if let Some(reason) = over(budget, used, ended, &format!("{}{field}", at.pointer)) {
            // Nothing under the budget starts or stays live: the runner
            // cancels what runs there.
            let dropped_waits = self
                .out
                .waits
                .iter()
                .filter(|w| !waits.contains(&w.key))
                .count();
            self.planned = self.planned.saturating_sub(
                self.out
                    .starts
                    .iter()
                    .filter(|s| !starts.contains(&s.key))
                    .count()
                    + dropped_waits,
            );
            self.out.starts.retain(|s| starts.contains(&s.key));
            self.out.waits.retain(|w| waits.contains(&w.key));
            self.out.live.retain(|k| live.contains(k));
            return Res::Failed {
                reason,
                seq: last.min(cutoff),
            };
        }
        for start in self.out.starts.iter_mut() {
            if starts.contains(&start.key) {
                continue;
            }
            if let Some(max) = budget.max_cost_usd {
                let left = max - used.cost_usd;
                start.max_cost_usd = Some(start.max_cost_usd.map_or(left, |c| c.min(left)));
            }
            if let Some(max) = budget.max_tokens {
                let left = max.saturating_sub(used.tokens);
                start.max_tokens = Some(start.max_tokens.map_or(left, |t| t.min(left)));
            }
        }
        res
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
