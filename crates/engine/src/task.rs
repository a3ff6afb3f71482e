//! The task and attempt model (docs/tasks.md, Tasks and Status): records, policy, and the
//! status enums whose transition methods refuse illegal moves.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{SessionId, TaskId};
use crate::usage::{AttemptUsage, UsageTotals};

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

/// Outcomes a policy may retry on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    Failed,
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

/// What a caller asks for when it creates a task.
#[derive(Debug, Clone, Default)]
pub struct TaskSpec {
    pub agent: String,
    pub prompt: String,
    pub system: Option<String>,
    pub input: Option<Value>,
    pub metadata: Option<serde_json::Map<String, Value>>,
    pub layers: Vec<String>,
    pub policy: PolicyOverrides,
    pub parent: Option<TaskId>,
    pub session: Option<SessionId>,
    /// The session an operator agent's attempts must go to, instead of its
    /// role holder or the least loaded MainAI.
    pub operator_sid: Option<SessionId>,
    /// A retry with the same key returns the task the first call created.
    pub idempotency_key: Option<String>,
    /// The finished task this one continues (docs/tasks.md, Continuations);
    /// `agent` may then be empty, meaning that task's.
    pub continue_from: Option<TaskId>,
    /// A local branch a worktree agent's attempts start from instead of
    /// the agent's `base` (a flow step's `start_from`: a merge conflict's
    /// work branch, say); not with `continue_from`.
    pub start_from: Option<String>,
}

/// A task as stored and served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub agent: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub layers: Vec<String>,
    pub policy: Policy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    pub depth: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// The session its operator attempts are pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_sid: Option<SessionId>,
    /// The finished task this one continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<TaskId>,
    /// What its attempts resume from `continued_from`, read at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<crate::resume::Resume>,
    /// The local branch a worktree agent's attempts start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<String>,
    /// The attempt a restart interrupted last, which the attempt after it
    /// resumed (docs/tasks.md, Restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::resume::Restart>,
    /// How many of its attempts a restart interrupted and the next one
    /// resumed; they do not count against `policy.max_attempts`.
    #[serde(default, skip_serializing_if = "crate::resume::no_restarts")]
    pub restarts: u32,
    status: TaskStatus,
    /// The current attempt; 0 before the first.
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the task's closed attempts used, added up (`usage`).
    #[serde(default, skip_serializing_if = "UsageTotals::is_zero")]
    pub usage: UsageTotals,
    pub created_ms: u64,
    pub updated_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
}

/// A refused status change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition {from} -> {to}")]
pub struct IllegalTransition {
    pub from: TaskStatus,
    pub to: TaskStatus,
}

impl Task {
    /// A new task in `queued`.
    pub fn new(id: TaskId, spec: TaskSpec, policy: Policy, depth: u32, now_ms: u64) -> Task {
        Task {
            id,
            agent: spec.agent,
            prompt: spec.prompt,
            system: spec.system,
            input: spec.input,
            metadata: spec.metadata,
            layers: spec.layers,
            policy,
            parent: spec.parent,
            depth,
            session: spec.session,
            operator_sid: spec.operator_sid,
            continued_from: spec.continue_from,
            start_from: spec.start_from.clone(),
            resume: None,
            restart: None,
            restarts: 0,
            status: TaskStatus::Queued,
            attempt: 0,
            result: None,
            reason: None,
            usage: UsageTotals::default(),
            created_ms: now_ms,
            updated_ms: now_ms,
            finished_ms: None,
        }
    }

    pub fn status(&self) -> TaskStatus {
        self.status
    }

    /// From creation to finish in milliseconds; 0 while not finished.
    pub fn duration_ms(&self) -> u64 {
        self.finished_ms
            .map_or(0, |end| end.saturating_sub(self.created_ms))
    }

    fn move_to(&mut self, next: TaskStatus, now_ms: u64) -> Result<(), IllegalTransition> {
        if !self.status.can_move_to(next) {
            return Err(IllegalTransition {
                from: self.status,
                to: next,
            });
        }
        self.status = next;
        self.updated_ms = now_ms;
        if next.is_terminal() {
            self.finished_ms = Some(now_ms);
        }
        Ok(())
    }

    /// Opens the next attempt: `attempt += 1`, status `running`.
    pub fn start_attempt(&mut self, now_ms: u64) -> Result<u32, IllegalTransition> {
        self.move_to(TaskStatus::Running, now_ms)?;
        self.attempt += 1;
        Ok(self.attempt)
    }

    /// Puts a running task back in the queue (a retry waiting for a slot).
    pub fn requeue(&mut self, now_ms: u64) -> Result<(), IllegalTransition> {
        if self.status != TaskStatus::Running {
            return Err(IllegalTransition {
                from: self.status,
                to: TaskStatus::Queued,
            });
        }
        self.move_to(TaskStatus::Queued, now_ms)
    }

    /// Makes the task terminal with `outcome`'s status.
    pub fn finish(
        &mut self,
        outcome: AttemptOutcome,
        result: Option<TaskResult>,
        reason: Option<String>,
        now_ms: u64,
    ) -> Result<(), IllegalTransition> {
        self.move_to(outcome.terminal_status(), now_ms)?;
        self.result = result;
        self.reason = reason;
        Ok(())
    }
}

/// One attempt as recorded: timings, lease, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub task_id: TaskId,
    pub attempt: u32,
    pub started_ms: u64,
    pub lease_deadline_ms: u64,
    /// Which spawner kind ran it; recovery treats operator attempts differently.
    pub spawner: SpawnerKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// The host process group the attempt's worker runs in, recorded once it
    /// started, so that recovery can stop what is left of it after a crash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group: Option<ProcessGroupMark>,
    /// What the attempt's worker reported it used (`usage`).
    #[serde(default, skip_serializing_if = "AttemptUsage::is_empty")]
    pub usage: AttemptUsage,
}

/// A process group as recorded with its attempt: its id, its leader's start
/// time in clock ticks after boot, and the boot's id, which together tell
/// the same group from a later one under a reused pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGroupMark {
    pub pgid: i32,
    pub leader_start_ticks: u64,
    pub boot_id: String,
}

/// The kind of base spawner an agent resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpawnerKind {
    Process,
    Lua,
    Operator,
    /// In-process spawners (tests, benchmarks): treated like process on recovery.
    InProcess,
}

impl SpawnerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnerKind::Process => "process",
            SpawnerKind::Lua => "lua",
            SpawnerKind::Operator => "operator",
            SpawnerKind::InProcess => "in_process",
        }
    }

    /// Whether an attempt of this kind outlives the daemon's process.
    pub fn survives_restart(self) -> bool {
        matches!(self, SpawnerKind::Operator)
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

    fn task() -> Task {
        let spec = TaskSpec {
            agent: "a".into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        };
        Task::new(TaskId::new(), spec, Policy::default(), 0, 1)
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
    fn attempt_lifecycle_and_terminal_is_final() {
        let mut t = task();
        assert_eq!(t.status(), TaskStatus::Queued);
        assert_eq!(t.start_attempt(2).unwrap(), 1);
        assert_eq!(t.status(), TaskStatus::Running);
        assert_eq!(t.start_attempt(3).unwrap(), 2);
        t.finish(AttemptOutcome::Pass, None, None, 4).unwrap();
        assert_eq!(t.status(), TaskStatus::Pass);
        assert_eq!(t.finished_ms, Some(4));
        for outcome in [
            AttemptOutcome::Pass,
            AttemptOutcome::Blocked,
            AttemptOutcome::Failed,
            AttemptOutcome::Cancelled,
        ] {
            assert!(t.finish(outcome, None, None, 5).is_err());
        }
        assert!(t.start_attempt(5).is_err());
        assert!(t.requeue(5).is_err());
        assert_eq!(t.attempt, 2);
    }

    #[test]
    fn queued_task_cannot_pass_without_running() {
        let mut t = task();
        assert!(t.finish(AttemptOutcome::Pass, None, None, 2).is_err());
        assert!(t.finish(AttemptOutcome::Blocked, None, None, 2).is_err());
        assert!(t.requeue(2).is_err());
        t.finish(AttemptOutcome::Cancelled, None, None, 2).unwrap();
        assert_eq!(t.status(), TaskStatus::Cancelled);
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
