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
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker};
use swarmd_output_store::OutputEvent;

pub use bridge::SeniorAgentBridge;

use crate::operator::{SeniorBridge, SessionDirectory};
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

/// Builds [`SeniorEscalation`] wrappers; `sessions` finds the sessions
/// that can answer.
#[derive(Debug, Clone)]
pub struct SeniorEscalationLayer {
    pub settings: SeniorSettings,
    pub sessions: Arc<dyn SessionDirectory>,
}

impl SpawnerLayer for SeniorEscalationLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(SeniorEscalation {
            inner,
            layer: self.clone(),
        })
    }
}

/// Escalates blocked verdicts after the inner join completes.
#[derive(Debug)]
pub struct SeniorEscalation {
    inner: Arc<dyn SpawnerAdapter>,
    layer: SeniorEscalationLayer,
}

#[async_trait]
impl SpawnerAdapter for SeniorEscalation {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        // Sessions come and go while an attempt runs: the senior is chosen
        // when the question arises, from what the attempt was started with.
        let ctx = &attempt.ctx;
        let sessions = &self.layer.sessions;
        let asker = Asker {
            agent: ctx.agent.clone(),
            owner: ctx
                .session
                .or(ctx.operator_sid)
                .and_then(|sid| sessions.session(&sid))
                .and_then(|s| s.senior),
            settings: self.layer.settings.clone(),
            sessions: Arc::clone(sessions),
        };
        let host = Arc::clone(&attempt.host);
        let worker = self.inner.spawn(attempt).await?;
        let cancel = worker.cancel_token();
        Ok(wrap_join(worker, move |joined| async move {
            if joined.is_ok() {
                let escalation = Escalation { host: &host };
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
    sessions: Arc<dyn SessionDirectory>,
}

impl Asker {
    /// The senior, in the order of docs/tasks.md, Senior. A task of the senior agent
    /// itself is not escalated to it.
    fn choose(&self, host: &Arc<dyn AttemptHost>) -> Option<Arc<dyn SeniorBridge>> {
        let settings = &self.settings;
        if let Some(agent) = settings.agent.as_deref().filter(|a| *a != self.agent) {
            let bridge = SeniorAgentBridge::new(Arc::clone(host), agent, settings.timeout);
            return Some(Arc::new(bridge));
        }
        if let Some(senior) = self.sessions.by_role(SENIOR_ROLE).and_then(|s| s.senior) {
            return Some(senior);
        }
        self.owner.clone()
    }
}

/// One escalation of one attempt.
struct Escalation<'a> {
    host: &'a Arc<dyn AttemptHost>,
}

impl Escalation<'_> {
    async fn run(&self, asker: &Asker) {
        let Ok(Some(record)) = self.host.last_final().await else {
            return;
        };
        let OutputEvent::Final { content, ok: false } = record.event else {
            return;
        };
        let Some(senior) = asker.choose(self.host) else {
            return;
        };
        let id = self.host.id();
        let timeout = asker.settings.timeout;
        let original = content_value(content);
        let question = self.question(&original).await;
        self.host.publish(Event::SeniorAsked {
            task_id: id.task,
            attempt: id.n,
            question: question.clone(),
        });
        let asked = senior.ask(id, question);
        let answer = match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "no senior answer; the verdict stands");
                return;
            }
            Err(_) => {
                tracing::info!("senior timed out; the verdict stands");
                return;
            }
        };
        self.host.publish(Event::SeniorAnswered {
            task_id: id.task,
            attempt: id.n,
            answer: answer.clone(),
        });
        let keep_blocked = answer.get("ok") == Some(&Value::Bool(false));
        let over = json!({ "original": original, "senior_answer": answer });
        let appended = self
            .host
            .record_output(
                PRODUCER,
                vec![OutputEvent::inline_final(over, !keep_blocked)],
            )
            .await;
        if let Err(e) = appended {
            tracing::warn!(error = %e, "could not append the senior's override");
        }
    }

    /// `{reason, value, task}`: why it is blocked, the worker's value, and
    /// the task as the senior needs it.
    async fn question(&self, value: &Value) -> Value {
        let reason = ["reason", "error"]
            .iter()
            .find_map(|key| value.get(key).and_then(Value::as_str))
            .unwrap_or("the worker's final result has ok=false");
        let id = self.host.id();
        let task = match self.host.task().await {
            Ok(task) => json!({
                "id": task.id, "agent": task.agent, "prompt": task.prompt,
                "system": task.system, "input": task.input, "attempt": id.n,
            }),
            Err(_) => json!({ "id": id.task, "attempt": id.n }),
        };
        json!({ "reason": reason, "value": value, "task": task })
    }
}
