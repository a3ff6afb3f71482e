//! The MCP server driven by rmcp's client (the official Rust SDK; we wrote
//! the server side only): `swarmd mcp` as a child over its stdin and
//! stdout, and `/mcp` over Streamable HTTP, each on the current revision
//! (`server/discover`) and on 2025-11-25 (`initialize`). All run one flow:
//! connect, the listing with the exposed agents' tools and schemas, a
//! fan-out of 20 process tasks collected with `wait`, the agent tools
//! called (result, timeout with progress, a cancelled call cancelling its
//! task), and bad arguments as `isError` results with the daemon's code.
//!
//! The stdio child is started with the admin token; the flow asserts
//! nothing about which caller the relay acts as.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientConfig,
    ClientRequest, JsonObject, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::harness::{Daemon, PATIENCE};

/// `echo` takes typed input and prints its prompt (the arguments as JSON);
/// `shout` takes a prompt only; `nap` outlasts its 2 s tool timeout.
const AGENT_TOOLS: &str = r#"
[agents.echo]
kind = "process"
program = "/bin/cat"
description = "Echoes the files it is given"
expose_as_tool = true
input_schema = { type = "object", required = ["files"], properties = { files = { type = "array", items = { type = "string" } } }, additionalProperties = false }

[agents.shout]
kind = "process"
program = "/bin/cat"
expose_as_tool = true

[agents.nap]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
expose_as_tool = true
tool_timeout_secs = 2

[agents.doze]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
expose_as_tool = true

[mcp]
progress_ms = 200
"#;

/// Speaks `version` and records the progress notifications the daemon sends.
#[derive(Debug, Clone)]
struct Observer {
    version: ProtocolVersion,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl Observer {
    fn new(version: ProtocolVersion) -> Self {
        Observer {
            version,
            progress: Arc::default(),
        }
    }

    /// `server/discover` for a revision without `initialize`, else the handshake.
    fn lifecycle(&self) -> ClientLifecycleMode {
        if self.version.has_initialize() {
            ClientLifecycleMode::Initialize
        } else {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![self.version.clone()],
            }
        }
    }
}

impl ClientHandler for Observer {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(self.version.clone())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

type Client = RunningService<RoleClient, Observer>;

/// One call as plain JSON (`isError`, `structuredContent`, `content`).
async fn call(client: &Client, tool: &'static str, args: Value) -> Value {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let params = CallToolRequestParams::new(tool).with_arguments(args);
    let result = tokio::time::timeout(Duration::from_secs(60), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} answered in time"))
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::to_value(result).unwrap()
}

/// The daemon's `{error, code}` of an `isError` result.
fn refusal(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let text = result["content"][0]["text"].as_str().expect("a text block");
    serde_json::from_str(text).expect("the daemon's JSON error")
}

async fn flow(daemon: &Daemon, client: Client, observer: &Observer) {
    let info = client.peer_info().expect("initialized");
    assert_eq!(info.server_info.as_ref().unwrap().name, "swarmd");
    assert_eq!(info.protocol_version, observer.version);

    // The listing: the exposed agents with their schemas, the others not.
    let tools = client.list_all_tools().await.unwrap();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tool `{name}`"))
    };
    assert!(tools.iter().all(|t| t.name != "cat"));
    let echo = tool("echo");
    assert_eq!(echo.input_schema.get("required"), Some(&json!(["files"])));
    let description = echo.description.as_deref().unwrap();
    assert!(description.starts_with("Echoes the files"), "{description}");
    let output = echo.output_schema.as_ref().expect("an output schema");
    assert_eq!(
        output.get("required"),
        Some(&json!(["task_id", "status", "done"]))
    );
    assert_eq!(
        tool("shout").input_schema.get("required"),
        Some(&json!(["prompt"]))
    );
    tool("spawn_many");

    // Fan out 20 process tasks and collect them.
    let tasks: Vec<Value> = (0..20)
        .map(|n| json!({"agent": "cat", "prompt": json!({"n": n}).to_string()}))
        .collect();
    let spawned = call(&client, "spawn_many", json!({ "tasks": tasks })).await;
    let spawned = &spawned["structuredContent"];
    assert_eq!(spawned["created"], 20, "{spawned}");
    let ids: Vec<Value> = spawned["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_id"].clone())
        .collect();
    let waited = call(
        &client,
        "wait",
        json!({"task_ids": ids, "timeout_secs": 60}),
    )
    .await;
    let waited = &waited["structuredContent"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(true), &json!(20))
    );
    for (n, task) in waited["tasks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            (&task["task_id"], &task["status"]),
            (&ids[n], &json!("pass"))
        );
        assert_eq!(task["value"], json!({ "n": n }), "{task}");
    }

    // The agent tools: the arguments are the input, the result comes back.
    let echoed = call(&client, "echo", json!({"files": ["a.rs", "b.rs"]})).await;
    assert_eq!(echoed["isError"], false, "{echoed}");
    let echoed = &echoed["structuredContent"];
    assert_eq!(
        (&echoed["status"], &echoed["done"]),
        (&json!("pass"), &json!(true))
    );
    assert_eq!(
        echoed["value"],
        json!({"files": ["a.rs", "b.rs"]}),
        "{echoed}"
    );
    assert_eq!(echoed["ok"], true, "{echoed}");
    assert!(echoed["task_id"].as_str().unwrap().starts_with("T-"));
    let shouted = call(&client, "shout", json!({"prompt": "{\"loud\": true}"})).await;
    assert_eq!(shouted["structuredContent"]["value"], json!({"loud": true}));

    // At its timeout the call returns the running task, with progress on the way.
    let before = observer.progress.lock().unwrap().len();
    let napped = call(&client, "nap", json!({"prompt": "zz"})).await;
    let napped = &napped["structuredContent"];
    // Running, or still starting on a loaded machine: not finished.
    assert_eq!(napped["done"], json!(false), "{napped}");
    assert!(
        napped["status"] == "running" || napped["status"] == "queued",
        "{napped}"
    );
    let notes: Vec<_> = observer.progress.lock().unwrap()[before..].to_vec();
    assert!(notes.len() >= 3, "{notes:?}");
    assert!(
        notes.iter().all(|p| p
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("0/1 done"))),
        "{notes:?}"
    );
    let id = napped["task_id"].clone();
    let later = call(
        &client,
        "wait",
        json!({"task_ids": [id], "timeout_secs": 1}),
    )
    .await;
    let status = &later["structuredContent"]["tasks"][0]["status"];
    assert!(status == "running" || status == "queued", "{later}");

    // Bad arguments are isError results with the daemon's code.
    let bad = call(&client, "echo", json!({"files": ["a.rs", 7]})).await;
    let error = refusal(&bad);
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("/files/1"),
        "{error}"
    );
    let error = refusal(&call(&client, "shout", json!({"loud": 1})).await);
    assert_eq!(error["code"], "bad_request", "{error}");
    let error = refusal(&call(&client, "spawn", json!({"agent": "nope", "prompt": "x"})).await);
    assert_eq!(error["code"], "not_found", "{error}");
    let error = refusal(&call(&client, "wait", json!({"task_ids": []})).await);
    assert_eq!(error["code"], "bad_request", "{error}");

    cancelled_call_cancels_its_task(daemon, &client).await;
    client.cancel().await.unwrap();
}

/// A `doze` call the client cancels: the task it started is cancelled.
async fn cancelled_call_cancels_its_task(daemon: &Daemon, client: &Client) {
    let params = CallToolRequestParams::new("doze")
        .with_arguments(JsonObject::from_iter([("prompt".into(), json!("z"))]));
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let running = || async {
        let page = daemon
            .get("/v1/tasks?agent=doze", &daemon.admin)
            .send()
            .await;
        let page: Value = page.unwrap().json().await.unwrap();
        page["tasks"].as_array().unwrap().first().cloned()
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let task = loop {
        if let Some(task) = running().await.filter(|t| t["status"] == "running") {
            break task;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    client
        .peer()
        .notify_cancelled(CancelledNotificationParam::new(
            Some(handle.id),
            Some("the test moves on".to_owned()),
        ))
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap();
    let finished = daemon.finished(id).await;
    assert_eq!(finished["status"], "cancelled", "{finished}");
    let reason = finished["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("`doze` tool was cancelled"), "{finished}");
}

async fn over_http(version: ProtocolVersion) {
    let daemon = Daemon::start_with(AGENT_TOOLS).await;
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", daemon.base))
        .auth_header(daemon.admin.clone());
    let observer = Observer::new(version);
    let transport = StreamableHttpClientTransport::from_config(config);
    let lifecycle = observer.lifecycle();
    let client = observer
        .clone()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap();
    flow(&daemon, client, &observer).await;
}

async fn over_stdio(version: ProtocolVersion) {
    let daemon = Daemon::start_with(AGENT_TOOLS).await;
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("mcp.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["mcp", "--url", &daemon.base])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .env("SWARMD_TOKEN", &daemon.admin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pipes = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let observer = Observer::new(version);
    let lifecycle = observer.lifecycle();
    let client = match observer
        .clone()
        .serve_with_lifecycle(pipes, lifecycle)
        .await
    {
        Ok(client) => client,
        Err(error) => panic!(
            "{error}\nswarmd mcp:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ),
    };
    flow(&daemon, client, &observer).await;
    let exited = tokio::time::timeout(PATIENCE, child.wait()).await;
    assert!(
        exited.is_ok_and(|status| status.is_ok_and(|s| s.success())),
        "swarmd mcp exits when its client closes stdin"
    );
}

#[tokio::test]
async fn rmcp_client_over_http() {
    over_http(ProtocolVersion::LATEST).await;
}

#[tokio::test]
async fn rmcp_client_over_http_on_2025_11_25() {
    over_http(ProtocolVersion::V_2025_11_25).await;
}

#[tokio::test]
async fn rmcp_client_over_stdio() {
    over_stdio(ProtocolVersion::LATEST).await;
}

#[tokio::test]
async fn rmcp_client_over_stdio_on_2025_11_25() {
    over_stdio(ProtocolVersion::V_2025_11_25).await;
}
