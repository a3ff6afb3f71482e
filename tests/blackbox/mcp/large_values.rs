//! A task whose values are large (a 600 KiB prompt and result) read
//! through the official Python SDK over Streamable HTTP: `task`, `tasks`,
//! `cancel`, `output` and `wait` answer within the SDK's 1 MiB bound on a
//! server-sent event, each large value cut with a marker naming where to
//! read it whole; and `limit`s out of range are refused with `bad_request`.
//! The script below drives the real binary and prints what it saw, with
//! every long string shortened to its length and its end.

use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use super::{EXTRA, LEGACY, MODERN, Served, Via, printed, python, tool_error, transport};
use crate::harness::Daemon;

/// What both large-value scripts begin with: the SDK's imports, `short`
/// (a long string shown as its length and its end) and `call` (a tool's
/// outcome, or what it raised).
const PRELUDE: &str = r#"
import asyncio, json, os, sys
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

def short(value):
    if isinstance(value, str) and len(value) > 400:
        return {"len": len(value), "tail": value[-200:]}
    if isinstance(value, list):
        return [short(v) for v in value]
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items()}
    return value

async def call(client, tool, args):
    try:
        result = await client.call_tool(tool, args)
    except Exception as error:
        return {"raised": repr(error)[:500]}
    text = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return short({"is_error": bool(result.is_error), "structured": result.structured_content,
                  "text": text, "text_bytes": sum(len(t.encode()) for t in text)})

"#;

const SCRIPT: &str = r#"
BIG = "y" * (600 * 1024)

async def main():
    transport, mode = sys.argv[1:3]
    base = transport.partition(":")[2]
    headers = {"Authorization": "Bearer " + os.environ["SWARMD_TOKEN"]}
    http = create_mcp_http_client(headers=headers)
    seen = {}
    async with Client(streamable_http_client(base + "/mcp", http_client=http), mode=mode) as client:
        running = await call(client, "spawn", {"agent": "sleepy", "prompt": BIG})
        done = await call(client, "spawn", {"agent": "cat", "prompt": BIG})
        seen["spawned"] = [running, done]
        ids = [s["structured"]["task_id"] for s in (running, done)]
        seen["wait"] = await call(client, "wait", {"task_ids": [ids[1]], "timeout_secs": 30})
        seen["task_running"] = await call(client, "task", {"task_id": ids[0]})
        seen["task_done"] = await call(client, "task", {"task_id": ids[1]})
        seen["tasks_one"] = await call(client, "tasks", {"limit": 1})
        seen["tasks"] = await call(client, "tasks", {})
        seen["output"] = await call(client, "output", {"task_id": ids[1]})
        seen["cancel"] = await call(client, "cancel", {"task_id": ids[0], "reason": "enough"})
        for name, tool, args in [
            ("tasks_0", "tasks", {"limit": 0}),
            ("tasks_201", "tasks", {"limit": 201}),
            ("output_0", "output", {"task_id": ids[1], "limit": 0}),
            ("output_1001", "output", {"task_id": ids[1], "limit": 1001}),
        ]:
            seen[name] = await call(client, tool, args)
    print(json.dumps(seen))

asyncio.run(main())
"#;

/// The cut value at `pointer` of `object`: cut to 60–64 KiB, its end
/// names where to read it whole, and `object.cut` gives its whole size.
pub(super) fn assert_cut(object: &Value, pointer: &str, read: &str) {
    assert_cut_to(object, pointer, read, 60 * 1024);
}

/// As [`assert_cut`], the value kept being `min` to 64 KiB long.
pub(super) fn assert_cut_to(object: &Value, pointer: &str, read: &str, min: u64) {
    let value = object
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer}: {object}"));
    let tail = value["tail"]
        .as_str()
        .unwrap_or_else(|| panic!("{pointer}: {value}"));
    assert!(
        tail.ends_with(&format!("bytes in all; read it whole with {read}]")),
        "{pointer}: {tail}"
    );
    let len = value["len"].as_u64().unwrap();
    assert!((min..=64 * 1024).contains(&len), "{pointer}: {len}");
    let whole = object["cut"]["values"][pointer].as_u64();
    assert!(whole.is_some_and(|w| w > 600 * 1024), "{pointer}: {object}");
    assert_eq!(object["cut"]["read"], read, "{object}");
}

/// A result the SDK took: no exception, no isError, and its text (the
/// same JSON as its structured content) well under 1 MiB.
pub(super) fn answered(seen: &Value, name: &str) -> Value {
    let outcome = &seen[name];
    assert!(outcome.get("raised").is_none(), "{name}: {outcome}");
    assert_eq!(outcome["is_error"], false, "{name}: {outcome}");
    let bytes = outcome["text_bytes"].as_u64().unwrap();
    assert!(bytes < 320 * 1024, "{name}: {bytes} bytes of text");
    outcome["structured"].clone()
}

/// Runs `body` after [`PRELUDE`] with the Python SDK over HTTP in `mode`,
/// as `token`, and returns what it printed (`name` names it in failures).
pub(super) async fn run_script(
    daemon: &impl Served,
    body: &str,
    mode: &str,
    token: &str,
    name: &str,
) -> Value {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), format!("{PRELUDE}{body}")).unwrap();
    let mut command = Command::new(python());
    command
        .arg(script.path())
        .args([transport(daemon, Via::Http).as_str(), mode])
        .env("SWARMD_TOKEN", token)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the MCP client finished in time")
        .expect("the MCP client ran");
    printed(daemon, name, &output)
}

#[tokio::test]
async fn large_task_values_are_cut_so_the_python_sdk_reads_them() {
    let daemon = Daemon::start_with(EXTRA).await;
    for mode in [MODERN, LEGACY] {
        let seen = run_script(&daemon, SCRIPT, mode, &daemon.admin, "large_values").await;

        let running = answered(&seen, "task_running");
        let id = running["id"].as_str().unwrap().to_owned();
        assert_cut(&running, "/prompt", &format!("GET /v1/tasks/{id}"));
        let done = answered(&seen, "task_done");
        let done_id = done["id"].as_str().unwrap().to_owned();
        assert_eq!(done["status"], "pass", "{mode}: {done}");
        assert_cut(&done, "/prompt", &format!("GET /v1/tasks/{done_id}"));

        // The 600 KiB result is spilled: `wait` carries its `file_ref`
        // (read it with `GET /v1/blobs/{sha256}`), or leaves it out with
        // its size.
        let waited = answered(&seen, "wait");
        let state = &waited["tasks"][0];
        let spilled = state["value"]["kind"] == "file_ref";
        let left_out = state["value_bytes"]
            .as_u64()
            .is_some_and(|b| b > 600 * 1024);
        assert!(spilled || left_out, "{mode}: {state}");

        // Newest first: the `cat` task, its values cut to 4 KiB.
        let one = answered(&seen, "tasks_one");
        let listed = one["tasks"].as_array().unwrap();
        assert_eq!(listed.len(), 1, "{mode}: {one}");
        assert_eq!(listed[0]["id"], done_id.as_str());
        assert_eq!(one["next"], done_id.as_str());
        let prompt = &listed[0]["prompt"];
        let tail = prompt["tail"].as_str().unwrap_or_default();
        let len = prompt["len"].as_u64().unwrap_or_default();
        assert!(len <= 4 * 1024 && tail.contains("[cut: "), "{prompt}");
        let all = answered(&seen, "tasks");
        assert!(all["tasks"].as_array().unwrap().len() >= 2, "{mode}: {all}");

        // Inline values past 64 KiB are cut; a spilled one is a `file_ref`.
        let output = answered(&seen, "output");
        let records = output["records"].as_array().unwrap();
        assert!(!records.is_empty(), "{mode}: {output}");
        for record in records.iter().filter(|r| r.get("cut").is_some()) {
            let read = record["cut"]["read"].as_str().unwrap();
            assert!(read.contains("/output?attempt=1&after_seq="), "{record}");
        }

        let cancelled = answered(&seen, "cancel");
        assert_eq!(
            cancelled["task"]["status"], "cancelled",
            "{mode}: {cancelled}"
        );
        assert_cut(
            &cancelled["task"],
            "/prompt",
            &format!("GET /v1/tasks/{id}"),
        );

        for (name, range) in [
            ("tasks_0", "1 to 200, not 0"),
            ("tasks_201", "1 to 200, not 201"),
            ("output_0", "1 to 1000, not 0"),
            ("output_1001", "1 to 1000, not 1001"),
        ] {
            let error = tool_error(&seen[name]);
            assert_eq!(error["code"], "bad_request", "{mode} {name}: {error}");
            let message = error["error"].as_str().unwrap();
            assert_eq!(message, format!("limit must be {range}"), "{mode} {name}");
        }
    }
}
