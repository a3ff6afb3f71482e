//! `main_ai` (hint layer, docs/tasks.md, Layers): for sessions of kind `main_ai` or
//! `composite`, `hook_before` must be acknowledged before the attempt starts;
//! `hook_after` reports the result, fire and forget.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};

use crate::operator::{HookAck, HookRequest, SessionDirectory};
use crate::stack::{Observed, SpawnerLayer, wrap_join};

/// Builds [`MainAi`] wrappers; `hook_timeout` bounds the wait for `hook_ack`,
/// `sessions` finds the task's session.
#[derive(Debug, Clone)]
pub struct MainAiLayer {
    pub hook_timeout: Duration,
    pub sessions: Arc<dyn SessionDirectory>,
}

impl SpawnerLayer for MainAiLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(MainAi {
            inner,
            hook_timeout: self.hook_timeout,
            sessions: Arc::clone(&self.sessions),
        })
    }
}

/// Asks the owning session before spawning; a refusal, a bridge failure or
/// silence past the timeout rejects the attempt with the reason.
#[derive(Debug)]
pub struct MainAi {
    inner: Arc<dyn SpawnerAdapter>,
    hook_timeout: Duration,
    sessions: Arc<dyn SessionDirectory>,
}

#[async_trait]
impl SpawnerAdapter for MainAi {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        // The owner's hooks; a task nobody owns answers to the session it
        // is pinned to (`operator_sid`), the MainAI driving it.
        let ctx = &attempt.ctx;
        let hooks = ctx
            .session
            .or(ctx.operator_sid)
            .and_then(|sid| self.sessions.session(&sid))
            .filter(|session| session.kind.takes_hooks())
            .and_then(|session| session.hooks);
        let Some(hooks) = hooks else {
            return self.inner.spawn(attempt).await;
        };
        let request = HookRequest {
            task_id: attempt.ctx.id.task,
            agent: attempt.ctx.agent.clone(),
            attempt: attempt.ctx.id.n,
        };
        match tokio::time::timeout(self.hook_timeout, hooks.before(request.clone())).await {
            Ok(Ok(HookAck { ok: true, .. })) => {}
            Ok(Ok(HookAck { ok: false, reason })) => {
                let reason = reason.unwrap_or_else(|| "the MainAI refused the attempt".to_owned());
                return Err(SpawnError::Rejected(reason));
            }
            Ok(Err(e)) => return Err(SpawnError::Rejected(format!("hook_before: {e}"))),
            Err(_) => {
                return Err(SpawnError::Rejected(format!(
                    "no hook_ack within {}s",
                    self.hook_timeout.as_secs_f64()
                )));
            }
        }
        let host = Arc::clone(&attempt.host);
        let worker = self.inner.spawn(attempt).await?;
        Ok(wrap_join(worker, move |joined| async move {
            let observed = Observed::read(&*host, &joined).await;
            hooks.after(request, observed.to_json());
            joined
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};
    use swarmd_engine::store::SessionKind;

    use crate::operator::{BridgeError, SpawnHook};
    use swarmd_engine::task::{PolicyOverrides, SpawnerKind, TaskStatus};

    use super::*;
    use crate::testing::{
        Act, FakeDirectory, FinalSpawner, call_log, calls, engine_with_directory, session,
        spawn_owned,
    };

    /// Answers `hook_before` with `ack` (or never, when `None`); records `after`s.
    #[derive(Debug)]
    struct FakeHook {
        ack: Option<HookAck>,
        afters: Mutex<Vec<(HookRequest, Value)>>,
    }

    #[async_trait]
    impl SpawnHook for FakeHook {
        async fn before(&self, _req: HookRequest) -> Result<HookAck, BridgeError> {
            match &self.ack {
                Some(ack) => Ok(ack.clone()),
                None => std::future::pending().await,
            }
        }

        fn after(&self, req: HookRequest, result: Value) {
            self.afters.lock().unwrap().push((req, result));
        }
    }

    async fn hooked(
        kind: SessionKind,
        ack: Option<HookAck>,
    ) -> (TaskStatus, Option<String>, Arc<FakeHook>, Vec<String>) {
        hooked_by(kind, ack, false).await
    }

    /// As `hooked`; with `pinned`, the task is not owned but pinned to the
    /// session (`operator_sid`).
    async fn hooked_by(
        kind: SessionKind,
        ack: Option<HookAck>,
        pinned: bool,
    ) -> (TaskStatus, Option<String>, Arc<FakeHook>, Vec<String>) {
        let hook = Arc::new(FakeHook {
            ack,
            afters: Mutex::new(Vec::new()),
        });
        let mut info = session(kind);
        info.hooks = Some(hook.clone());
        let sid = info.sid;
        let directory = Arc::new(FakeDirectory::default());
        directory.add(&["main-ai"], info);
        let log = call_log();
        let layer = MainAiLayer {
            hook_timeout: Duration::from_secs(30),
            sessions: directory.clone(),
        };
        let stack = layer.wrap(FinalSpawner::arc(Act::Final(json!("v"), true), &log));
        let engine = engine_with_directory(vec![("a", SpawnerKind::InProcess, stack)], directory);
        let task = if pinned {
            let spec = swarmd_engine::task::TaskSpec {
                agent: "a".into(),
                prompt: "do it".into(),
                operator_sid: Some(sid),
                ..Default::default()
            };
            engine.create_task(spec).await.unwrap()
        } else {
            spawn_owned(&engine, "a", Some(sid), PolicyOverrides::default()).await
        };
        let done = engine
            .wait_task(task.id, Duration::from_secs(3600))
            .await
            .unwrap();
        (done.status(), done.reason, hook, calls(&log))
    }

    #[tokio::test]
    async fn an_acked_attempt_runs_and_reports_its_result() {
        let (status, _, hook, calls) = hooked(
            SessionKind::MainAi,
            Some(HookAck {
                ok: true,
                reason: None,
            }),
        )
        .await;
        assert_eq!(status, TaskStatus::Pass);
        assert_eq!(calls, ["base spawn", "base join"]);
        let afters = hook.afters.lock().unwrap();
        assert_eq!(afters.len(), 1);
        assert_eq!(afters[0].0.attempt, 1);
        assert_eq!(afters[0].1["outcome"], "pass");
        assert_eq!(afters[0].1["value"], "v");
    }

    #[tokio::test]
    async fn a_refusal_rejects_before_spawning() {
        let ack = HookAck {
            ok: false,
            reason: Some("not now".into()),
        };
        let (status, reason, hook, calls) = hooked(SessionKind::Composite, Some(ack)).await;
        assert_eq!(status, TaskStatus::Failed);
        assert_eq!(reason.as_deref(), Some("rejected: not now"));
        assert!(calls.is_empty());
        assert!(hook.afters.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn silence_past_the_timeout_rejects() {
        let (status, reason, _, calls) = hooked(SessionKind::MainAi, None).await;
        assert_eq!(status, TaskStatus::Failed);
        assert_eq!(reason.as_deref(), Some("rejected: no hook_ack within 30s"));
        assert!(calls.is_empty());
    }

    #[tokio::test]
    async fn a_task_nobody_owns_hooks_the_session_it_is_pinned_to() {
        let ack = HookAck {
            ok: false,
            reason: Some("not now".into()),
        };
        let (status, reason, _, calls) = hooked_by(SessionKind::MainAi, Some(ack), true).await;
        assert_eq!(status, TaskStatus::Failed);
        assert!(reason.unwrap().contains("not now"));
        assert!(calls.is_empty(), "refused before spawning");
    }

    #[tokio::test]
    async fn automate_sessions_take_no_hooks() {
        let (status, _, hook, _) = hooked(SessionKind::Automate, None).await;
        assert_eq!(status, TaskStatus::Pass);
        assert!(hook.afters.lock().unwrap().is_empty());
    }
}
