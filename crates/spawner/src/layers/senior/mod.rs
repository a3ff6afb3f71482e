//! `senior_escalation` (hint layer, docs/tasks.md, Layers; Senior): when an attempt ends
//! with a Final that is not ok, asks the senior `{reason, value, task}` and,
//! on an answer, appends an override Final `{original, senior_answer}`.
//!
//! The senior is, in order: the configured senior agent (the question runs
//! as its sub-task, see [`SeniorAgentBridge`]); a live session that claimed
//! the role name `senior`; the session that owns the task. With no senior,
//! no answer in time, or a cancelled attempt, the verdict stands.

mod bridge;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarmd_engine::event::Event;
use swarmd_engine::ids::TaskId;
use swarmd_engine::operator::SeniorBridge;
use swarmd_engine::{Ctx, Engine, SpawnError, SpawnerAdapter, Worker, WorkerCredential};
use swarmd_output_store::OutputEvent;

pub use bridge::SeniorAgentBridge;

use crate::stack::{SpawnerLayer, content_value, wrap_join};

/// Producer name of the override Final.
const PRODUCER: &str = "senior_escalation";
/// The session role name a senior claims at login.
pub const SENIOR_ROLE: &str = "senior";

/// `[senior]` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeniorSettings {
    /// An agent whose sub-task answers senior questions.
    pub agent: Option<String>,
    /// How long an answer may take before the verdict stands.
    pub timeout: Duration,
}

impl Default for SeniorSettings {
    fn default() -> Self {
        SeniorSettings {
            agent: None,
            timeout: Duration::from_secs(600),
        }
    }
}

/// Builds [`SeniorEscalation`] wrappers.
#[derive(Debug, Clone)]
pub struct SeniorEscalationLayer {
    pub settings: SeniorSettings,
}

impl SpawnerLayer for SeniorEscalationLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(SeniorEscalation {
            inner,
            settings: self.settings.clone(),
        })
    }
}

/// Escalates blocked verdicts after the inner join completes.
#[derive(Debug)]
pub struct SeniorEscalation {
    inner: Arc<dyn SpawnerAdapter>,
    settings: SeniorSettings,
}

#[async_trait]
impl SpawnerAdapter for SeniorEscalation {
    async fn spawn(
        &self,
        engine: &Engine,
        ctx: Ctx,
        task_id: TaskId,
        attempt: u32,
        token: WorkerCredential,
    ) -> Result<Box<dyn Worker>, SpawnError> {
        // Sessions come and go while an attempt runs: the senior is chosen
        // when the question arises, from what the attempt was started with.
        let asker = Asker {
            agent: ctx.agent.clone(),
            owner: ctx.operator.as_ref().and_then(|s| s.senior.clone()),
            settings: self.settings.clone(),
        };
        let worker = self
            .inner
            .spawn(engine, ctx, task_id, attempt, token)
            .await?;
        let cancel = worker.cancel_token();
        let engine = engine.clone();
        Ok(wrap_join(worker, move |joined| async move {
            if joined.is_ok() {
                let escalation = Escalation {
                    engine: &engine,
                    task_id,
                    attempt,
                };
                tokio::select! {
                    () = escalation.run(&asker) => {}
                    () = cancel.cancelled() => {}
                }
            }
            joined
        }))
    }
}

/// What choosing a senior needs to know of the attempt.
struct Asker {
    agent: String,
    owner: Option<Arc<dyn SeniorBridge>>,
    settings: SeniorSettings,
}

impl Asker {
    /// The senior, in the order of docs/tasks.md, Senior. A task of the senior agent
    /// itself is not escalated to it.
    fn choose(&self, engine: &Engine) -> Option<Arc<dyn SeniorBridge>> {
        let settings = &self.settings;
        if let Some(agent) = settings.agent.as_deref().filter(|a| *a != self.agent) {
            let bridge = SeniorAgentBridge::new(engine.clone(), agent, settings.timeout);
            return Some(Arc::new(bridge));
        }
        if let Some(senior) = engine
            .operators()
            .by_role(SENIOR_ROLE)
            .and_then(|s| s.senior)
        {
            return Some(senior);
        }
        self.owner.clone()
    }
}

/// One escalation of one attempt.
struct Escalation<'a> {
    engine: &'a Engine,
    task_id: TaskId,
    attempt: u32,
}

impl Escalation<'_> {
    async fn run(&self, asker: &Asker) {
        let Ok(Some(record)) = self.engine.last_final(self.task_id, self.attempt).await else {
            return;
        };
        let OutputEvent::Final { content, ok: false } = record.event else {
            return;
        };
        let Some(senior) = asker.choose(self.engine) else {
            return;
        };
        let timeout = asker.settings.timeout;
        let original = content_value(content);
        let question = self.question(&original).await;
        self.engine.publish(Event::SeniorAsked {
            task_id: self.task_id,
            attempt: self.attempt,
            question: question.clone(),
        });
        let asked = senior.ask(self.task_id, self.attempt, question);
        let answer = match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::info!(task_id = %self.task_id, attempt = self.attempt, error = %e, "no senior answer; the verdict stands");
                return;
            }
            Err(_) => {
                tracing::info!(task_id = %self.task_id, attempt = self.attempt, "senior timed out; the verdict stands");
                return;
            }
        };
        self.engine.publish(Event::SeniorAnswered {
            task_id: self.task_id,
            attempt: self.attempt,
            answer: answer.clone(),
        });
        let keep_blocked = answer.get("ok") == Some(&Value::Bool(false));
        let over = json!({ "original": original, "senior_answer": answer });
        let appended = self
            .engine
            .record_output(
                self.task_id,
                self.attempt,
                PRODUCER,
                vec![OutputEvent::inline_final(over, !keep_blocked)],
            )
            .await;
        if let Err(e) = appended {
            tracing::warn!(task_id = %self.task_id, attempt = self.attempt, error = %e, "could not append the senior's override");
        }
    }

    /// `{reason, value, task}`: why it is blocked, the worker's value, and
    /// the task as the senior needs it.
    async fn question(&self, value: &Value) -> Value {
        let reason = ["reason", "error"]
            .iter()
            .find_map(|key| value.get(key).and_then(Value::as_str))
            .unwrap_or("the worker's final result has ok=false");
        let task = match self.engine.get_task(self.task_id).await {
            Ok(Some(task)) => json!({
                "id": task.id, "agent": task.agent, "prompt": task.prompt,
                "system": task.system, "input": task.input, "attempt": self.attempt,
            }),
            _ => json!({ "id": self.task_id, "attempt": self.attempt }),
        };
        json!({ "reason": reason, "value": value, "task": task })
    }
}
