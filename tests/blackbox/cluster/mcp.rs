//! The MCP tools that act on a live task, called on a node that does not
//! hold it (rmcp's client on node B's `/mcp`): a SubAgent's
//! `worker_prompt`, `worker_progress` and `worker_submit` by the handle of
//! an attempt node A runs, the upstream aliases `mse_worker_fetch` (by step
//! id) and `mse_worker_submit` (with a report) for another, and `cancel`
//! of a third, each served by A through its REST route.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::{Cluster, create, finished};
use crate::harness::PATIENCE;

/// `handed` leaves its handle in the shared directory as `handle.<prompt>`,
/// then waits until the test says it is done (`done.<prompt>`); its result
/// comes through MCP.
const HANDED: &str = r#"
[agents.handed]
kind = "process"
program = "/bin/sh"
args = ["-c", """
p=$(cat)
printf '%s' "$SWARM_WORKER_HANDLE" > "@DIR@/handle.$p.tmp" && mv "@DIR@/handle.$p.tmp" "@DIR@/handle.$p"
while [ ! -e "@DIR@/done.$p" ]; do sleep 0.05; done
"""]
env = { PATH = "/usr/bin:/bin" }

[agents.endless]
kind = "process"
program = "/bin/sleep"
args = ["60"]
stdin = "none"

[mcp]
upstream_aliases = true
"#;

type Client = RunningService<RoleClient, ()>;

/// One call's structured answer; panics on a refusal.
async fn call(client: &Client, tool: &'static str, args: Value) -> Value {
    let result = try_call(client, tool, args).await;
    assert_ne!(result["isError"], true, "{tool}: {result}");
    result["structuredContent"].clone()
}

/// One call's result as JSON (`isError`, `structuredContent`, `content`).
async fn try_call(client: &Client, tool: &'static str, args: Value) -> Value {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let params = CallToolRequestParams::new(tool).with_arguments(args);
    let result = tokio::time::timeout(Duration::from_secs(30), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} answered in time"))
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::to_value(result).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_tools_and_cancel_on_another_node_act_on_the_owners_tasks() {
    let cluster = Cluster::start(2, HANDED).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let task = create(a, json!({"agent": "handed", "prompt": "mcp"})).await;
    let upstream = create(a, json!({"agent": "handed", "prompt": "mse"})).await;
    let other = create(a, json!({"agent": "endless", "prompt": "q"})).await;
    let handle = handle_of(&cluster, "mcp").await;

    let config =
        StreamableHttpClientTransportConfig::with_uri(b.url("/mcp")).auth_header(b.admin.clone());
    let client: Client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap();
    let prompt = call(&client, "worker_prompt", json!({"worker_handle": handle})).await;
    assert_eq!(prompt["prompt"], "mcp", "{prompt}");
    assert_eq!(prompt["task_id"], task.as_str(), "{prompt}");
    let reported = call(
        &client,
        "worker_progress",
        json!({"worker_handle": handle, "stage": "via-mcp", "text": "partial"}),
    )
    .await;
    assert!(reported["seq"].as_u64().unwrap() >= 1, "{reported}");
    let ack = call(
        &client,
        "worker_submit",
        json!({"worker_handle": handle, "value": {"answer": 7}}),
    )
    .await;
    assert_eq!(ack["accepted"], true, "{ack}");
    // A second result is the owner's refusal, relayed with its code.
    let again = try_call(
        &client,
        "worker_submit",
        json!({"worker_handle": handle, "value": {"answer": 8}}),
    )
    .await;
    assert_eq!(again["isError"], true, "{again}");
    let text = again["content"][0]["text"].as_str().unwrap();
    let refusal: Value = serde_json::from_str(text).unwrap();
    assert_eq!(refusal["code"], "already_final", "{refusal}");
    std::fs::write(cluster.shared().join("done.mcp"), "").unwrap();

    let view = finished(b, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", a.log());
    assert_eq!(view["result"]["value"], json!({"answer": 7}), "{view}");
    let kinds: Vec<Value> = b
        .output(&task)
        .await
        .iter()
        .map(|r| r["event"]["type"].clone())
        .collect();
    assert_eq!(kinds, [json!("progress"), json!("partial"), json!("final")]);

    // The upstream aliases, the task named by its step id.
    let handle = handle_of(&cluster, "mse").await;
    let step = upstream.replacen("T-", "ST-", 1);
    let prompt = call(
        &client,
        "mse_worker_fetch",
        json!({"worker_handle": handle, "task_id": step}),
    )
    .await;
    assert_eq!(prompt["prompt"], "mse", "{prompt}");
    let submitted = call(
        &client,
        "mse_worker_submit",
        json!({"worker_handle": handle, "body": "done\n", "stats": {"turns": 3}}),
    )
    .await;
    assert_eq!(submitted["submitted"], true, "{submitted}");
    std::fs::write(cluster.shared().join("done.mse"), "").unwrap();
    let view = finished(b, &upstream).await;
    assert_eq!(view["status"], "pass", "{view}");
    assert_eq!(view["result"]["value"], "done", "{view}");
    let stages: Vec<Value> = b
        .output(&upstream)
        .await
        .iter()
        .map(|r| r["event"]["stage"].clone())
        .collect();
    assert_eq!(stages[0], "stats", "{stages:?}");

    let cancelled = call(&client, "cancel", json!({"task_id": other})).await;
    assert_eq!(cancelled["task"]["status"], "cancelled", "{cancelled}");
    assert_eq!(finished(a, &other).await["status"], "cancelled");
    client.cancel().await.unwrap();
}

/// The handle the `handed` attempt with `prompt` left.
async fn handle_of(cluster: &Cluster, prompt: &str) -> String {
    let file = cluster.shared().join(format!("handle.{prompt}"));
    let started = std::time::Instant::now();
    while !file.exists() {
        assert!(
            started.elapsed() < PATIENCE,
            "the {prompt} attempt did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::read_to_string(&file).unwrap()
}

/// The upstream client's `mse_pending_wait` on node B for a session whose
/// spawn frames node A parked: the wait makes B the session's home, as the
/// `frames` tool does, so A's frames reach it; and `mse_ack` says whether
/// the reply reached a waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mse_pending_wait_on_another_node_takes_the_sessions_frames() {
    let config = format!("{}\n[mcp]\nupstream_aliases = true\n", super::QUICK);
    let cluster = Cluster::start(2, &config).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;
    let task = super::sessions::delegated(a, &main_ai, "parked on a").await;

    let config = StreamableHttpClientTransportConfig::with_uri(b.url("/mcp"))
        .auth_header(main_ai.token.clone());
    let client: Client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap();
    let pending = call(
        &client,
        "mse_pending_wait",
        json!({"sid": main_ai.sid, "timeout_ms": 20_000}),
    )
    .await;
    assert_eq!(pending["timed_out"], false, "{pending}");
    assert_eq!(pending["type"], "spawn", "{pending}");
    assert_eq!(pending["payload"]["task_id"], task.as_str(), "{pending}");

    let acked = call(
        &client,
        "mse_ack",
        json!({"sid": main_ai.sid, "req_id": pending["req_id"], "kind": "spawn_ack",
               "value": "done on b"}),
    )
    .await;
    assert_eq!(acked, json!({"sent": true, "delivered": true}));
    let done = super::finished(a, &task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], "done on b", "{done}");
}
