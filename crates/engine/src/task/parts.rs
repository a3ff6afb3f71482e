//! A task's record in two parts for a store that writes them apart: the
//! spec, fixed at creation (what was asked: prompt, input, policy, route),
//! and the state, which every transition rewrites (status, attempt,
//! result, times). A store then writes the spec once and the small state
//! on each change, instead of the whole task with its prompt each time.
//!
//! The two parts are the task's own JSON fields split in two, so the
//! union of their objects reads back with `Task`'s `Deserialize`
//! ([`Task::from_parts`]). Both views list every field of `Task` by
//! destructuring it, so a field added to `Task` does not compile until it
//! is placed in one of them.
//!
//! A store outside this crate (PostgreSQL) writes the parts as
//! [`Task::encode_spec`] and [`Task::encode_state`] give them, reads them
//! back with [`Task::from_parts`], and replaces the state in a row that
//! holds the whole task by removing [`Task::STATE_FIELDS`] from it.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Policy, Task, TaskResult, TaskStatus};
use crate::ids::{SessionId, TaskId};
use crate::resume::{Restart, Resume};
use crate::usage::UsageTotals;

/// The fields a task never changes after creation.
#[derive(Serialize)]
pub(crate) struct SpecPart<'a> {
    id: &'a TaskId,
    agent: &'a str,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: &'a Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: &'a Option<Map<String, Value>>,
    layers: &'a [String],
    policy: &'a Policy,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: &'a Option<TaskId>,
    depth: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: &'a Option<SessionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operator_sid: &'a Option<SessionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    continued_from: &'a Option<TaskId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume: &'a Option<Resume>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_from: &'a Option<String>,
    created_ms: u64,
}

/// The fields a task's transitions change.
#[derive(Serialize)]
pub(crate) struct StatePart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: &'a Option<Restart>,
    #[serde(skip_serializing_if = "crate::resume::no_restarts")]
    restarts: &'a u32,
    status: TaskStatus,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: &'a Option<TaskResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: &'a Option<String>,
    #[serde(skip_serializing_if = "UsageTotals::is_zero")]
    usage: &'a UsageTotals,
    updated_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_ms: Option<u64>,
}

impl Task {
    /// Every JSON key the state part can write ([`Task::encode_state`]):
    /// removing them from a whole task's object leaves its spec.
    pub const STATE_FIELDS: &'static [&'static str] = &[
        "restart",
        "restarts",
        "status",
        "attempt",
        "result",
        "reason",
        "usage",
        "updated_ms",
        "finished_ms",
    ];

    /// The task's spec, the fields fixed at creation, as a JSON object.
    pub fn encode_spec(&self) -> serde_json::Result<String> {
        serde_json::to_string(&self.parts().0)
    }

    /// The task's state, the fields its transitions change, as a JSON
    /// object whose keys are among [`Task::STATE_FIELDS`].
    pub fn encode_state(&self) -> serde_json::Result<String> {
        serde_json::to_string(&self.parts().1)
    }

    /// The task's record as its spec and its state.
    pub(crate) fn parts(&self) -> (SpecPart<'_>, StatePart<'_>) {
        let Task {
            id,
            agent,
            prompt,
            system,
            input,
            metadata,
            layers,
            policy,
            parent,
            depth,
            session,
            operator_sid,
            continued_from,
            resume,
            start_from,
            restart,
            restarts,
            status,
            attempt,
            result,
            reason,
            usage,
            created_ms,
            updated_ms,
            finished_ms,
        } = self;
        let spec = SpecPart {
            id,
            agent,
            prompt,
            system,
            input,
            metadata,
            layers,
            policy,
            parent,
            depth: *depth,
            session,
            operator_sid,
            continued_from,
            resume,
            start_from,
            created_ms: *created_ms,
        };
        let state = StatePart {
            restart,
            restarts,
            status: *status,
            attempt: *attempt,
            result,
            reason,
            usage,
            updated_ms: *updated_ms,
            finished_ms: *finished_ms,
        };
        (spec, state)
    }

    /// The task whose spec and state were written as the JSON objects
    /// `spec` and `state` ([`Task::encode_spec`], [`Task::encode_state`]).
    pub fn from_parts(
        mut spec: Map<String, Value>,
        state: Map<String, Value>,
    ) -> Result<Task, serde_json::Error> {
        spec.extend(state);
        serde_json::from_value(Value::Object(spec))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::{AttemptOutcome, TaskSpec};

    /// A task with every optional field set, so that each one is written.
    fn full_task() -> Task {
        let spec = TaskSpec {
            agent: "coder".into(),
            prompt: "Fix the \"flaky\" test".into(),
            system: Some("be brief".into()),
            input: Some(json!({"n": 1})),
            metadata: Some(json!({"team": "a"}).as_object().unwrap().clone()),
            layers: vec!["audit".into()],
            parent: Some(TaskId::new()),
            session: Some(SessionId::new()),
            operator_sid: Some(SessionId::new()),
            continue_from: Some(TaskId::new()),
            start_from: Some("work".into()),
            ..TaskSpec::default()
        };
        let mut task = Task::new(TaskId::new(), spec, Policy::default(), 2, 10);
        task.resume = Some(Resume {
            attempt: 1,
            session_id: Some("cli-1".into()),
            ..Resume::default()
        });
        task.start_attempt(11).unwrap();
        task.restart = Some(Restart {
            attempt: 1,
            worktree: 1,
            session_id: "cli-2".into(),
            branch: "swarmd/t-1".into(),
            head: None,
        });
        task.restarts = 1;
        task.usage.input_tokens = 5;
        let result = TaskResult {
            value: json!({"done": true}),
            ok: true,
        };
        task.finish(AttemptOutcome::Pass, Some(result), Some("why".into()), 12)
            .unwrap();
        task
    }

    fn object(value: impl Serialize) -> Map<String, Value> {
        match serde_json::to_value(value).unwrap() {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn the_parts_split_the_whole_record_without_overlap() {
        let task = full_task();
        let whole = object(&task);
        let (spec, state) = task.parts();
        let (spec, state) = (object(spec), object(state));
        for key in spec.keys() {
            assert!(!state.contains_key(key), "{key} is in both parts");
        }
        let mut joined = spec;
        joined.extend(state);
        assert_eq!(joined, whole);
    }

    #[test]
    fn a_task_reads_back_from_its_parts() {
        let fresh = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 1);
        for task in [full_task(), fresh] {
            let (spec, state) = task.parts();
            let (spec, state) = (object(spec), object(state));
            assert_eq!(Task::from_parts(spec, state).unwrap(), task);
        }
    }

    #[test]
    fn the_state_fields_are_the_keys_a_full_state_writes() {
        let task = full_task();
        let state = object(task.parts().1);
        let mut keys: Vec<&str> = state.keys().map(String::as_str).collect();
        let mut fields = Task::STATE_FIELDS.to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
    }

    #[test]
    fn the_encoded_parts_read_back_as_the_task() {
        let task = full_task();
        let spec: Map<String, Value> = serde_json::from_str(&task.encode_spec().unwrap()).unwrap();
        let state: Map<String, Value> =
            serde_json::from_str(&task.encode_state().unwrap()).unwrap();
        assert_eq!(object(task.parts().0), spec);
        assert_eq!(Task::from_parts(spec, state).unwrap(), task);
    }
}
