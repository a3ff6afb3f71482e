//! Flows over MCP through the Python client (docs/mcp.md, Flows): the
//! flows listed and each one a `flow_<name>` tool with the flow's input
//! schema, a flow tool call returning its run's result, `start_run` then
//! `run` waiting with progress notifications, `answer_wait` on a flow's
//! wait node, `lint_flow`, `cancel_run`, another session's run unknown, and
//! bad input refused naming the field.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use super::{MODERN, Via, call, printed, python, run, tool_error, transport};
use crate::daemon::{Swarmd, repo_root};
use crate::flows::{AGENTS, run_until, step, write_files};

fn plan_do() -> Value {
    json!({"name": "plan-do", "description": "Plans, then does.",
        "input_schema": {"type": "object", "required": ["topic"],
                         "properties": {"topic": {"type": "string"}}},
        "output": {"op": "path", "at": "$.done"},
        "body": {"kind": "seq", "children": [
            step("echo", "plan {{ input.topic }}", "$.plan"),
            step("echo", "do {{ plan }}", "$.done")]}})
}

fn approval() -> Value {
    json!({"name": "approve", "body": {"kind": "seq", "children": [
        step("echo", "draft {{ input.what }}", "$.draft"),
        {"kind": "wait", "name": "ok", "prompt": {"op": "template", "text": "ship {{ draft }}?"},
         "schema": {"type": "object", "required": ["go"], "properties": {"go": {"type": "boolean"}}},
         "out": {"op": "path", "at": "$.answer"}},
        {"kind": "branch", "cond": {"op": "path", "at": "$.answer.go"},
         "then": step("echo", "ship {{ draft }}", "$.shipped"),
         "else": {"kind": "let", "at": {"op": "path", "at": "$.shipped"}, "value": {"op": "lit", "value": "no"}}}]}})
}

/// `hold` runs until `@DIR@/release` exists.
fn held() -> Value {
    json!({"name": "held", "body": step("hold", "held {{ input.n }}", "$.r")})
}

/// A daemon with the flows' agents, these flows, and progress every 200 ms.
async fn started() -> Swarmd {
    let sw = Swarmd::new(&format!("{AGENTS}\n[mcp]\nprogress_ms = 200\n"));
    write_files(
        sw.dir(),
        &[
            ("plan-do", plan_do()),
            ("approve", approval()),
            ("held", held()),
        ],
    );
    sw.start().await
}

#[tokio::test]
async fn flows_are_listed_and_each_is_a_tool_with_its_input_schema() {
    let sw = started().await;
    let seen = run(&sw, Via::Http, MODERN, "tools", &sw.admin, &[]).await;
    let tools = seen["tools"].as_object().unwrap();
    for name in [
        "flows",
        "lint_flow",
        "start_run",
        "run",
        "answer_wait",
        "cancel_run",
    ] {
        let tool = &tools[name];
        assert_eq!(tool["input"]["type"], "object", "{name}");
        assert_eq!(tool["output"]["type"], "object", "{name}");
    }
    let plan = &tools["flow_plan-do"];
    assert_eq!(plan["input"]["required"], json!(["topic"]), "{plan}");
    assert_eq!(
        plan["output"]["required"],
        json!(["run_id", "status", "done"])
    );
    let description = plan["description"].as_str().unwrap();
    assert!(
        description.starts_with("Plans, then does."),
        "{description}"
    );
    assert_eq!(tools["flow_approve"]["input"], json!({"type": "object"}));

    let listed = call(&sw, Via::Http, &sw.admin, "flows", json!({})).await;
    let flows = listed["structured"]["flows"].as_array().unwrap();
    let names: Vec<&str> = flows.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["approve", "held", "plan-do"], "{listed}");
    let plan = &flows[2];
    assert_eq!(plan["tool"], "flow_plan-do", "{plan}");
    assert_eq!(plan["input_schema"]["required"], json!(["topic"]));
    assert!(plan["hash"].as_str().unwrap().starts_with("sha256:"));
}

#[tokio::test]
async fn a_flow_tool_runs_its_flow_and_bad_input_is_refused_naming_the_field() {
    let sw = started().await;
    for via in [Via::Http, Via::Stdio] {
        let done = call(&sw, via, &sw.admin, "flow_plan-do", json!({"topic": "tea"})).await;
        assert_eq!(done["is_error"], false, "{via:?} {done}");
        let result = &done["structured"];
        assert_eq!(
            (&result["status"], &result["done"]),
            (&json!("passed"), &json!(true)),
            "{via:?} {result}"
        );
        assert_eq!(result["result"], "DO PLAN TEA", "{result}");
        assert!(result["run_id"].as_str().unwrap().starts_with("R-"));
    }

    let bad = call(
        &sw,
        Via::Http,
        &sw.admin,
        "flow_plan-do",
        json!({"topic": 7}),
    )
    .await;
    let error = tool_error(&bad);
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("/topic"),
        "{error}"
    );
    let missing = call(&sw, Via::Http, &sw.admin, "start_run", json!({"input": {}})).await;
    let error = tool_error(&missing);
    assert_eq!(error["code"], "bad_request", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("`flow`"),
        "{error}"
    );
    let bad = call(
        &sw,
        Via::Http,
        &sw.admin,
        "start_run",
        json!({"flow": "plan-do", "input": {"topic": ["x"]}}),
    )
    .await;
    let error = tool_error(&bad);
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("/topic"),
        "{error}"
    );
    // Nothing ran for the refused calls: two runs, both passed.
    let runs: Value = sw
        .get("/v1/runs", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "{runs}");
}

/// `start_run` of `held`, then `run` waiting with a progress callback,
/// through client.py's own connection code.
const RUN_WAIT: &str = r#"
import asyncio, sys
sys.path.insert(0, sys.argv.pop(1))
import client

async def run_wait(c):
    started = client.outcome(await c.call_tool("start_run", {"flow": "held", "input": {"n": 1}}))
    run_id = started["structured"]["id"]
    seen = []

    async def on_progress(value, total, message):
        seen.append({"progress": value, "total": total, "message": message})

    waited = client.outcome(await c.call_tool(
        "run", {"run_id": run_id, "wait_secs": 30}, progress_callback=on_progress))
    return {"started": started, "waited": waited, "progress": seen}

client.SCENARIOS["run_wait"] = run_wait
asyncio.run(client.main())
"#;

#[tokio::test]
async fn start_run_then_run_waits_for_the_end_with_progress() {
    let sw = started().await;
    let state = tempfile::tempdir().unwrap();
    let scripts = repo_root().join("tests/blackbox/mcp");
    let mut command = Command::new(python());
    command
        .arg("-c")
        .arg(RUN_WAIT)
        .arg(&scripts)
        .args([transport(&sw, Via::Http).as_str(), MODERN, "run_wait"])
        .env("SWARMD_TOKEN", &sw.admin)
        .env("XDG_STATE_HOME", state.path())
        .kill_on_drop(true);
    let client = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(60), command.output()).await
    });
    // The step holds until released: released once the `run` call waits
    // (however long the client took to start), the wait sees progress
    // notifications (every 200 ms) meanwhile.
    crate::daemon::eventually("the client's run call waits", || {
        sw.log().contains("MCP run wait started")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    std::fs::write(sw.dir().join("release"), "").unwrap();
    let output = client
        .await
        .unwrap()
        .expect("the client finished in time")
        .expect("the client ran");
    let seen = printed(&sw, "run_wait", &output);

    let started = &seen["started"]["structured"];
    assert_eq!(started["created"], true, "{started}");
    assert_eq!(started["status"], "running", "{started}");
    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{waited}");
    let view = &waited["structured"];
    assert_eq!(view["id"], started["id"]);
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(
        view["result"]["r"]["raw"].as_str().map(str::trim),
        Some("held 1"),
        "{view}"
    );
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "{progress:?}");
    let message = progress[0]["message"].as_str().unwrap();
    let id = started["id"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("run {id} running")),
        "{message}"
    );
    assert_eq!(progress[0]["total"], 30.0);
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

#[tokio::test]
async fn answer_wait_moves_a_waiting_run_on_and_its_owner_cancels_another() {
    let sw = started().await;
    let admin = sw.admin.as_str();
    let started = call(
        &sw,
        Via::Http,
        admin,
        "start_run",
        json!({"flow": "approve", "input": {"what": "v2"}, "idempotency_key": "k1"}),
    )
    .await;
    let id = started["structured"]["id"].as_str().unwrap().to_owned();
    let view = run_until(&sw, &id, "the wait opens", |v| v["status"] == "waiting").await;
    assert_eq!(view["waits"][0]["prompt"], "ship DRAFT V2?", "{view}");

    // An answer that does not match the wait's schema names the field.
    let answer = |value: Value| json!({"run_id": id, "wait": "ok", "value": value});
    let bad = call(
        &sw,
        Via::Http,
        admin,
        "answer_wait",
        answer(json!({"go": "yes"})),
    )
    .await;
    let error = tool_error(&bad);
    assert_eq!(error["code"], "invalid_input", "{error}");
    assert!(error["error"].as_str().unwrap().contains("/go"), "{error}");
    let answered = call(
        &sw,
        Via::Http,
        admin,
        "answer_wait",
        answer(json!({"go": true})),
    )
    .await;
    assert_eq!(answered["is_error"], false, "{answered}");
    let ended = call(
        &sw,
        Via::Http,
        admin,
        "run",
        json!({"run_id": id, "wait_secs": 30}),
    )
    .await;
    let view = &ended["structured"];
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"]["shipped"], "SHIP DRAFT V2", "{view}");
    let again = call(
        &sw,
        Via::Http,
        admin,
        "answer_wait",
        answer(json!({"go": false})),
    )
    .await;
    assert_eq!(tool_error(&again)["code"], "run_terminal");

    // A session's run is its own: another session does not see it.
    let owner = sw.login(json!({})).await;
    let other = sw.login(json!({})).await;
    let mine = call(
        &sw,
        Via::Http,
        &owner.token,
        "start_run",
        json!({"flow": "held", "input": {"n": 2}}),
    )
    .await;
    let view = &mine["structured"];
    assert_eq!(view["session"], owner.sid.as_str(), "{mine}");
    let run_id = view["id"].as_str().unwrap().to_owned();
    let args = json!({"run_id": run_id, "reason": "not today"});
    let theirs = call(&sw, Via::Http, &other.token, "cancel_run", args.clone()).await;
    assert_eq!(tool_error(&theirs)["code"], "not_found");
    let cancelled = call(&sw, Via::Http, &owner.token, "cancel_run", args).await;
    let view = &cancelled["structured"];
    assert_eq!(
        (&view["status"], &view["error"]),
        (&json!("cancelled"), &json!("not today")),
        "{cancelled}"
    );
}

#[tokio::test]
async fn lint_flow_lists_every_problem_with_pointer_code_and_hint() {
    let sw = started().await;
    let bad = json!({"name": "bad", "body": {"kind": "seq", "children": [
        step("nobody", "x", "$.a"),
        {"kind": "loop", "counter": {"op": "path", "at": "$.i"},
         "cond": {"op": "lit", "value": true}, "body": step("echo", "x", "$.b")}]}});
    let linted = call(&sw, Via::Http, &sw.admin, "lint_flow", json!({"flow": bad})).await;
    let result = &linted["structured"];
    assert_eq!(result["ok"], false, "{linted}");
    let problems = result["problems"].as_array().unwrap();
    let codes: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p["pointer"].as_str().unwrap(), p["code"].as_str().unwrap()))
        .collect();
    assert!(
        codes.contains(&("/body/children/0/ref", "unknown_agent")),
        "{codes:?}"
    );
    assert!(
        codes.contains(&("/body/children/1/max", "loop_without_max")),
        "{codes:?}"
    );
    assert!(
        problems
            .iter()
            .all(|p| !p["hint"].as_str().unwrap().is_empty())
    );
    let good = call(
        &sw,
        Via::Http,
        &sw.admin,
        "lint_flow",
        json!({"flow": plan_do()}),
    )
    .await;
    assert_eq!(good["structured"]["ok"], true, "{good}");
    // Starting the bad flow lists the same problems in the error.
    let refused = call(&sw, Via::Http, &sw.admin, "start_run", json!({"flow": bad})).await;
    let error = tool_error(&refused);
    assert_eq!(error["code"], "invalid_flow", "{error}");
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("/body/children/0/ref unknown_agent")
            && message.contains("/body/children/1/max loop_without_max"),
        "{message}"
    );
}
