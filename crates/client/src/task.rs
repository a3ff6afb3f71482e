//! `swarmd task list|spawn|get|wait|cancel`: the task routes (docs/protocol.md, Task routes).

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use swarmd_types::ids::TaskId;
use swarmd_types::task::TaskStatus;

use super::{ApiClient, ClientError, REQUEST_TIMEOUT};

/// Extra time a client waits beyond what it asked the server to wait.
const WAIT_MARGIN: Duration = Duration::from_secs(30);
/// The longest wait the daemon holds one request for (`MAX_WAIT_SECS`);
/// a longer one is asked for again until its time is up.
const SERVER_WAIT_SECS: u64 = 300;

/// Whether a task's answer names a finished task.
fn finished(task: &Value) -> bool {
    TaskStatus::ALL
        .into_iter()
        .any(|status| status.is_terminal() && task["status"] == status.as_str())
}

/// The body of `POST /v1/tasks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpawnRequest {
    /// The configured agent to run; empty with `continue_from` means the
    /// previous task's.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// The finished task this one continues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continue_from: Option<TaskId>,
    /// The task's prompt.
    pub prompt: String,
    /// Optional system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Optional structured input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Hint layers for this task.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
    /// Free-form metadata kept with the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Policy fields overriding the configured defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Value>,
    /// Sent as the `Idempotency-Key` header, not in the body.
    #[serde(skip)]
    pub idempotency_key: Option<String>,
    /// Wait up to this many seconds for the task to finish.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_secs: Option<u64>,
}

/// The query of `GET /v1/tasks`; an absent field is no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Created at or after this unix millisecond.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Text the prompt contains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The last task of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<TaskId>,
}

impl ApiClient {
    /// `GET /v1/tasks`: a page of tasks, newest first, `{tasks, next?}`.
    ///
    /// # Errors
    /// `Request` on transport failure, `Status` for a refusal.
    pub async fn list_tasks(&self, query: &TaskQuery) -> Result<Value, ClientError> {
        let url = self.url("/v1/tasks");
        let request = self.get("/v1/tasks").query(query).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }

    /// `GET /v1/agents`: the configured agents, `{agents, window, truncated}`.
    ///
    /// # Errors
    /// As `list_tasks`.
    pub async fn list_agents(&self) -> Result<Value, ClientError> {
        let url = self.url("/v1/agents");
        self.send_json(self.get("/v1/agents").timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `GET /v1/operators`: the operator sessions (admin only).
    ///
    /// # Errors
    /// As `list_tasks`.
    pub async fn list_sessions(&self) -> Result<Value, ClientError> {
        let url = self.url("/v1/operators");
        self.send_json(self.get("/v1/operators").timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `GET /v1/status`: the daemon's version, store, load and, on a
    /// cluster, its live nodes.
    ///
    /// # Errors
    /// As `list_tasks`.
    pub async fn status(&self) -> Result<Value, ClientError> {
        let url = self.url("/v1/status");
        self.send_json(self.get("/v1/status").timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `POST /v1/tasks`: creates a task; with `wait_secs`, the answer is the
    /// finished task if it finished in time (past the daemon's 300 s, by
    /// waiting again for the rest).
    ///
    /// # Errors
    /// `Request` on transport failure, `Status` for a refusal.
    pub async fn create_task(&self, request: &SpawnRequest) -> Result<Value, ClientError> {
        let url = self.url("/v1/tasks");
        let wait = request.wait_secs.unwrap_or(0);
        let started = std::time::Instant::now();
        let timeout = REQUEST_TIMEOUT + Duration::from_secs(wait.min(SERVER_WAIT_SECS));
        let mut builder = self.post("/v1/tasks").json(request).timeout(timeout);
        if let Some(key) = &request.idempotency_key {
            builder = builder.header("Idempotency-Key", key.as_str());
        }
        let answer = self.send_json(builder, &url).await?;
        let left = wait.saturating_sub(started.elapsed().as_secs());
        let id = answer["task_id"].as_str().or(answer["id"].as_str());
        match id.and_then(|id| id.parse::<TaskId>().ok()) {
            Some(id) if wait > SERVER_WAIT_SECS && left > 0 && !finished(&answer) => {
                self.wait_task(&id, left).await
            }
            _ => Ok(answer),
        }
    }

    /// `GET /v1/tasks/{id}`: the task with its attempts.
    ///
    /// # Errors
    /// As `spawn_task`.
    pub async fn get_task(&self, id: &TaskId) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{id}");
        let url = self.url(&path);
        self.send_json(self.get(&path).timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `GET /v1/tasks/{id}/wait`: long-polls until the task is terminal or
    /// `timeout_secs` pass; the task either way. The daemon holds one
    /// request at most 300 s, so a longer wait asks again until its time
    /// is up.
    ///
    /// # Errors
    /// As `spawn_task`.
    pub async fn wait_task(&self, id: &TaskId, timeout_secs: u64) -> Result<Value, ClientError> {
        let started = std::time::Instant::now();
        loop {
            let left = timeout_secs.saturating_sub(started.elapsed().as_secs());
            let now = left.min(SERVER_WAIT_SECS);
            let path = format!("/v1/tasks/{id}/wait?timeout_secs={now}");
            let url = self.url(&path);
            let timeout = Duration::from_secs(now) + WAIT_MARGIN;
            let asked = std::time::Instant::now();
            let task = self
                .send_json(self.get(&path).timeout(timeout), &url)
                .await?;
            // An answer well before its time, unfinished, is a daemon
            // ending the wait (shutting down): not asked again.
            let cut_short = asked.elapsed() + Duration::from_secs(1) < Duration::from_secs(now);
            if finished(&task) || left <= SERVER_WAIT_SECS || cut_short {
                return Ok(task);
            }
        }
    }

    /// `POST /v1/tasks/{id}/cancel`, with the reason the task records.
    ///
    /// # Errors
    /// As `spawn_task`.
    pub async fn cancel_task(
        &self,
        id: &TaskId,
        reason: Option<&str>,
    ) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{id}/cancel");
        let url = self.url(&path);
        let body = match reason {
            Some(reason) => serde_json::json!({ "reason": reason }),
            None => serde_json::json!({}),
        };
        let request = self.post(&path).json(&body).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }
}
