//! A task's vocabulary (docs/tasks.md, Tasks and Status): the status
//! enums whose transition methods refuse illegal moves, the retry policy a
//! request may override, and the result a task ends with.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::usage::UsageTotals;

/// Where a task stands. Terminal states never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Pass,
    Blocked,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Pass,
        TaskStatus::Blocked,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Pass | TaskStatus::Blocked | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Pass => "pass",
            TaskStatus::Blocked => "blocked",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// The one table of legal moves: queued → running; running → queued (a
    /// retry waiting for a slot) or any terminal; queued → failed (queue
    /// timeout) or cancelled. Terminal states have no way out.
    pub fn can_move_to(self, next: TaskStatus) -> bool {
        use TaskStatus::*;
        matches!(
            (self, next),
            (Queued, Running | Failed | Cancelled)
                | (
                    Running,
                    Queued | Running | Pass | Blocked | Failed | Cancelled
                )
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ParseEnumError {
                got: s.to_owned(),
                expected: "queued, running, pass, blocked, failed, cancelled",
            })
    }
}

/// A string that named no variant of an enum.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`{got}` is not one of: {expected}")]
pub struct ParseEnumError {
    pub got: String,
    pub expected: &'static str,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Pass,
    Blocked,
    Failed,
    Cancelled,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Pass => "pass",
            AttemptOutcome::Blocked => "blocked",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Cancelled => "cancelled",
        }
    }

    /// The task status this outcome makes when no retry follows.
    pub fn terminal_status(self) -> TaskStatus {
        match self {
            AttemptOutcome::Pass => TaskStatus::Pass,
            AttemptOutcome::Blocked => TaskStatus::Blocked,
            AttemptOutcome::Failed => TaskStatus::Failed,
            AttemptOutcome::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// Outcomes a policy may retry on (a task's `policy.retry_on`, the
/// configuration's `[defaults] retry_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// No verdict: spawn error, worker died, lease or queue timeout.
    Failed,
    /// The worker finished and said it could not do it.
    Blocked,
}

impl RetryOn {
    pub fn matches(self, outcome: AttemptOutcome) -> bool {
        matches!(
            (self, outcome),
            (RetryOn::Failed, AttemptOutcome::Failed) | (RetryOn::Blocked, AttemptOutcome::Blocked)
        )
    }
}

/// The effective retry and timing policy of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub max_attempts: u32,
    pub retry_on: Vec<RetryOn>,
    pub retry_backoff_ms: u64,
    pub attempt_timeout_secs: u64,
    pub queue_timeout_secs: Option<u64>,
    pub long_hold_warn_secs: u64,
    /// The task's token budget across attempts (`usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The task's cost budget in US dollars across attempts (`usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 1,
            retry_on: vec![RetryOn::Failed],
            retry_backoff_ms: 1000,
            attempt_timeout_secs: 1800,
            queue_timeout_secs: None,
            long_hold_warn_secs: 600,
            max_tokens: None,
            max_cost_usd: None,
        }
    }
}

/// Backoff never waits longer than this, whatever the attempt number.
pub const MAX_BACKOFF_MS: u64 = 60_000;

/// Upper bound of a policy's attempts, for tasks and configured defaults.
pub const MAX_ATTEMPTS: u32 = 100;

/// Upper bound of a policy's durations in seconds (attempt timeout, queue
/// timeout, long-hold warning): seven days.
pub const MAX_POLICY_SECS: u64 = 7 * 86_400;

/// Upper bound of a cost budget in US dollars.
pub const MAX_COST_USD: f64 = 1_000_000.0;

/// The lower of two optional limits; either alone when the other is unset.
fn lower<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Policy {
    /// Fills the fields a request left out from `defaults`.
    pub fn resolve(overrides: &PolicyOverrides, defaults: &Policy) -> Policy {
        Policy {
            max_attempts: overrides
                .max_attempts
                .unwrap_or(defaults.max_attempts)
                .max(1),
            retry_on: overrides
                .retry_on
                .clone()
                .unwrap_or_else(|| defaults.retry_on.clone()),
            retry_backoff_ms: overrides
                .retry_backoff_ms
                .unwrap_or(defaults.retry_backoff_ms),
            attempt_timeout_secs: overrides
                .attempt_timeout_secs
                .unwrap_or(defaults.attempt_timeout_secs)
                .max(1),
            queue_timeout_secs: overrides.queue_timeout_secs.or(defaults.queue_timeout_secs),
            long_hold_warn_secs: overrides
                .long_hold_warn_secs
                .unwrap_or(defaults.long_hold_warn_secs),
            // A task's budget may lower its agent's, never raise it.
            max_tokens: lower(overrides.max_tokens, defaults.max_tokens),
            max_cost_usd: lower(overrides.max_cost_usd, defaults.max_cost_usd),
        }
    }

    pub fn retries(&self, outcome: AttemptOutcome) -> bool {
        self.retry_on.iter().any(|r| r.matches(outcome))
    }

    /// Backoff before attempt `next_attempt` (2, 3, …): the base doubled per
    /// earlier retry, capped at [`MAX_BACKOFF_MS`], with up to 25 % jitter
    /// taken from `jitter` (0.0..1.0) so that retries of many tasks spread out.
    pub fn backoff_ms(&self, next_attempt: u32, jitter: f64) -> u64 {
        let doublings = next_attempt.saturating_sub(2).min(20);
        let base = self
            .retry_backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(MAX_BACKOFF_MS);
        let spread = (base as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u64;
        base.saturating_sub(spread)
    }
}

/// Policy fields a task may set; unset ones come from the configured defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<Vec<RetryOn>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_hold_warn_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl PolicyOverrides {
    /// Checks every field a request set against the bounds the configured
    /// defaults obey too; the message names the field and its range.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, value: Option<u64>, min: u64, max: u64| match value {
            Some(v) if !(min..=max).contains(&v) => {
                Err(format!("policy.{name} must be {min} to {max}, not {v}"))
            }
            _ => Ok(()),
        };
        check(
            "max_attempts",
            self.max_attempts.map(u64::from),
            1,
            u64::from(MAX_ATTEMPTS),
        )?;
        check("retry_backoff_ms", self.retry_backoff_ms, 0, MAX_BACKOFF_MS)?;
        check(
            "attempt_timeout_secs",
            self.attempt_timeout_secs,
            1,
            MAX_POLICY_SECS,
        )?;
        check(
            "queue_timeout_secs",
            self.queue_timeout_secs,
            1,
            MAX_POLICY_SECS,
        )?;
        check(
            "long_hold_warn_secs",
            self.long_hold_warn_secs,
            0,
            MAX_POLICY_SECS,
        )?;
        check("max_tokens", self.max_tokens, 1, u64::MAX)?;
        if let Some(cost) = self.max_cost_usd
            && !(cost > 0.0 && cost <= MAX_COST_USD)
        {
            return Err(format!(
                "policy.max_cost_usd must be more than 0 and at most {MAX_COST_USD}, not {cost}"
            ));
        }
        if self.retry_on.as_ref().is_some_and(|on| on.len() > 2) {
            return Err("policy.retry_on lists at most failed and blocked".to_owned());
        }
        Ok(())
    }
}

/// The `{value, ok}` of the deciding Final.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub value: Value,
    pub ok: bool,
}

/// Which budget a task passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetLimit {
    Tokens,
    Cost,
}

impl BudgetLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetLimit::Tokens => "tokens",
            BudgetLimit::Cost => "cost",
        }
    }
}

/// A task's usage past one of its budgets, with the reason its attempt
/// fails with (`budget_exceeded: …`).
#[derive(Debug, Clone, PartialEq)]
pub struct OverBudget {
    pub limit: BudgetLimit,
    pub reason: String,
}

impl Policy {
    /// Whether `spent` (the task's closed attempts plus the open one) is
    /// past a budget: more than `max_tokens` tokens, or more than
    /// `max_cost_usd` dollars. Tokens are checked first.
    pub fn over_budget(&self, spent: &UsageTotals) -> Option<OverBudget> {
        if let Some(max) = self.max_tokens
            && spent.tokens() > max
        {
            return Some(OverBudget {
                limit: BudgetLimit::Tokens,
                reason: format!(
                    "budget_exceeded: {} tokens used, policy.max_tokens is {max}",
                    spent.tokens()
                ),
            });
        }
        if let Some(max) = self.max_cost_usd
            && spent.cost_usd > max
        {
            return Some(OverBudget {
                limit: BudgetLimit::Cost,
                reason: format!(
                    "budget_exceeded: ${:.4} spent, policy.max_cost_usd is {max}",
                    spent.cost_usd
                ),
            });
        }
        None
    }

    /// Whether `spent` leaves nothing of a budget, so no attempt starts.
    pub fn budget_spent(&self, spent: &UsageTotals) -> Option<OverBudget> {
        if let Some(max) = self.max_tokens
            && spent.tokens() >= max
        {
            return Some(OverBudget {
                limit: BudgetLimit::Tokens,
                reason: format!(
                    "budget_exceeded: {} tokens used before this attempt, policy.max_tokens is {max}",
                    spent.tokens()
                ),
            });
        }
        if let Some(max) = self.max_cost_usd
            && spent.cost_usd >= max
        {
            return Some(OverBudget {
                limit: BudgetLimit::Cost,
                reason: format!(
                    "budget_exceeded: ${:.4} spent before this attempt, policy.max_cost_usd is {max}",
                    spent.cost_usd
                ),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_overrides_are_bounded() {
        assert!(PolicyOverrides::default().validate().is_ok());
        let at_the_bounds = PolicyOverrides {
            max_attempts: Some(MAX_ATTEMPTS),
            retry_on: Some(vec![RetryOn::Failed, RetryOn::Blocked]),
            retry_backoff_ms: Some(0),
            attempt_timeout_secs: Some(MAX_POLICY_SECS),
            queue_timeout_secs: Some(1),
            long_hold_warn_secs: Some(0),
            max_tokens: Some(u64::MAX),
            max_cost_usd: Some(MAX_COST_USD),
        };
        assert!(at_the_bounds.validate().is_ok());
        let too_long = PolicyOverrides {
            attempt_timeout_secs: Some(u64::MAX),
            ..PolicyOverrides::default()
        };
        let message = too_long.validate().unwrap_err();
        assert!(message.contains("policy.attempt_timeout_secs"), "{message}");
        for bad in [
            PolicyOverrides {
                max_attempts: Some(0),
                ..PolicyOverrides::default()
            },
            PolicyOverrides {
                retry_backoff_ms: Some(MAX_BACKOFF_MS + 1),
                ..PolicyOverrides::default()
            },
            PolicyOverrides {
                queue_timeout_secs: Some(MAX_POLICY_SECS + 1),
                ..PolicyOverrides::default()
            },
            PolicyOverrides {
                long_hold_warn_secs: Some(u64::MAX),
                ..PolicyOverrides::default()
            },
            PolicyOverrides {
                retry_on: Some(vec![RetryOn::Failed; 3]),
                ..PolicyOverrides::default()
            },
            PolicyOverrides {
                max_tokens: Some(0),
                ..PolicyOverrides::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        for cost in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_COST_USD * 2.0] {
            let bad = PolicyOverrides {
                max_cost_usd: Some(cost),
                ..PolicyOverrides::default()
            };
            let message = bad.validate().unwrap_err();
            assert!(message.starts_with("policy.max_cost_usd"), "{message}");
        }
    }

    #[test]
    fn transition_table_is_exact() {
        use TaskStatus::*;
        let legal = [
            (Queued, Running),
            (Queued, Failed),
            (Queued, Cancelled),
            (Running, Queued),
            (Running, Running),
            (Running, Pass),
            (Running, Blocked),
            (Running, Failed),
            (Running, Cancelled),
        ];
        for from in TaskStatus::ALL {
            for to in TaskStatus::ALL {
                assert_eq!(
                    from.can_move_to(to),
                    legal.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn backoff_doubles_caps_and_jitters_down() {
        let p = Policy {
            retry_backoff_ms: 1000,
            ..Policy::default()
        };
        assert_eq!(p.backoff_ms(2, 0.0), 1000);
        assert_eq!(p.backoff_ms(3, 0.0), 2000);
        assert_eq!(p.backoff_ms(4, 0.0), 4000);
        assert_eq!(p.backoff_ms(40, 0.0), MAX_BACKOFF_MS);
        assert_eq!(p.backoff_ms(2, 1.0), 750);
    }

    #[test]
    fn a_tasks_budget_lowers_its_agents_and_never_raises_it() {
        let defaults = Policy {
            max_tokens: Some(1_000),
            max_cost_usd: Some(1.0),
            ..Policy::default()
        };
        let higher = PolicyOverrides {
            max_tokens: Some(5_000),
            max_cost_usd: Some(5.0),
            ..PolicyOverrides::default()
        };
        let resolved = Policy::resolve(&higher, &defaults);
        assert_eq!(resolved.max_tokens, Some(1_000));
        assert_eq!(resolved.max_cost_usd, Some(1.0));
        let lower = PolicyOverrides {
            max_tokens: Some(10),
            max_cost_usd: Some(0.25),
            ..PolicyOverrides::default()
        };
        let resolved = Policy::resolve(&lower, &defaults);
        assert_eq!(resolved.max_tokens, Some(10));
        assert_eq!(resolved.max_cost_usd, Some(0.25));
        let unset = Policy::resolve(&lower, &Policy::default());
        assert_eq!(unset.max_cost_usd, Some(0.25));
        let none = Policy::resolve(&PolicyOverrides::default(), &defaults);
        assert_eq!(none.max_tokens, Some(1_000));
    }

    #[test]
    fn policy_resolution_and_retry_rules() {
        let defaults = Policy::default();
        let over = PolicyOverrides {
            max_attempts: Some(3),
            retry_on: Some(vec![RetryOn::Failed, RetryOn::Blocked]),
            ..PolicyOverrides::default()
        };
        let p = Policy::resolve(&over, &defaults);
        assert_eq!(p.max_attempts, 3);
        assert!(p.retries(AttemptOutcome::Blocked));
        assert!(!p.retries(AttemptOutcome::Pass));
        assert!(!p.retries(AttemptOutcome::Cancelled));
        assert!(!defaults.retries(AttemptOutcome::Blocked));
        let err = serde_json::from_str::<PolicyOverrides>(r#"{"max_attempt": 2}"#);
        assert!(err.is_err(), "unknown policy fields are refused");
    }

    #[test]
    fn status_parses_and_lists_choices() {
        assert_eq!(
            "blocked".parse::<TaskStatus>().unwrap(),
            TaskStatus::Blocked
        );
        let err = "done".parse::<TaskStatus>().unwrap_err();
        assert!(err.to_string().contains("queued"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any policy body either fails to decode, is refused with a message
        /// naming its field, or validates to a policy inside every bound.
        #[test]
        fn any_policy_body_is_refused_or_bounded(
            max_attempts in proptest::option::of(proptest::prelude::any::<u32>()),
            backoff in proptest::option::of(proptest::prelude::any::<u64>()),
            attempt in proptest::option::of(proptest::prelude::any::<u64>()),
            queue in proptest::option::of(proptest::prelude::any::<u64>()),
            warn in proptest::option::of(proptest::prelude::any::<u64>()),
            noise in "\\PC{0,40}",
        ) {
            let overrides = PolicyOverrides {
                max_attempts,
                retry_on: None,
                retry_backoff_ms: backoff,
                attempt_timeout_secs: attempt,
                queue_timeout_secs: queue,
                long_hold_warn_secs: warn,
                max_tokens: None,
                max_cost_usd: None,
            };
            match overrides.validate() {
                Ok(()) => {
                    let policy = Policy::resolve(&overrides, &Policy::default());
                    proptest::prop_assert!((1..=MAX_ATTEMPTS).contains(&policy.max_attempts));
                    proptest::prop_assert!(policy.retry_backoff_ms <= MAX_BACKOFF_MS);
                    proptest::prop_assert!(policy.attempt_timeout_secs <= MAX_POLICY_SECS);
                    proptest::prop_assert!(policy.long_hold_warn_secs <= MAX_POLICY_SECS);
                }
                Err(message) => proptest::prop_assert!(message.starts_with("policy.")),
            }
            let body = serde_json::json!({"max_attempts": noise});
            proptest::prop_assert!(serde_json::from_value::<PolicyOverrides>(body).is_err());
        }
    }
}
