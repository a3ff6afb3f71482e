//! The Lua agent spawner (docs/tasks.md, Lua agents): the script runs on the Lua pool, its
//! `emit_*` events are forwarded as they happen, and its return value is
//! appended as the Final.

use async_trait::async_trait;
use std::sync::Arc;

use swarmd_engine::ids::WorkerId;
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker, WorkerError};
use swarmd_output_store::OutputEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::forward::{CHANNEL, forward};
use super::task_of;
use crate::lua::{AgentRun, LuaError, LuaPool, LuaScript};

const PRODUCER: &str = "lua";

/// Runs a Lua agent's script once per attempt.
#[derive(Debug, Clone)]
pub struct LuaAgentSpawner {
    script: LuaScript,
    pool: LuaPool,
}

impl LuaAgentSpawner {
    pub fn new(script: LuaScript, pool: LuaPool) -> LuaAgentSpawner {
        LuaAgentSpawner { script, pool }
    }
}

#[async_trait]
impl SpawnerAdapter for LuaAgentSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let Attempt { ctx, host, .. } = attempt;
        let task = task_of(&*host).await?;
        let run = AgentRun {
            task_id: ctx.id.task.to_string(),
            attempt: ctx.id.n,
            agent: ctx.agent,
            prompt: task.prompt,
            system: task.system,
            input: task.input,
        };
        Ok(Box::new(LuaWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            host,
            run,
            script: self.script.clone(),
            pool: self.pool.clone(),
        }))
    }
}

#[derive(Debug)]
struct LuaWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    run: AgentRun,
    script: LuaScript,
    pool: LuaPool,
}

#[async_trait]
impl Worker for LuaWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        let (events, received) = mpsc::channel(CHANNEL);
        let done = CancellationToken::new();
        let running = async {
            let ran = self
                .pool
                .run_agent(&self.script, self.run.clone(), events, self.cancel.clone())
                .await;
            done.cancel();
            ran
        };
        let (ran, forwarded) =
            tokio::join!(running, forward(&*self.host, PRODUCER, received, &done));
        if let Err(e) = forwarded {
            return Err(WorkerError::Failed(format!(
                "recording the output failed: {e}"
            )));
        }
        let done = match ran {
            Ok(done) => done,
            Err(LuaError::Cancelled) => return Err(WorkerError::Cancelled),
            Err(e) => return Err(WorkerError::Failed(e.to_string())),
        };
        self.host
            .record_output(
                PRODUCER,
                vec![OutputEvent::inline_final(done.value, done.ok)],
            )
            .await
            .map(|_| ())
            .map_err(|e| WorkerError::Failed(format!("recording the final failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarmd_engine::task::{PolicyOverrides, TaskStatus};

    use swarmd_engine::Engine;

    use super::*;
    use crate::lua::LuaLimits;
    use crate::testing::{engine_running, outputs, run_task};

    async fn run(source: &str) -> (Engine, swarmd_engine::task::Task) {
        let pool = LuaPool::new(1, LuaLimits::default()).unwrap();
        let script = LuaScript::from_source("agent", source).unwrap();
        let engine = engine_running(
            "lua",
            std::sync::Arc::new(LuaAgentSpawner::new(script, pool)),
        );
        let task = run_task(&engine, "lua", PolicyOverrides::default()).await;
        (engine, task)
    }

    #[tokio::test]
    async fn the_return_value_is_the_final_after_the_emitted_events() {
        let (engine, task) =
            run(r#"emit_progress("thinking") emit_partial("pa") return { value = prompt:upper(), ok = false }"#).await;
        assert_eq!(task.status(), TaskStatus::Blocked);
        assert_eq!(task.result.clone().unwrap().value, json!("DO IT"));
        let tail = outputs(&engine, task.id, 1).await;
        assert_eq!(tail.len(), 3);
        assert!(tail[2].event.is_final());
    }

    #[tokio::test]
    async fn a_lua_error_fails_the_attempt_with_its_message() {
        let (_, task) = run(r#"error("no can do")"#).await;
        assert_eq!(task.status(), TaskStatus::Failed);
        assert!(task.reason.unwrap().contains("no can do"));
    }
}
