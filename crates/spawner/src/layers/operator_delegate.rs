//! `operator_delegate` (hint layer, docs/tasks.md, Layers): when the attempt
//! was placed with the task's own session (`Ctx::delegated`, decided by the
//! resolver when the session has a spawn channel), it goes back to it as
//! a `spawn` frame and the inner spawner is bypassed; otherwise the inner
//! spawner runs.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};

use crate::operator::SessionDirectory;
use crate::spawners::{OperatorTarget, delegate};
use crate::stack::SpawnerLayer;

/// Builds [`OperatorDelegate`] wrappers. `targets` holds the worker bindings
/// of configured agents; an agent not in it is launched by its name alone.
#[derive(Debug, Clone)]
pub struct OperatorDelegateLayer {
    base_url: String,
    targets: Arc<HashMap<String, OperatorTarget>>,
    sessions: Arc<dyn SessionDirectory>,
}

impl OperatorDelegateLayer {
    pub fn new(
        base_url: &str,
        targets: HashMap<String, OperatorTarget>,
        sessions: Arc<dyn SessionDirectory>,
    ) -> OperatorDelegateLayer {
        OperatorDelegateLayer {
            base_url: base_url.to_owned(),
            targets: Arc::new(targets),
            sessions,
        }
    }
}

impl SpawnerLayer for OperatorDelegateLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(OperatorDelegate {
            inner,
            layer: self.clone(),
        })
    }
}

/// Delegates to the owning session's spawn channel when the attempt was placed there.
#[derive(Debug)]
pub struct OperatorDelegate {
    inner: Arc<dyn SpawnerAdapter>,
    layer: OperatorDelegateLayer,
}

#[async_trait]
impl SpawnerAdapter for OperatorDelegate {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let ctx = &attempt.ctx;
        if !ctx.delegated {
            return self.inner.spawn(attempt).await;
        }
        let channel = ctx
            .session
            .and_then(|sid| self.layer.sessions.session(&sid))
            .and_then(|s| s.spawn_channel);
        let Some(channel) = channel else {
            return Err(SpawnError::NoOperator(attempt.ctx.agent));
        };
        let target = self
            .layer
            .targets
            .get(&ctx.agent)
            .cloned()
            .unwrap_or_default();
        delegate(attempt, channel, &target, &self.layer.base_url, None).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use swarmd_engine::Engine;
    use swarmd_engine::ids::SessionId;
    use swarmd_engine::store::SessionKind;

    use crate::operator::SpawnReply;
    use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskSpec, TaskStatus};

    use super::*;
    use crate::spawners::UnconfiguredAgent;
    use crate::testing::{
        Act, CallLog, FakeChannel, FakeDirectory, FinalSpawner, call_log, calls,
        engine_with_directory, session, spawn_owned,
    };

    /// A task of `agent` owned by `session` that names this layer.
    async fn spawn_delegating(engine: &Engine, agent: &str, session: SessionId) -> Task {
        let spec = TaskSpec {
            agent: agent.to_owned(),
            prompt: "do it".to_owned(),
            session: Some(session),
            layers: vec![crate::layers::OPERATOR_DELEGATE.to_owned()],
            ..TaskSpec::default()
        };
        engine.create_task(spec).await.unwrap()
    }

    fn layer(directory: &Arc<FakeDirectory>) -> OperatorDelegateLayer {
        let target = OperatorTarget {
            worker_binding: Some(json!({"subagent_type": "fixer"})),
            system_prompt: None,
        };
        OperatorDelegateLayer::new(
            "http://127.0.0.1:9",
            HashMap::from([("known".to_owned(), target)]),
            directory.clone(),
        )
    }

    /// A MainAI session with a spawn channel in a directory, and a
    /// configured agent `known` behind the layer whose own spawner answers
    /// "inner" into `log`.
    fn main_ai_with_channel() -> (
        Arc<FakeChannel>,
        SessionId,
        Arc<FakeDirectory>,
        CallLog,
        Arc<dyn SpawnerAdapter>,
    ) {
        let channel = Arc::new(FakeChannel::default());
        let mut owner = session(SessionKind::MainAi);
        owner.spawn_channel = Some(channel.clone());
        let sid = owner.sid;
        let directory = Arc::new(FakeDirectory::default());
        directory.add(&[], owner);
        let log = call_log();
        let known =
            layer(&directory).wrap(FinalSpawner::arc(Act::Final(json!("inner"), true), &log));
        (channel, sid, directory, log, known)
    }

    #[tokio::test]
    async fn a_session_with_a_spawn_channel_gets_the_attempt_and_the_inner_spawner_is_bypassed() {
        let (channel, sid, directory, log, known) = main_ai_with_channel();
        let unknown = layer(&directory).wrap(Arc::new(UnconfiguredAgent));
        let engine = engine_with_directory(
            vec![
                ("known", SpawnerKind::Operator, known),
                ("adhoc", SpawnerKind::Operator, unknown),
            ],
            directory,
        );

        let task = spawn_delegating(&engine, "known", sid).await;
        let frame = channel.frame(0).await;
        assert_eq!(
            frame.worker_binding,
            Some(json!({"subagent_type": "fixer"}))
        );
        channel.reply(
            0,
            SpawnReply::Ack {
                value: json!("from the MainAI"),
                ok: true,
                error: None,
                stats: None,
            },
        );
        let done = engine
            .wait_task(task.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.result.unwrap().value, json!("from the MainAI"));
        assert!(calls(&log).is_empty(), "the inner spawner never ran");

        // An agent that exists only by delegation is launched by its name.
        let task = spawn_delegating(&engine, "adhoc", sid).await;
        let frame = channel.frame(1).await;
        assert!(
            frame
                .directive
                .starts_with("Launch one SubAgent of type `adhoc`")
        );
        assert_eq!(frame.worker_binding, None);
        channel.reply(
            1,
            SpawnReply::Halt {
                value: None,
                reason: None,
            },
        );
        let done = engine
            .wait_task(task.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.status(), TaskStatus::Pass);
    }

    #[tokio::test]
    async fn without_a_spawn_channel_the_inner_spawner_runs() {
        let directory = Arc::new(FakeDirectory::default());
        let owner = session(SessionKind::MainAi);
        let sid = owner.sid;
        directory.add(&[], owner);
        let log = call_log();
        let known =
            layer(&directory).wrap(FinalSpawner::arc(Act::Final(json!("inner"), true), &log));
        let adhoc = layer(&directory).wrap(Arc::new(UnconfiguredAgent));
        let engine = engine_with_directory(
            vec![
                ("known", SpawnerKind::Operator, known),
                ("adhoc", SpawnerKind::Operator, adhoc),
            ],
            directory,
        );
        let task = spawn_delegating(&engine, "known", sid).await;
        let done = engine
            .wait_task(task.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.result.unwrap().value, json!("inner"));
        assert_eq!(calls(&log), ["base spawn", "base join"]);

        let task = spawn_delegating(&engine, "adhoc", sid).await;
        let done = engine
            .wait_task(task.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.status(), TaskStatus::Failed);
        assert!(
            done.reason
                .unwrap()
                .contains("no live operator session for `adhoc`")
        );
    }

    /// A process agent handed to the MainAI is recorded as an operator
    /// attempt: recovery must resume it, not fail it as interrupted.
    #[tokio::test]
    async fn a_delegated_attempt_is_recorded_where_it_runs() {
        let (channel, sid, directory, _log, known) = main_ai_with_channel();
        let engine = engine_with_directory(vec![("known", SpawnerKind::Process, known)], directory);

        let delegated = spawn_delegating(&engine, "known", sid).await;
        channel.frame(0).await;
        let attempts = engine.attempts(delegated.id).await.unwrap();
        assert_eq!(attempts[0].spawner, SpawnerKind::Operator);

        // Without the layer the same agent runs its own spawner, as a process.
        let own = spawn_owned(&engine, "known", Some(sid), PolicyOverrides::default()).await;
        let done = engine
            .wait_task(own.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.result.unwrap().value, json!("inner"));
        let attempts = engine.attempts(own.id).await.unwrap();
        assert_eq!(attempts[0].spawner, SpawnerKind::Process);
    }
}
