//! `lua:<name>` (hint layer, docs/tasks.md, Layers): the configured Lua middleware
//! `<name>`. `before(ctx)` may reject the attempt or add metadata to
//! `ctx.meta`; `after(ctx, result)` may return `{value, ok}`, appended as an
//! override Final that then decides the attempt.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarmd_engine::{Attempt, Ctx, SpawnError, SpawnerAdapter, Worker, WorkerError};
use swarmd_output_store::OutputEvent;

use crate::lua::{BeforeDecision, LuaError, LuaPool, LuaScript, MiddlewareHooks};
use crate::stack::{Observed, SpawnerLayer, wrap_join};

/// Builds [`LuaMiddleware`] wrappers for one checked script.
#[derive(Debug, Clone)]
pub struct LuaMiddlewareLayer {
    key: String,
    script: LuaScript,
    hooks: MiddlewareHooks,
    pool: LuaPool,
}

impl LuaMiddlewareLayer {
    /// Checks `script` (it must define `before` or `after`); the layer's key
    /// is `lua:<script name>`.
    pub fn new(script: LuaScript, pool: LuaPool) -> Result<LuaMiddlewareLayer, LuaError> {
        let hooks = pool.check_middleware(&script)?;
        Ok(LuaMiddlewareLayer {
            key: format!("{}{}", super::LUA_PREFIX, script.name()),
            script,
            hooks,
            pool,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }
}

impl SpawnerLayer for LuaMiddlewareLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(LuaMiddleware {
            inner,
            layer: self.clone(),
        })
    }
}

/// Runs the script's functions around the inner spawner.
#[derive(Debug)]
pub struct LuaMiddleware {
    inner: Arc<dyn SpawnerAdapter>,
    layer: LuaMiddlewareLayer,
}

#[async_trait]
impl SpawnerAdapter for LuaMiddleware {
    async fn spawn(&self, mut attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let layer = &self.layer;
        let script_ctx = script_ctx(&attempt.ctx);
        if layer.hooks.before {
            match layer
                .pool
                .run_before(&layer.script, script_ctx.clone())
                .await
            {
                Ok(BeforeDecision::Proceed { meta }) => attempt.ctx.meta.extend(meta),
                Ok(BeforeDecision::Reject(reason)) => {
                    return Err(SpawnError::Rejected(format!("{}: {reason}", layer.key)));
                }
                Err(e) => return Err(SpawnError::Rejected(format!("{}: {e}", layer.key))),
            }
        }
        let host = Arc::clone(&attempt.host);
        let worker = self.inner.spawn(attempt).await?;
        if !layer.hooks.after {
            return Ok(worker);
        }
        let layer = layer.clone();
        Ok(wrap_join(worker, move |joined| async move {
            if joined == Err(WorkerError::Cancelled) {
                return joined;
            }
            let observed = Observed::read(&*host, &joined).await;
            // An `after` that fails (an error, a limit, a value it cannot
            // return) fails closed, as `before` does: an attempt it was to
            // judge is not passed by its failing to judge it.
            let (value, ok) = match layer
                .pool
                .run_after(&layer.script, script_ctx, observed.to_json())
                .await
            {
                Ok(Some(over)) => (over.value, over.ok),
                Ok(None) => return joined,
                // A worker that failed stays failed; a pool closing for
                // shutdown judged nothing, so the outcome stands.
                Err(_) if joined.is_err() => return joined,
                Err(crate::lua::LuaError::PoolClosed) => return joined,
                Err(e) => {
                    tracing::warn!(layer = %layer.key, error = %e, "after failed; the attempt is blocked");
                    let reason = format!("{}: after failed: {e}", layer.key);
                    (json!({ "error": reason }), false)
                }
            };
            let event = OutputEvent::inline_final(value, ok);
            match host.record_output(&layer.key, vec![event]).await {
                // The override decides, even over a worker that failed.
                Ok(_) => Ok(()),
                Err(e) => Err(WorkerError::Failed(format!(
                    "{}: recording the override failed: {e}",
                    layer.key
                ))),
            }
        }))
    }
}

/// The `ctx` table a script sees.
fn script_ctx(ctx: &Ctx) -> Value {
    json!({
        "task_id": ctx.id.task,
        "attempt": ctx.id.n,
        "agent": ctx.agent,
        "layers": ctx.layers,
        "session": ctx.session,
        "meta": ctx.meta,
    })
}

#[cfg(test)]
mod tests {
    use swarmd_engine::task::{PolicyOverrides, TaskStatus};

    use super::*;
    use crate::lua::LuaLimits;
    use crate::testing::{Act, FinalSpawner, call_log, calls, engine_running, outputs, run_task};

    fn layer(name: &str, source: &str) -> LuaMiddlewareLayer {
        let pool = LuaPool::new(1, LuaLimits::default()).unwrap();
        LuaMiddlewareLayer::new(LuaScript::from_source(name, source).unwrap(), pool).unwrap()
    }

    #[tokio::test]
    async fn a_rejecting_before_stops_the_spawn_with_its_reason() {
        let gate = layer(
            "gate",
            r#"function before(ctx) return { reject = "agent " .. ctx.agent .. " is off" } end"#,
        );
        assert_eq!(gate.key(), "lua:gate");
        let log = call_log();
        let engine = engine_running(
            "writer",
            gate.wrap(FinalSpawner::arc(Act::Final(json!(1), true), &log)),
        );
        let task = run_task(&engine, "writer", PolicyOverrides::default()).await;
        assert_eq!(task.status(), TaskStatus::Failed);
        assert_eq!(
            task.reason.as_deref(),
            Some("rejected: lua:gate: agent writer is off")
        );
        assert!(calls(&log).is_empty());
    }

    #[tokio::test]
    async fn before_metadata_reaches_the_inner_spawner() {
        let tagger = layer(
            "tag",
            r#"function before(ctx) return { meta = { tagged = ctx.attempt } } end"#,
        );
        let base = FinalSpawner::arc(Act::Final(json!(1), true), &call_log());
        let engine = engine_running("a", tagger.wrap(base.clone()));
        run_task(&engine, "a", PolicyOverrides::default()).await;
        let ctx = &base.contexts()[0];
        assert_eq!(ctx.meta.get("tagged"), Some(&json!(1)));
        assert!(
            !ctx.meta.contains_key("worker_handle"),
            "no credential travels in the meta a script sees"
        );
    }

    #[tokio::test]
    async fn an_overriding_after_appends_a_final_that_decides() {
        let fixer = layer(
            "fixer",
            r#"function after(ctx, result)
                 if result.outcome ~= "pass" then
                   return { value = { fixed = result.value, was = result.outcome }, ok = true }
                 end
               end"#,
        );
        for (act, original) in [
            (Act::Final(json!("bad"), false), json!("bad")),
            (Act::Nothing, Value::Null),
        ] {
            let engine = engine_running("a", fixer.wrap(FinalSpawner::arc(act, &call_log())));
            let task = run_task(&engine, "a", PolicyOverrides::default()).await;
            assert_eq!(task.status(), TaskStatus::Pass, "{task:?}");
            let value = task.result.unwrap().value;
            assert_eq!(value["fixed"], original);
            let tail = outputs(&engine, task.id, 1).await;
            assert_eq!(tail.last().unwrap().producer, "lua:fixer");
        }
        // A passing attempt is left alone.
        let engine = engine_running(
            "a",
            fixer.wrap(FinalSpawner::arc(
                Act::Final(json!("good"), true),
                &call_log(),
            )),
        );
        let task = run_task(&engine, "a", PolicyOverrides::default()).await;
        assert_eq!(task.result.unwrap().value, json!("good"));
        assert_eq!(outputs(&engine, task.id, 1).await.len(), 1);
    }

    #[tokio::test]
    async fn a_failing_after_blocks_the_attempt_instead_of_passing_it() {
        let broken = layer(
            "judge",
            r#"function after(ctx, result) error("cannot judge " .. result.outcome) end"#,
        );
        let engine = engine_running(
            "a",
            broken.wrap(FinalSpawner::arc(
                Act::Final(json!("good"), true),
                &call_log(),
            )),
        );
        let task = run_task(&engine, "a", PolicyOverrides::default()).await;
        assert_eq!(task.status(), TaskStatus::Blocked, "{task:?}");
        let value = task.result.unwrap().value;
        assert!(
            value["error"]
                .as_str()
                .is_some_and(|e| e.contains("cannot judge pass")),
            "{value}"
        );
    }
}
