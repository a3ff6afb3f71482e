//! What a layer sees of a finished attempt before the engine decides it: the
//! join result and the last Final in the tail, read the way dispatch reads
//! them (docs/tasks.md, Attempts, step 5).

use serde_json::{Value, json};
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::AttemptOutcome;
use swarmd_engine::{Engine, WorkerError};
use swarmd_output_store::{ContentRef, OutputEvent};

/// The attempt's result as far as the layers can tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub outcome: AttemptOutcome,
    /// The deciding Final's value and `ok`, when there is one.
    pub value: Option<Value>,
    pub ok: Option<bool>,
    pub reason: Option<String>,
}

impl Observed {
    /// Reads the tail's last Final unless the join already failed.
    pub async fn read(
        engine: &Engine,
        task_id: TaskId,
        attempt: u32,
        joined: &Result<(), WorkerError>,
    ) -> Observed {
        let failed = |outcome, reason: String| Observed {
            outcome,
            value: None,
            ok: None,
            reason: Some(reason),
        };
        match joined {
            Err(WorkerError::Cancelled) => failed(AttemptOutcome::Cancelled, "cancelled".into()),
            Err(e) => failed(AttemptOutcome::Failed, e.to_string()),
            Ok(()) => match engine.last_final(task_id, attempt).await {
                Ok(Some(record)) => match record.event {
                    OutputEvent::Final { content, ok } => Observed {
                        outcome: if ok {
                            AttemptOutcome::Pass
                        } else {
                            AttemptOutcome::Blocked
                        },
                        value: Some(content_value(content)),
                        ok: Some(ok),
                        reason: None,
                    },
                    _ => failed(
                        AttemptOutcome::Failed,
                        "the last final is not a final".into(),
                    ),
                },
                Ok(None) => failed(
                    AttemptOutcome::Failed,
                    "the worker finished without a final".into(),
                ),
                Err(e) => failed(
                    AttemptOutcome::Failed,
                    format!("could not read the final: {e}"),
                ),
            },
        }
    }

    /// `{outcome, ok, value, reason}` as handed to hooks and Lua middleware.
    pub fn to_json(&self) -> Value {
        json!({
            "outcome": self.outcome.as_str(),
            "ok": self.ok,
            "value": self.value,
            "reason": self.reason,
        })
    }
}

/// A Final's content as a JSON value: the inline value, or the file reference.
pub fn content_value(content: ContentRef) -> Value {
    match content {
        ContentRef::Inline { value } => value,
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}
