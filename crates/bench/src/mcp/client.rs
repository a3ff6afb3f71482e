//! The MCP side of the benchmark: one rmcp client session on the daemon's
//! `/mcp` (the same SDK the daemon serves with), and the three tools the
//! benchmark calls — `spawn`, `spawn_many`, `wait` — with their answers read
//! from the structured content. A refused call (`isError: true`) comes back
//! as its daemon error code, a protocol or transport fault as `protocol`.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, JsonObject, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::cli::Revision;

/// Seconds one `wait` call may last (the daemon's bound is 600).
pub(crate) const WAIT_TIMEOUT_SECS: u64 = 120;

/// A connected MCP client session.
#[derive(Debug)]
pub(crate) struct McpClient {
    service: RunningService<RoleClient, ClientConfig>,
}

/// One task's state in a `wait` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waited {
    pub task_id: String,
    pub status: String,
}

impl McpClient {
    /// Connects to `<base>/mcp` with `bearer`, asking for `revision`.
    pub(crate) async fn connect(
        base: &str,
        bearer: &str,
        revision: Revision,
    ) -> anyhow::Result<McpClient> {
        let url = format!("{base}/mcp");
        let config = StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(bearer);
        let transport = StreamableHttpClientTransport::from_config(config);
        // The latest revision has no `initialize`: the client discovers the
        // server (`server/discover`) and sends its metadata with each request.
        let started = match revision {
            Revision::Latest => {
                let lifecycle = ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                };
                ClientConfig::default()
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
            }
            Revision::Initialize => {
                ClientConfig::default()
                    .with_protocol_version(ProtocolVersion::V_2025_11_25)
                    .serve(transport)
                    .await
            }
        };
        let service =
            started.map_err(|e| anyhow::anyhow!("cannot open an MCP session on {url}: {e}"))?;
        Ok(McpClient { service })
    }

    /// The protocol revision the daemon agreed to.
    pub(crate) fn revision(&self) -> String {
        self.service
            .peer()
            .peer_info()
            .map_or_else(|| "?".to_owned(), |info| info.protocol_version.to_string())
    }

    /// `spawn`: the new task's id, or the error code.
    pub(crate) async fn spawn(&self, agent: &str, prompt: &str) -> Result<String, String> {
        let answer = self
            .call("spawn", json!({"agent": agent, "prompt": prompt}))
            .await?;
        spawned_id(&answer).ok_or_else(|| "bad_answer".to_owned())
    }

    /// `spawn_many` of `count` tasks: one entry per task, its id or its
    /// error code; the call's own failure as `Err`.
    pub(crate) async fn spawn_many(
        &self,
        agent: &str,
        prompt: &str,
        count: usize,
    ) -> Result<Vec<Result<String, String>>, String> {
        let task = json!({"agent": agent, "prompt": prompt});
        let tasks = vec![task; count];
        let answer = self.call("spawn_many", json!({"tasks": tasks})).await?;
        let results = spawn_many_results(&answer).ok_or_else(|| "bad_answer".to_owned())?;
        if results.len() != count {
            return Err("bad_answer".to_owned());
        }
        Ok(results)
    }

    /// `wait` in mode `all` for `task_ids`: every task's status, or the
    /// error code (`wait_timeout` when the mode was not met in time).
    pub(crate) async fn wait_all(&self, task_ids: &[String]) -> Result<Vec<Waited>, String> {
        let arguments = json!({
            "task_ids": task_ids,
            "mode": "all",
            "timeout_secs": WAIT_TIMEOUT_SECS,
        });
        let answer = self.call("wait", arguments).await?;
        if answer["done"] != Value::Bool(true) {
            return Err("wait_timeout".to_owned());
        }
        waited_tasks(&answer).ok_or_else(|| "bad_answer".to_owned())
    }

    /// Ends the MCP session.
    pub(crate) async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.service.cancel()).await;
    }

    /// Calls a tool; its structured answer, or an error code.
    async fn call(&self, tool: &'static str, arguments: Value) -> Result<Value, String> {
        let Value::Object(arguments) = arguments else {
            return Err("bad_arguments".to_owned());
        };
        let params = CallToolRequestParams::new(tool).with_arguments(JsonObject::from(arguments));
        let result = self
            .service
            .peer()
            .call_tool(params)
            .await
            .map_err(|error| {
                eprintln!("swarmd-bench: MCP {tool}: {error}");
                "protocol".to_owned()
            })?;
        tool_answer(result)
    }
}

/// The JSON of a tool result: its structured content (else its first text
/// block), or the daemon's error code when it is an error result.
pub(crate) fn tool_answer(result: CallToolResult) -> Result<Value, String> {
    let text = || {
        result
            .content
            .iter()
            .find_map(|block| block.as_text().map(|t| t.text.clone()))
    };
    let value = match &result.structured_content {
        Some(value) => value.clone(),
        None => text()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null),
    };
    if result.is_error == Some(true) {
        let code = value["code"].as_str().unwrap_or("tool_error");
        return Err(format!("tool:{code}"));
    }
    Ok(value)
}

/// The `task_id` of a `spawn` answer.
pub(crate) fn spawned_id(answer: &Value) -> Option<String> {
    answer["task_id"].as_str().map(str::to_owned)
}

/// The `results` of a `spawn_many` answer: a task id or an error code each.
pub(crate) fn spawn_many_results(answer: &Value) -> Option<Vec<Result<String, String>>> {
    let results = answer["results"].as_array()?;
    let read = |entry: &Value| match (entry["ok"].as_bool(), entry["task_id"].as_str()) {
        (Some(true), Some(id)) => Ok(id.to_owned()),
        _ => Err(format!(
            "spawn:{}",
            entry["code"].as_str().unwrap_or("refused")
        )),
    };
    Some(results.iter().map(read).collect())
}

/// The tasks of a `wait` answer.
pub(crate) fn waited_tasks(answer: &Value) -> Option<Vec<Waited>> {
    answer["tasks"]
        .as_array()?
        .iter()
        .map(|task| {
            Some(Waited {
                task_id: task["task_id"].as_str()?.to_owned(),
                status: task["status"].as_str()?.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;

    use super::*;

    #[test]
    fn an_error_result_gives_the_daemon_code() {
        let body = json!({"error": "unknown agent `nope`", "code": "not_found"});
        let result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
        assert_eq!(tool_answer(result), Err("tool:not_found".to_owned()));
    }

    #[test]
    fn structured_content_is_preferred_and_text_is_the_fallback() {
        let answer = json!({"task_id": "T-1", "status": "queued"});
        let structured = CallToolResult::structured(answer.clone());
        assert_eq!(tool_answer(structured).as_ref(), Ok(&answer));
        let text_only = CallToolResult::success(vec![ContentBlock::text(answer.to_string())]);
        let read = tool_answer(text_only).expect("not an error");
        assert_eq!(spawned_id(&read).as_deref(), Some("T-1"));
    }

    #[test]
    fn spawn_many_entries_are_ids_or_codes() {
        let answer = json!({"created": 1, "results": [
            {"ok": true, "task_id": "T-1", "status": "queued"},
            {"ok": false, "error": "unknown agent", "code": "not_found"},
        ]});
        assert_eq!(
            spawn_many_results(&answer),
            Some(vec![
                Ok("T-1".to_owned()),
                Err("spawn:not_found".to_owned())
            ])
        );
        assert_eq!(spawn_many_results(&json!({})), None);
    }

    #[test]
    fn wait_tasks_need_an_id_and_a_status() {
        let answer = json!({"done": true, "finished": 1, "tasks": [
            {"task_id": "T-1", "agent": "lua", "status": "pass", "value": "x", "ok": true},
        ]});
        assert_eq!(
            waited_tasks(&answer),
            Some(vec![Waited {
                task_id: "T-1".to_owned(),
                status: "pass".to_owned()
            }])
        );
        assert_eq!(waited_tasks(&json!({"tasks": [{"task_id": "T-1"}]})), None);
    }
}
