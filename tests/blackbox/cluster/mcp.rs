//! The MCP tools that act on a live task, called on a node that does not
//! hold it (rmcp's client on node B's `/mcp`): a SubAgent's
//! `worker_prompt`, `worker_progress` and `worker_submit` by the handle of
//! an attempt node A runs, and `cancel` of another of A's tasks, each
//! served by A through its REST route.

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

/// Leaves its handle in the shared directory, then waits until the test
/// says it is done; its result comes through MCP.
const HANDED: &str = r#"
[agents.handed]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf '%s' "$SWARM_WORKER_HANDLE" > @DIR@/handle.tmp && mv @DIR@/handle.tmp @DIR@/handle
while [ ! -e @DIR@/done ]; do sleep 0.05; done
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.endless]
kind = "process"
program = "/bin/sleep"
args = ["60"]
stdin = "none"
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
    let task = create(a, json!({"agent": "handed", "prompt": "through mcp"})).await;
    let other = create(a, json!({"agent": "endless", "prompt": "q"})).await;
    let handle_file = cluster.shared().join("handle");
    let started = std::time::Instant::now();
    while !handle_file.exists() {
        assert!(started.elapsed() < PATIENCE, "the attempt did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let handle = std::fs::read_to_string(&handle_file).unwrap();

    let config =
        StreamableHttpClientTransportConfig::with_uri(b.url("/mcp")).auth_header(b.admin.clone());
    let client: Client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap();
    let prompt = call(&client, "worker_prompt", json!({"worker_handle": handle})).await;
    assert_eq!(prompt["prompt"], "through mcp", "{prompt}");
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
    std::fs::write(cluster.shared().join("done"), "").unwrap();

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

    let cancelled = call(&client, "cancel", json!({"task_id": other})).await;
    assert_eq!(cancelled["task"]["status"], "cancelled", "{cancelled}");
    assert_eq!(finished(a, &other).await["status"], "cancelled");
    client.cancel().await.unwrap();
}
