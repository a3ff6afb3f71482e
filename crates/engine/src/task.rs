//! The task and attempt model (docs/tasks.md, Tasks and Status): the
//! task's record, its attempts and its transitions. The statuses, the
//! policy and the result are `swarmd-types`' (`task`), re-exported here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use swarmd_types::task::*;

use crate::ids::{SessionId, TaskId};
use crate::usage::{AttemptUsage, UsageTotals};

mod parts;

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

    fn task() -> Task {
        let spec = TaskSpec {
            agent: "a".into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        };
        Task::new(TaskId::new(), spec, Policy::default(), 0, 1)
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
}
