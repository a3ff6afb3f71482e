//! Budgets (docs/tasks.md, Budgets): the rule that says whether a task's
//! usage is past `policy.max_tokens` or `policy.max_cost_usd`
//! (`Policy::over_budget` of `swarmd-types`), applied to open attempts:
//! the usage notes among an attempt's outputs are folded into its usage
//! under the task's lock, as they are numbered, counted in the usage
//! meter, and checked against the task's budgets. A task past a budget has
//! its attempt's worker stopped as a cancel stops it; the attempt then
//! fails `budget_exceeded` and is not retried. The meter keeps totals by
//! agent and model for `/metrics` and `/v1/status`, with at most
//! [`MAX_METERED_MODELS`] model names.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use swarmd_output_store::{OutputEvent, OutputRecord};

use crate::live::TaskState;
use crate::outcome::Stopped;
use crate::store::WriteOp;
pub use crate::task::{BudgetLimit, OverBudget};
use crate::usage::{USAGE_STAGE, UsageTotals};

/// Distinct model names the meter keeps; usage of any further model is
/// counted under [`OTHER_MODEL`].
pub const MAX_METERED_MODELS: usize = 32;
/// The model label usage of models past the cap is counted under.
pub const OTHER_MODEL: &str = "other";

/// Usage reported since the daemon started, by agent and model, and the
/// attempts stopped over budget, by agent.
#[derive(Debug, Default)]
pub struct UsageMeter {
    inner: Mutex<MeterInner>,
    /// Attempts stopped, or tasks not started again, over a token budget.
    pub budget_stops_tokens: AtomicU64,
    /// The same over a cost budget.
    pub budget_stops_cost: AtomicU64,
}

#[derive(Debug, Default)]
struct MeterInner {
    by_agent_model: BTreeMap<(String, String), UsageTotals>,
    models: usize,
}

impl UsageMeter {
    /// Counts `delta` under `agent` and `model`; past the cap on model
    /// names, a new model counts as [`OTHER_MODEL`].
    pub(crate) fn add(&self, agent: &str, model: &str, delta: &UsageTotals) {
        if delta.is_zero() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let known = inner
            .by_agent_model
            .keys()
            .any(|(_, m)| m.as_str() == model);
        let model = if known || inner.models < MAX_METERED_MODELS {
            if !known {
                inner.models += 1;
            }
            model
        } else {
            OTHER_MODEL
        };
        inner
            .by_agent_model
            .entry((agent.to_owned(), model.to_owned()))
            .or_default()
            .add(delta);
    }

    pub(crate) fn budget_stop(&self, limit: BudgetLimit) {
        match limit {
            BudgetLimit::Tokens => &self.budget_stops_tokens,
            BudgetLimit::Cost => &self.budget_stops_cost,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Totals by (agent, model), in name order.
    pub fn by_agent_model(&self) -> Vec<((String, String), UsageTotals)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .by_agent_model
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Totals by agent, in name order.
    pub fn by_agent(&self) -> BTreeMap<String, UsageTotals> {
        let mut out: BTreeMap<String, UsageTotals> = BTreeMap::new();
        for ((agent, _), totals) in self.by_agent_model() {
            out.entry(agent).or_default().add(&totals);
        }
        out
    }
}

/// Folds the usage notes among `records`, just numbered for the open
/// attempt of `state`, into the attempt's usage; meters what they add
/// and stops the attempt when the task passes a budget. Returns the
/// attempt's record to write when its usage changed. Costs one stage
/// compare per record without a usage note.
pub(crate) fn fold_usage(
    meter: &UsageMeter,
    state: &mut TaskState,
    records: &[OutputRecord],
) -> Option<WriteOp> {
    let mut notes = records.iter().filter_map(|r| match &r.event {
        OutputEvent::Progress {
            stage,
            note: Some(note),
        } if stage == USAGE_STAGE => Some(note.as_str()),
        _ => None,
    });
    let first = notes.next()?;
    let run = state.run.as_mut()?;
    let before = run.usage.clone();
    let mut changed = false;
    for note in std::iter::once(first).chain(notes) {
        changed |= run.usage.fold_note(note);
    }
    if !changed || run.usage == before {
        return None;
    }
    let delta = run.usage.totals.since(&before.totals);
    let task = &state.task;
    meter.add(&task.agent, run.usage.main_model(), &delta);
    if run.over_budget.is_none() {
        let mut spent = task.usage;
        spent.add(&run.usage.totals);
        if let Some(over) = task.policy.over_budget(&spent) {
            tracing::info!(reason = %over.reason, "stopping the attempt: the task is over budget");
            meter.budget_stop(over.limit);
            run.over_budget = Some(over);
            run.stopped = Some(Stopped::OverBudget);
            run.cancel.cancel();
        }
    }
    Some(WriteOp::PutAttempt(run.open_record(task.id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Policy;

    fn tokens(n: u64) -> UsageTotals {
        UsageTotals {
            input_tokens: n,
            ..UsageTotals::default()
        }
    }

    #[test]
    fn budgets_count_input_and_output_tokens_and_the_cost() {
        let policy = Policy {
            max_tokens: Some(100),
            max_cost_usd: Some(0.5),
            ..Policy::default()
        };
        let spent = |input, output, cache, cost| UsageTotals {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache,
            cache_write_tokens: cache,
            cost_usd: cost,
        };
        assert_eq!(policy.over_budget(&spent(60, 40, 10_000, 0.5)), None);
        let over = policy.over_budget(&spent(60, 41, 0, 0.0)).unwrap();
        assert_eq!(over.limit, BudgetLimit::Tokens);
        assert_eq!(
            over.reason,
            "budget_exceeded: 101 tokens used, policy.max_tokens is 100"
        );
        let over = policy.over_budget(&spent(1, 1, 0, 0.75)).unwrap();
        assert_eq!(over.limit, BudgetLimit::Cost);
        assert!(over.reason.starts_with("budget_exceeded: $0.7500 spent"));
        // Exactly the budget stops nothing running, but starts nothing new.
        assert_eq!(
            policy.budget_spent(&spent(60, 40, 0, 0.0)).unwrap().limit,
            BudgetLimit::Tokens
        );
        assert_eq!(policy.budget_spent(&spent(60, 39, 0, 0.49)), None);
        assert_eq!(
            Policy::default().over_budget(&spent(u64::MAX, 1, 0, 1e9)),
            None
        );
    }

    #[test]
    fn the_meter_caps_model_names_and_sums_by_agent() {
        let meter = UsageMeter::default();
        for i in 0..MAX_METERED_MODELS + 5 {
            meter.add("a", &format!("m{i}"), &tokens(1));
        }
        meter.add("b", "m0", &tokens(10));
        meter.add("b", "m0", &UsageTotals::default());
        let rows = meter.by_agent_model();
        let models: std::collections::BTreeSet<_> = rows.iter().map(|((_, m), _)| m).collect();
        assert_eq!(models.len(), MAX_METERED_MODELS + 1, "the cap plus `other`");
        let other = rows
            .iter()
            .find(|((a, m), _)| a == "a" && m == OTHER_MODEL)
            .unwrap();
        assert_eq!(other.1.input_tokens, 5);
        let by_agent = meter.by_agent();
        assert_eq!(by_agent["a"].input_tokens, MAX_METERED_MODELS as u64 + 5);
        assert_eq!(by_agent["b"].input_tokens, 10);
        meter.budget_stop(BudgetLimit::Cost);
        assert_eq!(meter.budget_stops_cost.load(Ordering::Relaxed), 1);
    }
}
