//! A run's journal: everything that happened to it from outside (a step's
//! task started and ended, a wait opened and was answered or timed out),
//! keyed by node instance. The journal is the run's whole durable state;
//! everything else (the context, which node runs, what the run's result
//! is) is computed from it and the pinned flow by `evaluate`, so a run
//! resumes after a crash by reading it back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The durable state of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// The seq the next recorded outcome gets; outcomes are ordered by it
    /// (a race's winner is the branch whose deciding outcome came first).
    #[serde(default)]
    pub next_seq: u64,
    /// Step tries by key.
    #[serde(default)]
    pub steps: BTreeMap<String, StepEntry>,
    /// Waits by key.
    #[serde(default)]
    pub waits: BTreeMap<String, WaitEntry>,
}

/// One try of one step: the task that runs it and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEntry {
    /// The task running this try.
    pub task: String,
    pub started_ms: u64,
    /// Whether the step wants its task's git changes with its outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wants_changes: bool,
    /// Whether the step wants its task's agent session with its outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wants_session: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// What a step's task reported it spent, across its attempts; counted
/// against the budgets around the step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub tokens: u64,
}

impl Spend {
    pub fn is_zero(&self) -> bool {
        *self == Spend::default()
    }
}

/// What is recorded with a step's outcome besides its result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepFacts {
    /// Its task's git changes (a pass of a step that asked for them).
    pub changes: Option<Value>,
    /// Its task's agent session (a pass of a step that asked for it).
    pub session: Option<Value>,
    /// What its task spent.
    pub spend: Spend,
}

/// How a step try or a wait ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The task passed with `value` (and, when the step asked, its git
    /// `changes`), or the wait was answered with it.
    Passed {
        value: Value,
        seq: u64,
        at_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changes: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<Value>,
        #[serde(default, skip_serializing_if = "Spend::is_zero")]
        spend: Spend,
    },
    /// The task failed (or was cancelled, or timed out), or the wait timed
    /// out, for `reason`.
    Failed {
        reason: String,
        seq: u64,
        at_ms: u64,
        #[serde(default, skip_serializing_if = "Spend::is_zero")]
        spend: Spend,
    },
}

impl Outcome {
    /// The order in which outcomes were recorded.
    pub fn seq(&self) -> u64 {
        match self {
            Outcome::Passed { seq, .. } | Outcome::Failed { seq, .. } => *seq,
        }
    }

    /// When it was recorded.
    pub fn at_ms(&self) -> u64 {
        match self {
            Outcome::Passed { at_ms, .. } | Outcome::Failed { at_ms, .. } => *at_ms,
        }
    }

    /// What the step's task spent (nothing for a wait).
    pub fn spend(&self) -> Spend {
        match self {
            Outcome::Passed { spend, .. } | Outcome::Failed { spend, .. } => *spend,
        }
    }
}

/// One wait: when it opened, its deadline, the digest of the token that
/// may answer it, and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitEntry {
    /// The wait's name in the flow.
    pub name: String,
    pub opened_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Hex SHA-256 of the wait's answer token.
    pub token_digest: String,
    /// What the person is asked, rendered when the wait opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Value>,
    /// JSON Schema the answer must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// Why a journal refused a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("no step try `{0}` was started")]
    UnknownStep(String),
    #[error("no wait `{0}` is open")]
    UnknownWait(String),
    #[error("`{0}` has already ended")]
    AlreadyEnded(String),
}

impl Journal {
    /// Records that `task` started step try `key`.
    pub fn start_step(&mut self, key: &str, task: String, now_ms: u64) {
        self.steps.entry(key.to_owned()).or_insert(StepEntry {
            task,
            started_ms: now_ms,
            wants_changes: false,
            wants_session: false,
            outcome: None,
        });
    }

    /// Records how step try `key` ended, with what its task left and
    /// spent.
    pub fn end_step_with(
        &mut self,
        key: &str,
        result: Result<Value, String>,
        facts: StepFacts,
        now_ms: u64,
    ) -> Result<(), RecordError> {
        let seq = self.next_seq;
        let entry = self
            .steps
            .get_mut(key)
            .ok_or_else(|| RecordError::UnknownStep(key.to_owned()))?;
        settle(&mut entry.outcome, key, result, facts, seq, now_ms)?;
        self.next_seq += 1;
        Ok(())
    }

    /// Records how step try `key` ended.
    pub fn end_step(
        &mut self,
        key: &str,
        result: Result<Value, String>,
        now_ms: u64,
    ) -> Result<(), RecordError> {
        self.end_step_with(key, result, StepFacts::default(), now_ms)
    }

    /// Records that wait `key` opened.
    pub fn open_wait(&mut self, key: &str, entry: WaitEntry) {
        self.waits.entry(key.to_owned()).or_insert(entry);
    }

    /// Records the answer to wait `key` (or its timeout, as an `Err`).
    pub fn end_wait(
        &mut self,
        key: &str,
        result: Result<Value, String>,
        now_ms: u64,
    ) -> Result<(), RecordError> {
        let seq = self.next_seq;
        let entry = self
            .waits
            .get_mut(key)
            .ok_or_else(|| RecordError::UnknownWait(key.to_owned()))?;
        settle(
            &mut entry.outcome,
            key,
            result,
            StepFacts::default(),
            seq,
            now_ms,
        )?;
        self.next_seq += 1;
        Ok(())
    }

    /// The step try `task` runs, if it is one of this run's and still open.
    pub fn step_of_task(&self, task: &str) -> Option<&str> {
        self.steps
            .iter()
            .find(|(_, e)| e.task == task && e.outcome.is_none())
            .map(|(k, _)| k.as_str())
    }

    /// Step tries started and not ended: (key, task).
    pub fn open_steps(&self) -> impl Iterator<Item = (&str, &str)> {
        self.steps
            .iter()
            .filter(|(_, e)| e.outcome.is_none())
            .map(|(k, e)| (k.as_str(), e.task.as_str()))
    }

    /// Waits opened and not answered: (key, entry).
    pub fn open_waits(&self) -> impl Iterator<Item = (&str, &WaitEntry)> {
        self.waits
            .iter()
            .filter(|(_, e)| e.outcome.is_none())
            .map(|(k, e)| (k.as_str(), e))
    }
}

/// Sets the outcome of `key` (at journal seq `seq`), unless it has one.
fn settle(
    slot: &mut Option<Outcome>,
    key: &str,
    result: Result<Value, String>,
    facts: StepFacts,
    seq: u64,
    at_ms: u64,
) -> Result<(), RecordError> {
    if slot.is_some() {
        return Err(RecordError::AlreadyEnded(key.to_owned()));
    }
    let StepFacts {
        changes,
        session,
        spend,
    } = facts;
    *slot = Some(match result {
        Ok(value) => Outcome::Passed {
            value,
            seq,
            at_ms,
            changes,
            session,
            spend,
        },
        Err(reason) => Outcome::Failed {
            reason,
            seq,
            at_ms,
            spend,
        },
    });
    Ok(())
}
