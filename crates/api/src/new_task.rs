//! One create-task request and one path for every surface: `POST
//! /v1/tasks`, the MCP `spawn` tools and a MainAI's `spawn_task` frame each
//! read their own wire shape into a [`NewTask`] and hand it, with who asks
//! ([`Origin`]), to `NewTask::create`, the one call into the engine's
//! creation. `NewTask::into_spec` is the one place a request becomes the
//! engine's `TaskSpec` (a new field is added here once, and the compiler
//! names every surface that must fill it).

use serde_json::{Map, Value};
use swarmd_engine::ids::{ReqId, SessionId, TaskId};
use swarmd_engine::task::{PolicyOverrides, Task, TaskSpec};
use swarmd_engine::{Engine, EngineError, WorkerAuth};
use swarmd_spawner::layers::OPERATOR_DELEGATE;
use swarmd_wire::SpawnTaskFrame;

/// A task as a caller asks for it.
#[derive(Debug)]
pub struct NewTask {
    pub agent: String,
    pub prompt: String,
    pub system: Option<String>,
    pub input: Option<Value>,
    pub metadata: Option<Map<String, Value>>,
    pub layers: Vec<String>,
    pub policy: PolicyOverrides,
    /// The session the task's operator attempts must go to; the surface
    /// checks the caller may name it before the task is made.
    pub operator_sid: Option<SessionId>,
    /// The finished task this one continues; `agent` may then be empty.
    pub continue_from: Option<TaskId>,
}

/// Who creates a task, and the scope its idempotency keys are made in.
#[derive(Debug)]
pub struct Origin {
    /// The session of a top-level task; `None` with no `worker`: the admin.
    pub(crate) session: Option<SessionId>,
    /// The worker whose attempt creates a sub-task of its task.
    pub(crate) worker: Option<WorkerAuth>,
    /// The surface and the caller: `http:admin`, `http:<sid>`,
    /// `http:worker:<task>`, `ws:<sid>`. Two callers never collide on a key.
    pub(crate) scope: String,
}

impl Origin {
    /// A MainAI session asking over its socket; each `spawn_task`'s
    /// `req_id` is its key.
    pub(crate) fn socket(sid: SessionId) -> Origin {
        Origin {
            session: Some(sid),
            worker: None,
            scope: format!("ws:{sid}"),
        }
    }
}

impl NewTask {
    /// Creates the task for `origin`, once per `key` in the origin's scope:
    /// a worker's is a sub-task of its own task (refused once its attempt
    /// is no longer the open one), anyone else's a top-level task.
    ///
    /// # Errors
    /// The engine's refusal: a draining daemon, an unknown agent, a bad
    /// input, a reused key with another request, a closed attempt.
    pub async fn create(
        self,
        engine: &Engine,
        origin: &Origin,
        key: Option<&str>,
    ) -> Result<Task, EngineError> {
        let key = key.map(|k| format!("{}:{k}", origin.scope));
        let spec = self.into_spec(origin.session, key);
        match &origin.worker {
            Some(worker) => engine.create_subtask(worker, spec).await,
            None => engine.create_task(spec).await,
        }
    }

    /// The engine's spec of the task, owned by `session` (none: the
    /// admin's) and made once per `idempotency_key`.
    pub(crate) fn into_spec(
        self,
        session: Option<SessionId>,
        idempotency_key: Option<String>,
    ) -> TaskSpec {
        TaskSpec {
            agent: self.agent,
            prompt: self.prompt,
            system: self.system,
            input: self.input,
            metadata: self.metadata,
            layers: self.layers,
            policy: self.policy,
            parent: None,
            session,
            operator_sid: self.operator_sid,
            idempotency_key,
            continue_from: self.continue_from,
            start_from: None,
        }
    }
}

impl NewTask {
    /// A `spawn_task` frame's request and its `req_id`: `delegate` adds the
    /// `operator_delegate` layer (the attempt comes back to the session as
    /// a `spawn` frame); a frame never pins an operator session.
    pub(crate) fn from_frame(frame: SpawnTaskFrame) -> (ReqId, NewTask) {
        let mut layers = frame.layers.unwrap_or_default();
        if frame.delegate && !layers.iter().any(|l| l == OPERATOR_DELEGATE) {
            layers.push(OPERATOR_DELEGATE.to_owned());
        }
        let request = NewTask {
            agent: frame.agent,
            prompt: frame.prompt,
            system: frame.system,
            input: frame.input,
            metadata: frame.metadata,
            layers,
            policy: frame.policy.unwrap_or_default(),
            operator_sid: None,
            continue_from: frame.continue_from,
        };
        (frame.req_id, request)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_key_names_one_task_per_surface_and_caller() {
        use swarmd_engine::task::SpawnerKind;
        use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};

        let spawner = ScriptedSpawner::new(|_| Script::Hang);
        let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner);
        let engine = memory_engine(
            std::sync::Arc::new(resolver),
            swarmd_engine::EngineConfig::default(),
        );
        let request = || NewTask {
            agent: "a".into(),
            prompt: "p".into(),
            system: None,
            input: None,
            metadata: None,
            layers: Vec::new(),
            policy: PolicyOverrides::default(),
            operator_sid: None,
            continue_from: None,
        };
        let sid = SessionId::new();
        let socket = Origin::socket(sid);
        let first = request()
            .create(&engine, &socket, Some("r-1"))
            .await
            .unwrap();
        assert_eq!(first.session, Some(sid));
        // The same key on the same socket session is the same task.
        let again = request()
            .create(&engine, &socket, Some("r-1"))
            .await
            .unwrap();
        assert_eq!(again.id, first.id);
        // The same key from the same session over HTTP is another task.
        let http = Origin {
            session: Some(sid),
            worker: None,
            scope: format!("http:{sid}"),
        };
        let other = request().create(&engine, &http, Some("r-1")).await.unwrap();
        assert_ne!(other.id, first.id);
        // Without a key, every request is a task of its own.
        let plain = request().create(&engine, &socket, None).await.unwrap();
        assert!(plain.id != first.id && plain.id != other.id);
        engine.shutdown(std::time::Duration::from_secs(1)).await;
    }

    #[test]
    fn a_frame_becomes_the_same_spec_as_a_request_with_its_fields() {
        let frame: SpawnTaskFrame = serde_json::from_value(json!({
            "req_id": "r-1", "agent": "coder", "prompt": "fix it",
            "layers": ["audit"], "delegate": true, "policy": {"max_attempts": 2}
        }))
        .unwrap();
        let (req_id, request) = NewTask::from_frame(frame);
        assert_eq!(req_id.to_string(), "r-1");
        let sid = SessionId::new();
        let spec = request.into_spec(Some(sid), Some("ws:key".into()));
        assert_eq!(spec.layers, ["audit", OPERATOR_DELEGATE]);
        assert_eq!(spec.session, Some(sid));
        assert_eq!(spec.idempotency_key.as_deref(), Some("ws:key"));
        assert_eq!(spec.policy.max_attempts, Some(2));
        assert_eq!(spec.operator_sid, None);

        // `delegate` with the layer already named adds no second one.
        let frame: SpawnTaskFrame = serde_json::from_value(json!({
            "req_id": "r-2", "agent": "coder", "prompt": "p",
            "layers": [OPERATOR_DELEGATE], "delegate": true
        }))
        .unwrap();
        let (_, request) = NewTask::from_frame(frame);
        assert_eq!(request.layers, [OPERATOR_DELEGATE]);
    }
}
