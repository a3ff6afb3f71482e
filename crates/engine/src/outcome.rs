//! The one rule that decides an attempt: how it ended, and the last Final in
//! its tail, give its outcome, the task's result and a reason. Dispatch and
//! recovery decide with it, and the spawner layers that report an outcome
//! (audit, hooks, Lua middleware) read it through `AttemptHost::verdict`, so
//! they never tell another story than the task's.

use swarmd_output_store::{OutputEvent, OutputRecord};
pub use swarmd_types::output::content_value;

use crate::error::EngineError;
use crate::error::WorkerError;
use crate::task::{AttemptOutcome, TaskResult};

/// How an attempt ended, as far as deciding it goes.
#[derive(Debug)]
pub enum AttemptEnd {
    /// The worker completed; the tail's last Final, as read afterwards.
    Finished(Result<Option<OutputRecord>, EngineError>),
    /// The worker's join failed.
    WorkerFailed(WorkerError),
    /// The attempt was cancelled while it ran.
    Cancelled,
    /// The attempt's lease ran out.
    LeaseExpired,
    /// The daemon stopped while the attempt ran.
    Interrupted,
    /// The task passed a budget while the attempt ran.
    OverBudget,
}

/// Why the engine stopped an attempt's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    Cancelled,
    LeaseExpired,
    Interrupted,
    OverBudget,
}

impl Stopped {
    /// The end a worker the engine stopped for this reason has.
    pub(crate) fn end(self) -> AttemptEnd {
        match self {
            Stopped::Cancelled => AttemptEnd::Cancelled,
            Stopped::LeaseExpired => AttemptEnd::LeaseExpired,
            Stopped::Interrupted => AttemptEnd::Interrupted,
            Stopped::OverBudget => AttemptEnd::OverBudget,
        }
    }
}

/// What an attempt's end decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub outcome: AttemptOutcome,
    /// The deciding Final's value and `ok`, when a Final decided.
    pub result: Option<TaskResult>,
    /// Why no Final decided, when none did.
    pub reason: Option<String>,
}

impl AttemptEnd {
    /// The rule: a Final decides `pass` or `blocked` with its value as the
    /// result; anything else fails the attempt with a reason, except a cancel.
    pub fn verdict(self) -> Verdict {
        let without_final = |outcome, reason: String| Verdict {
            outcome,
            result: None,
            reason: Some(reason),
        };
        match self {
            AttemptEnd::Finished(Ok(Some(record))) => match record.event {
                OutputEvent::Final { content, ok } => Verdict {
                    outcome: if ok {
                        AttemptOutcome::Pass
                    } else {
                        AttemptOutcome::Blocked
                    },
                    result: Some(TaskResult {
                        value: content_value(content),
                        ok,
                    }),
                    reason: None,
                },
                _ => without_final(
                    AttemptOutcome::Failed,
                    "the last final is not a final".to_owned(),
                ),
            },
            AttemptEnd::Finished(Ok(None)) => without_final(
                AttemptOutcome::Failed,
                "the worker finished without a final".to_owned(),
            ),
            AttemptEnd::Finished(Err(error)) => without_final(
                AttemptOutcome::Failed,
                format!("could not read the final: {error}"),
            ),
            AttemptEnd::Cancelled | AttemptEnd::WorkerFailed(WorkerError::Cancelled) => {
                without_final(AttemptOutcome::Cancelled, "cancelled".to_owned())
            }
            AttemptEnd::WorkerFailed(error) => {
                without_final(AttemptOutcome::Failed, error.to_string())
            }
            AttemptEnd::LeaseExpired => {
                without_final(AttemptOutcome::Failed, "lease expired".to_owned())
            }
            AttemptEnd::Interrupted => {
                without_final(AttemptOutcome::Failed, "interrupted".to_owned())
            }
            AttemptEnd::OverBudget => {
                without_final(AttemptOutcome::Failed, "budget_exceeded".to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use swarmd_output_store::ContentRef;

    use super::*;

    fn record(event: OutputEvent) -> OutputRecord {
        OutputRecord {
            task: uuid::Uuid::nil(),
            attempt: 1,
            seq: 1,
            ts_ms: 0,
            producer: "test".to_owned(),
            event,
        }
    }

    fn decided(outcome: AttemptOutcome, value: Value, ok: bool) -> Verdict {
        Verdict {
            outcome,
            result: Some(TaskResult { value, ok }),
            reason: None,
        }
    }

    fn refused(outcome: AttemptOutcome, reason: &str) -> Verdict {
        Verdict {
            outcome,
            result: None,
            reason: Some(reason.to_owned()),
        }
    }

    #[test]
    fn a_final_decides_pass_or_blocked_with_its_value() {
        let pass = record(OutputEvent::inline_final(json!({"n": 1}), true));
        assert_eq!(
            AttemptEnd::Finished(Ok(Some(pass))).verdict(),
            decided(AttemptOutcome::Pass, json!({"n": 1}), true)
        );
        let blocked = record(OutputEvent::inline_final(json!("no"), false));
        assert_eq!(
            AttemptEnd::Finished(Ok(Some(blocked))).verdict(),
            decided(AttemptOutcome::Blocked, json!("no"), false)
        );
        let file = ContentRef::FileRef {
            path: "blobs/ab".to_owned(),
            mime: None,
            size: 2,
            sha256: "ab".to_owned(),
        };
        let spilled = record(OutputEvent::Final {
            content: file.clone(),
            ok: true,
        });
        assert_eq!(
            AttemptEnd::Finished(Ok(Some(spilled))).verdict(),
            decided(
                AttemptOutcome::Pass,
                serde_json::to_value(file).unwrap(),
                true
            )
        );
    }

    #[test]
    fn every_end_without_a_final_has_its_outcome_and_reason() {
        let not_final = record(OutputEvent::Progress {
            stage: "p".to_owned(),
            note: None,
        });
        let cases = [
            (
                AttemptEnd::Finished(Ok(Some(not_final))),
                AttemptOutcome::Failed,
                "the last final is not a final",
            ),
            (
                AttemptEnd::Finished(Ok(None)),
                AttemptOutcome::Failed,
                "the worker finished without a final",
            ),
            (
                AttemptEnd::Finished(Err(EngineError::Draining)),
                AttemptOutcome::Failed,
                "could not read the final: the engine is draining",
            ),
            (
                AttemptEnd::WorkerFailed(WorkerError::Failed("exit 3".to_owned())),
                AttemptOutcome::Failed,
                "exit 3",
            ),
            (
                AttemptEnd::WorkerFailed(WorkerError::TimedOut),
                AttemptOutcome::Failed,
                "timed out",
            ),
            (
                AttemptEnd::WorkerFailed(WorkerError::Cancelled),
                AttemptOutcome::Cancelled,
                "cancelled",
            ),
            (
                AttemptEnd::Cancelled,
                AttemptOutcome::Cancelled,
                "cancelled",
            ),
            (
                AttemptEnd::LeaseExpired,
                AttemptOutcome::Failed,
                "lease expired",
            ),
            (
                AttemptEnd::Interrupted,
                AttemptOutcome::Failed,
                "interrupted",
            ),
            (
                AttemptEnd::OverBudget,
                AttemptOutcome::Failed,
                "budget_exceeded",
            ),
        ];
        for (end, outcome, reason) in cases {
            assert_eq!(end.verdict(), refused(outcome, reason));
        }
    }
}
