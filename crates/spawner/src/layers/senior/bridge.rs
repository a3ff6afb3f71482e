//! The senior-agent bridge (docs/tasks.md, Senior): a senior question runs as a sub-task
//! of the configured senior agent, and that sub-task's result is the answer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use swarmd_engine::AttemptHost;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_engine::task::{TaskSpec, TaskStatus};
use tracing::Instrument;

use crate::operator::{BridgeError, SeniorBridge};

/// Asks by spawning a sub-task of `agent` under the blocked task, through
/// the blocked attempt's host.
#[derive(Debug, Clone)]
pub struct SeniorAgentBridge {
    host: Arc<dyn AttemptHost>,
    agent: String,
    timeout: Duration,
}

impl SeniorAgentBridge {
    pub fn new(host: Arc<dyn AttemptHost>, agent: &str, timeout: Duration) -> SeniorAgentBridge {
        SeniorAgentBridge {
            host,
            agent: agent.to_owned(),
            timeout,
        }
    }
}

#[async_trait]
impl SeniorBridge for SeniorAgentBridge {
    /// A passing sub-task answers with its value; a blocked one with
    /// `{"ok": false, "value": …}` (the verdict is confirmed); a failed or
    /// cancelled one gives no answer. A sub-task still running when the wait
    /// ends, or whose wait is abandoned, is cancelled.
    async fn ask(&self, attempt: AttemptId, question: Value) -> Result<Value, BridgeError> {
        let mut metadata = Map::new();
        metadata.insert(
            "senior_for".to_owned(),
            json!({ "task_id": attempt.task, "attempt": attempt.n }),
        );
        let spec = TaskSpec {
            agent: self.agent.clone(),
            prompt: render_question(&question),
            input: Some(question),
            metadata: Some(metadata),
            ..TaskSpec::default()
        };
        let sub = self.host.spawn_child(spec).await.map_err(|e| {
            BridgeError::Failed(format!("cannot ask senior agent `{}`: {e}", self.agent))
        })?;
        let mut pending = CancelOnDrop {
            host: Arc::clone(&self.host),
            task: Some(sub.id),
        };
        let done = self
            .host
            .wait_task(sub.id, self.timeout)
            .await
            .map_err(|e| BridgeError::Failed(e.to_string()))?;
        let result = done.result.clone().map(|r| r.value).unwrap_or(Value::Null);
        match done.status() {
            TaskStatus::Pass => {
                pending.task = None;
                Ok(result)
            }
            TaskStatus::Blocked => {
                pending.task = None;
                Ok(json!({ "ok": false, "value": result }))
            }
            TaskStatus::Failed | TaskStatus::Cancelled => {
                pending.task = None;
                let status = done.status();
                let reason = done.reason.unwrap_or_else(|| status.to_string());
                Err(BridgeError::Failed(format!(
                    "senior task {}: {reason}",
                    sub.id
                )))
            }
            TaskStatus::Queued | TaskStatus::Running => Err(BridgeError::Timeout),
        }
    }
}

/// The sub-task's prompt: what is asked, with the question as JSON.
fn render_question(question: &Value) -> String {
    let body = serde_json::to_string_pretty(question).unwrap_or_else(|_| question.to_string());
    format!(
        "A worker finished a task but reported that it could not do it (ok=false). \
         As the senior, review the question below. Answer with guidance or a corrected \
         result; answer {{\"ok\": false}} to confirm that the task stays blocked.\n\n{body}\n"
    )
}

/// Cancels the sub-task when the question is dropped or left unanswered.
struct CancelOnDrop {
    host: Arc<dyn AttemptHost>,
    task: Option<TaskId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let host = Arc::clone(&self.host);
        let cancel = async move {
            let reason = Some("the senior question was abandoned".to_owned());
            if let Err(e) = host.cancel_task(task, reason).await {
                tracing::debug!(task_id = %task, error = %e, "senior sub-task was not cancelled");
            }
        };
        runtime.spawn(cancel.in_current_span());
    }
}
