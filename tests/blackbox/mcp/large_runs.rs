//! A flow whose step returns a large result (600 KiB) read through the flow
//! tools with the official Python SDK over Streamable HTTP: the flow's own
//! tool (`flow_big`), `start_run`, `run` and `cancel_run` answer within the
//! SDK's 1 MiB bound on a server-sent event, each large value (the run's
//! result, the step's output) cut with a marker naming `GET /v1/runs/{id}`,
//! which still gives the run whole; and the `run_done` frames the
//! session that started the runs pops through `frames` are cut alike.

use serde_json::{Value, json};

use super::MODERN;
use super::large_values::{answered, assert_cut, assert_cut_to, run_script};
use crate::daemon::Swarmd;
use crate::flows::{AGENTS, step, write_files};

/// The size of the `big` agent's result, in characters.
const BIG: usize = 600 * 1024;

const SCRIPT: &str = r#"
async def main():
    transport, mode = sys.argv[1:3]
    base = transport.partition(":")[2]
    headers = {"Authorization": "Bearer " + os.environ["SWARMD_TOKEN"]}
    http = create_mcp_http_client(headers=headers)
    seen = {}
    async with Client(streamable_http_client(base + "/mcp", http_client=http), mode=mode) as client:
        seen["tool"] = await call(client, "flow_big", {})
        started = await call(client, "start_run", {"flow": "big"})
        seen["started"] = started
        run_id = started.get("structured", {}).get("id")
        seen["run"] = await call(client, "run", {"run_id": run_id, "wait_secs": 60})
        seen["cancel_run"] = await call(client, "cancel_run", {"run_id": run_id})
        seen["frames"] = await call(client, "frames", {"wait_secs": 10, "max": 10})
    print(json.dumps(seen))

asyncio.run(main())
"#;

#[tokio::test]
async fn a_flow_whose_step_returns_a_large_result_is_read_through_the_flow_tools() {
    let body = format!("{AGENTS}\n[agents.big]\nkind = \"lua\"\nscript = \"@DIR@/big.lua\"\n");
    let sw = Swarmd::new(&body);
    let big = json!({"name": "big", "output": {"op": "path", "at": "$.out"},
                     "body": step("big", "go", "$.out")});
    write_files(sw.dir(), &[("big", big)]);
    std::fs::write(
        sw.dir().join("big.lua"),
        format!("return string.rep(\"z\", {BIG})\n"),
    )
    .unwrap();
    let sw = sw.start().await;
    // A MainAI session: the runs it starts tell it how they ended in
    // `run_done` frames, which it pops through `frames`.
    let login = sw.login(json!({"roles": ["main-ai"]})).await;

    let seen = run_script(&sw, SCRIPT, MODERN, &login.token, "large_runs").await;

    // The flow's tool: the run's result cut.
    let tool = answered(&seen, "tool");
    assert_eq!(tool["status"], "passed", "{tool}");
    let tool_run = tool["run_id"].as_str().unwrap();
    assert_cut(&tool, "/result", &format!("GET /v1/runs/{tool_run}"));

    // A run's view: its result and its step's output cut, the rest whole.
    answered(&seen, "started");
    let run = answered(&seen, "run");
    assert_eq!(run["status"], "passed", "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let read = format!("GET /v1/runs/{id}");
    assert_cut(&run, "/result", &read);
    let nodes = run["nodes"].as_array().unwrap();
    let (at, stepped) = nodes
        .iter()
        .enumerate()
        .find(|(_, node)| node["kind"] == "step")
        .unwrap_or_else(|| panic!("no step node: {run}"));
    assert_eq!(stepped["status"], "passed", "{stepped}");
    assert_cut(&run, &format!("/nodes/{at}/tries/0/output"), &read);
    assert!(run["graph"].is_object(), "{run}");

    // Cancelling an ended run is refused or answers the same bounded view.
    let cancelled = &seen["cancel_run"];
    assert!(cancelled.get("raised").is_none(), "{cancelled}");

    // The session's `run_done` frames, each with a 600 KiB result, popped
    // in one answer: each result cut, naming its run.
    let popped = answered(&seen, "frames");
    let done: Vec<&Value> = popped["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["type"] == "run_done")
        .collect();
    assert_eq!(done.len(), 2, "{popped}");
    // Each frame is cut within its share of the answer, so how far
    // depends on how many frames the pop took.
    for frame in done {
        let read = format!("GET /v1/runs/{}", frame["run_id"].as_str().unwrap());
        assert_eq!(frame["status"], "passed", "{frame}");
        assert_cut_to(frame, "/result", &read, 0);
    }

    // The HTTP route still gives the run whole.
    let whole: Value = sw
        .get(&format!("/v1/runs/{id}"), &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(whole["result"].as_str().map(str::len), Some(BIG), "whole");
}
