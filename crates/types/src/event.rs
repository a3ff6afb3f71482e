//! The engine's state-change events (docs/protocol.md, Events): one tagged enum, stamped with
//! a global sequence number, appended to the durable log and broadcast.

use crate::output::OutputEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RunId, SessionId, TaskId};
use crate::run::RunStatus;
use crate::task::{AttemptOutcome, TaskResult, TaskStatus};

/// Every state change the engine makes public.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    TaskCreated {
        task_id: TaskId,
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<TaskId>,
    },
    TaskQueued {
        task_id: TaskId,
    },
    AttemptStarted {
        task_id: TaskId,
        attempt: u32,
        lease_deadline_ms: u64,
    },
    /// An OutputEvent was appended; `output` is its stored form.
    Output {
        task_id: TaskId,
        attempt: u32,
        seq: u64,
        output: OutputEvent,
    },
    LongHoldWarn {
        task_id: TaskId,
        attempt: u32,
        elapsed_secs: u64,
    },
    SeniorAsked {
        task_id: TaskId,
        attempt: u32,
        question: Value,
    },
    SeniorAnswered {
        task_id: TaskId,
        attempt: u32,
        answer: Value,
    },
    AttemptFinished {
        task_id: TaskId,
        attempt: u32,
        outcome: AttemptOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        elapsed_ms: u64,
    },
    /// The task reached a terminal status. `attempt` is the task's last
    /// attempt (the one that decided it, or the one running when it was
    /// cancelled), 0 when it ended before any attempt started; events
    /// logged before the field existed decode with 0 too.
    TaskFinished {
        task_id: TaskId,
        #[serde(default)]
        attempt: u32,
        status: TaskStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<TaskResult>,
    },
    TaskCancelled {
        task_id: TaskId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    SessionAttached {
        sid: SessionId,
    },
    SessionDetached {
        sid: SessionId,
    },
    /// A flow run's record changed; `node` and `node_status` name the step
    /// whose change it was, if one.
    RunChanged {
        run_id: RunId,
        flow: String,
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_status: Option<String>,
    },
}

impl Event {
    /// The task this event is about, if any.
    pub fn task_id(&self) -> Option<TaskId> {
        match self {
            Event::TaskCreated { task_id, .. }
            | Event::TaskQueued { task_id }
            | Event::AttemptStarted { task_id, .. }
            | Event::Output { task_id, .. }
            | Event::LongHoldWarn { task_id, .. }
            | Event::SeniorAsked { task_id, .. }
            | Event::SeniorAnswered { task_id, .. }
            | Event::AttemptFinished { task_id, .. }
            | Event::TaskFinished { task_id, .. }
            | Event::TaskCancelled { task_id, .. } => Some(*task_id),
            Event::SessionAttached { .. }
            | Event::SessionDetached { .. }
            | Event::RunChanged { .. } => None,
        }
    }

    /// The attempt this event is about, if any.
    pub fn attempt(&self) -> Option<u32> {
        match self {
            Event::AttemptStarted { attempt, .. }
            | Event::Output { attempt, .. }
            | Event::LongHoldWarn { attempt, .. }
            | Event::SeniorAsked { attempt, .. }
            | Event::SeniorAnswered { attempt, .. }
            | Event::AttemptFinished { attempt, .. } => Some(*attempt),
            Event::TaskFinished { attempt, .. } if *attempt > 0 => Some(*attempt),
            _ => None,
        }
    }

    /// Every `kind()`, for clients that name kinds (`/v1/events?kinds=`).
    pub const KINDS: [&'static str; 13] = [
        "task_created",
        "task_queued",
        "attempt_started",
        "output",
        "long_hold_warn",
        "senior_asked",
        "senior_answered",
        "attempt_finished",
        "task_finished",
        "task_cancelled",
        "session_attached",
        "session_detached",
        "run_changed",
    ];

    /// The kinds this node's own machinery acts on, whoever committed
    /// them: the event router (`task_done`, a long-hold warning, `run_done`
    /// to the session that owns the task or run), task and run waits, and
    /// the flow runner. A cluster's event pump reads these whole even while
    /// nothing on the node follows the whole log (`Engine::follow`).
    pub const ACTED_ON: [&'static str; 3] = ["task_finished", "long_hold_warn", "run_changed"];

    /// The snake_case `kind` tag, for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TaskCreated { .. } => "task_created",
            Event::TaskQueued { .. } => "task_queued",
            Event::AttemptStarted { .. } => "attempt_started",
            Event::Output { .. } => "output",
            Event::LongHoldWarn { .. } => "long_hold_warn",
            Event::SeniorAsked { .. } => "senior_asked",
            Event::SeniorAnswered { .. } => "senior_answered",
            Event::AttemptFinished { .. } => "attempt_finished",
            Event::TaskFinished { .. } => "task_finished",
            Event::TaskCancelled { .. } => "task_cancelled",
            Event::SessionAttached { .. } => "session_attached",
            Event::SessionDetached { .. } => "session_detached",
            Event::RunChanged { .. } => "run_changed",
        }
    }
}

/// An event as logged: its global sequence number, time, and the session that
/// owns the task it concerns (for routing to that session's socket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub seq: u64,
    pub ts_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    pub event: Event,
}

/// One entry of the log as a cluster's event pump reads it: a record
/// whole, or only its seq (a record nothing on the node needs, stepped
/// past in order without being broadcast).
#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    Whole(EventRecord),
    Seq(u64),
}

impl Logged {
    /// Every record of `records`, whole.
    pub fn whole(records: Vec<EventRecord>) -> Vec<Logged> {
        records.into_iter().map(Logged::Whole).collect()
    }

    pub fn seq(&self) -> u64 {
        match self {
            Logged::Whole(record) => record.seq,
            Logged::Seq(seq) => *seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_tag_matches_serde_tag() {
        let t = TaskId::new();
        let events = [
            Event::TaskQueued { task_id: t },
            Event::LongHoldWarn {
                task_id: t,
                attempt: 1,
                elapsed_secs: 600,
            },
            Event::TaskFinished {
                task_id: t,
                attempt: 2,
                status: TaskStatus::Pass,
                result: Some(TaskResult {
                    value: Value::from("x"),
                    ok: true,
                }),
            },
            Event::RunChanged {
                run_id: RunId::new(),
                flow: "review".to_owned(),
                status: RunStatus::Waiting,
                node: Some("lint".to_owned()),
                node_status: None,
            },
        ];
        for e in events {
            let json = serde_json::to_value(&e).unwrap();
            assert_eq!(json["kind"], e.kind());
            assert!(json.get("node_status").is_none(), "{json}");
            let back: Event = serde_json::from_value(json).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn kinds_lists_every_serde_tag_once() {
        // A tag serde does not know fails to decode; every listed one decodes
        // as far as its missing fields.
        for kind in Event::KINDS {
            let error = serde_json::from_value::<Event>(serde_json::json!({ "kind": kind }))
                .unwrap_err()
                .to_string();
            assert!(error.contains("missing field"), "{kind}: {error}");
        }
        let unique: std::collections::HashSet<_> = Event::KINDS.iter().collect();
        assert_eq!(unique.len(), Event::KINDS.len());
        let error = serde_json::from_value::<Event>(serde_json::json!({ "kind": "nope" }))
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown variant"), "{error}");
        // Serde's own list of variants is the same set: "unknown variant
        // `nope`, expected one of `a`, `b`, …".
        for kind in Event::KINDS {
            assert!(
                error.contains(kind),
                "{kind} missing from serde's tags: {error}"
            );
        }
        assert_eq!(
            error.matches('`').count(),
            2 + 2 * Event::KINDS.len(),
            "{error}"
        );
    }

    #[test]
    fn a_task_finished_logged_without_its_attempt_still_decodes() {
        let t = TaskId::new();
        let logged = serde_json::json!({
            "kind": "task_finished",
            "task_id": t,
            "status": "cancelled",
        });
        let event: Event = serde_json::from_value(logged).unwrap();
        assert_eq!(
            event,
            Event::TaskFinished {
                task_id: t,
                attempt: 0,
                status: TaskStatus::Cancelled,
                result: None,
            }
        );
        assert_eq!(event.attempt(), None, "attempt 0 names no attempt");
        let json = serde_json::to_value(Event::TaskFinished {
            task_id: t,
            attempt: 3,
            status: TaskStatus::Failed,
            result: None,
        })
        .unwrap();
        assert_eq!(json["attempt"], 3, "{json}");
    }
}
