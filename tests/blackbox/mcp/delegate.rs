//! A MainAI acting on delegated work through MCP alone (docs/mcp.md, Acting
//! as the MainAI): `frames` pops the session's `spawn`, the SubAgent tools
//! fetch and submit by worker handle, `reply` acks; an `ask` is answered;
//! a session with a socket refuses pops; the session counts as connected
//! while it uses MCP; and upstream's `mse_*` tool names do the same.

use serde_json::{Value, json};

use super::{Via, call, tool_error};
use crate::daemon::{Login, Swarmd};

const AGENTS: &str = r#"
[mcp]
upstream_aliases = true

[agents.helper]
kind = "operator"
worker_binding = { subagent_type = "general-purpose" }

[agents.doubtful]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '{\"reason\":\"tests fail\"}'; exit 1"]
stdin = "none"
layers = ["senior_escalation"]
"#;

/// A tool's structured result, failing the test on an isError result.
async fn ok(sw: &Swarmd, via: Via, token: &str, tool: &str, args: Value) -> Value {
    let outcome = call(sw, via, token, tool, args.clone()).await;
    assert_eq!(outcome["is_error"], false, "{tool} {args}: {outcome}");
    outcome["structured"].clone()
}

/// Pops frames until one of `kind` arrives (others are skipped).
async fn pop(sw: &Swarmd, via: Via, token: &str, kind: &str) -> Value {
    for _ in 0..5 {
        let popped = ok(sw, via, token, "frames", json!({"wait_secs": 10})).await;
        if let Some(frame) = popped["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["type"] == kind)
        {
            return frame.clone();
        }
    }
    panic!("no `{kind}` frame\n{}", sw.log());
}

async fn connected(sw: &Swarmd, login: &Login) -> bool {
    let (_, listed) =
        crate::harness::parts(sw.get("/v1/operators", &sw.admin).send().await.unwrap()).await;
    let sessions = listed["sessions"].as_array().or(listed.as_array()).cloned();
    sessions
        .unwrap_or_default()
        .iter()
        .find(|s| s["sid"] == login.sid.as_str())
        .map(|s| s["connected"] == true)
        .unwrap_or_else(|| panic!("session {} not listed: {listed}", login.sid))
}

async fn delegated_round_trip(via: Via) {
    let sw = Swarmd::new(AGENTS).start().await;
    let main = sw.login(json!({"description": "an MCP MainAI"})).await;
    assert!(!connected(&sw, &main).await, "no socket, no MCP call yet");

    let spawned = ok(
        &sw,
        via,
        &main.token,
        "spawn",
        json!({"agent": "helper", "prompt": "write the summary"}),
    )
    .await;
    let task = spawned["task_id"].as_str().unwrap().to_owned();
    let spawn = pop(&sw, via, &main.token, "spawn").await;
    assert_eq!(spawn["task_id"], task.as_str(), "{spawn}");
    assert!(
        connected(&sw, &main).await,
        "an MCP request counts the session present"
    );
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();

    // The SubAgent's side, by handle only.
    let prompt = ok(
        &sw,
        via,
        &main.token,
        "worker_prompt",
        json!({"worker_handle": handle}),
    )
    .await;
    assert_eq!(
        (&prompt["task_id"], &prompt["prompt"]),
        (&json!(task), &json!("write the summary"))
    );
    let reported = ok(
        &sw,
        via,
        &main.token,
        "worker_progress",
        json!({"worker_handle": handle, "stage": "drafting", "text": "Sum"}),
    )
    .await;
    assert!(reported["seq"].as_u64().unwrap() >= 2, "{reported}");
    let submitted = ok(
        &sw,
        via,
        &main.token,
        "worker_submit",
        json!({"worker_handle": handle, "value": {"summary": "short"}}),
    )
    .await;
    assert_eq!(submitted["accepted"], true, "{submitted}");

    // The MainAI's ack comes after the posted Final: nothing waits for it
    // any more, which is not an error.
    let replied = ok(
        &sw,
        via,
        &main.token,
        "reply",
        json!({"type": "spawn_ack", "req_id": spawn["req_id"], "ok": true, "value": "ignored"}),
    )
    .await;
    assert!(replied["delivered"].is_boolean(), "{replied}");
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], json!({"summary": "short"}));
    let stages: Vec<Value> = sw
        .output(&task)
        .await
        .into_iter()
        .map(|r| r["event"]["type"].clone())
        .collect();
    assert!(stages.contains(&json!("progress")) && stages.contains(&json!("partial")));

    // The task's end reaches its owner as a frame too.
    let finished = pop(&sw, via, &main.token, "task_done").await;
    assert_eq!(
        (&finished["task_id"], &finished["status"]),
        (&json!(task), &json!("pass"))
    );

    // A second spawn answered by the ack alone.
    let spawned = ok(
        &sw,
        via,
        &main.token,
        "spawn",
        json!({"agent": "helper", "prompt": "again"}),
    )
    .await;
    let task = spawned["task_id"].as_str().unwrap().to_owned();
    let spawn = pop(&sw, via, &main.token, "spawn").await;
    let replied = ok(
        &sw,
        via,
        &main.token,
        "reply",
        json!({"type": "spawn_ack", "req_id": spawn["req_id"], "ok": true, "value": "acked"}),
    )
    .await;
    assert_eq!(replied["delivered"], true, "{replied}");
    let done = sw.finished(&task).await;
    assert_eq!(done["result"]["value"], "acked", "{done}");

    // A reply to nothing is the daemon's error, as a tool result.
    let outcome = call(
        &sw,
        via,
        &main.token,
        "reply",
        json!({"type": "answer", "req_id": "nobody-asked", "value": 1}),
    )
    .await;
    assert_eq!(tool_error(&outcome)["code"], "unknown_request");
}

#[tokio::test]
async fn a_delegated_task_is_popped_fetched_submitted_and_acked_over_http() {
    delegated_round_trip(Via::Http).await;
}

#[tokio::test]
async fn a_delegated_task_is_popped_fetched_submitted_and_acked_over_stdio() {
    delegated_round_trip(Via::Stdio).await;
}

#[tokio::test]
async fn an_ask_is_answered_with_reply() {
    let sw = Swarmd::new(AGENTS).start().await;
    let senior = sw
        .login(json!({"roles": ["senior"], "kind": "automate"}))
        .await;
    // Present through MCP before the escalation looks for a senior.
    let empty = ok(
        &sw,
        Via::Http,
        &senior.token,
        "frames",
        json!({"wait_secs": 0}),
    )
    .await;
    assert_eq!(empty["frames"], json!([]));
    let (status, created) = sw
        .create(json!({"agent": "doubtful", "prompt": "is it done?"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let ask = pop(&sw, Via::Http, &senior.token, "ask").await;
    assert_eq!(ask["task_id"], task.as_str());
    assert_eq!(ask["question"]["reason"], "tests fail", "{ask}");
    let replied = ok(
        &sw,
        Via::Http,
        &senior.token,
        "reply",
        json!({"type": "answer", "req_id": ask["req_id"], "value": "accept: flaky"}),
    )
    .await;
    assert_eq!(replied["delivered"], true);
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"]["senior_answer"], "accept: flaky");
}

#[tokio::test]
async fn pops_are_refused_while_a_socket_is_attached_and_for_other_sessions() {
    let sw = Swarmd::new(AGENTS).start().await;
    let main = sw.login(json!({})).await;
    let other = sw.login(json!({})).await;
    let _ws = sw.connect(&main).await;
    let outcome = call(
        &sw,
        Via::Http,
        &main.token,
        "frames",
        json!({"wait_secs": 1}),
    )
    .await;
    assert_eq!(tool_error(&outcome)["code"], "socket_attached");

    let outcome = call(
        &sw,
        Via::Http,
        &other.token,
        "frames",
        json!({"sid": main.sid, "wait_secs": 0}),
    )
    .await;
    assert_eq!(tool_error(&outcome)["code"], "forbidden");
    let outcome = call(&sw, Via::Http, &sw.admin, "frames", json!({"wait_secs": 0})).await;
    assert_eq!(tool_error(&outcome)["code"], "bad_request");
    let outcome = call(
        &sw,
        Via::Http,
        &other.token,
        "frames",
        json!({"wait_secs": 601}),
    )
    .await;
    assert_eq!(tool_error(&outcome)["code"], "bad_request");
    let outcome = call(
        &sw,
        Via::Http,
        &other.token,
        "worker_prompt",
        json!({"worker_handle": "wh-0000000000000000"}),
    )
    .await;
    assert_eq!(tool_error(&outcome)["code"], "unauthorized");
}

#[tokio::test]
async fn upstream_tool_names_drive_a_delegated_task() {
    let sw = Swarmd::new(AGENTS).start().await;
    let admin = sw.admin.clone();
    let joined = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_operator_join",
        json!({"desc": "an upstream driver"}),
    )
    .await;
    let sid = joined["sid"].as_str().unwrap().to_owned();
    let (status, created) = sw
        .create(json!({"agent": "helper", "prompt": "step one", "operator_sid": sid}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();

    let mut frame = Value::Null;
    for _ in 0..5 {
        frame = ok(
            &sw,
            Via::Http,
            &admin,
            "mse_pending_wait",
            json!({"sid": sid, "timeout_ms": 10_000}),
        )
        .await;
        if frame["type"] == "spawn" {
            break;
        }
    }
    assert_eq!(frame["timed_out"], false, "{frame}");
    assert_eq!(frame["type"], "spawn", "{frame}");
    let payload = &frame["payload"];
    let step = format!("ST-{}", &task[2..]);
    assert_eq!(payload["task_id"], step.as_str(), "the upstream dialect");
    let handle = payload["worker_handle"].as_str().unwrap();

    let fetched = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_worker_fetch",
        json!({"worker_handle": handle, "task_id": step, "base_url": "http://ignored"}),
    )
    .await;
    assert_eq!(fetched["prompt"], "step one", "{fetched}");
    let staged = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_worker_submit",
        json!({"worker_handle": handle, "body": "# plan", "name": "plan.md"}),
    )
    .await;
    assert_eq!(staged["submitted"], true);
    let submitted = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_worker_submit",
        json!({"worker_handle": handle, "body": "all done\n",
               "degradations": [{"tool": "grep", "error": "absent", "fallback": "read"}]}),
    )
    .await;
    assert_eq!(submitted["submitted"], true);
    let acked = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_ack",
        json!({"sid": sid, "req_id": frame["req_id"], "kind": "spawn_ack", "value": "all done"}),
    )
    .await;
    assert_eq!(acked["sent"], true);
    let done = sw.finished(&task).await;
    assert_eq!(
        (&done["status"], &done["result"]["value"]),
        (&json!("pass"), &json!("all done"))
    );
    let events: Vec<Value> = sw
        .output(&task)
        .await
        .into_iter()
        .map(|r| r["event"].clone())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "artifact" && e["name"] == "plan.md"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "progress" && e["stage"] == "degradation"),
        "{events:?}"
    );

    let left = ok(
        &sw,
        Via::Http,
        &admin,
        "mse_operator_leave",
        json!({"sid": sid}),
    )
    .await;
    assert_eq!(left["removed"], true);
    let (status, _) = crate::harness::parts(
        sw.get(&format!("/v1/operators/{sid}"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "the session is gone");
}

#[tokio::test]
async fn no_credential_from_mcp_reaches_the_log_at_trace() {
    let sw = Swarmd::new(AGENTS).env("RUST_LOG", "trace").start().await;
    let main = sw.login(json!({})).await;
    let spawned = ok(
        &sw,
        Via::Http,
        &main.token,
        "spawn",
        json!({"agent": "helper", "prompt": "p"}),
    )
    .await;
    let task = spawned["task_id"].as_str().unwrap().to_owned();
    let spawn = pop(&sw, Via::Http, &main.token, "spawn").await;
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    let token = spawn["capability_token"].as_str().unwrap().to_owned();
    ok(
        &sw,
        Via::Http,
        &main.token,
        "worker_prompt",
        json!({"worker_handle": handle}),
    )
    .await;
    ok(
        &sw,
        Via::Http,
        &main.token,
        "worker_submit",
        json!({"worker_handle": token, "value": "v"}),
    )
    .await;
    sw.finished(&task).await;
    let log = sw.log();
    // The filter took: lines below `info` were written (the daemon's own
    // trace events are rare, so debug ones stand for them).
    assert!(log.contains("DEBUG"), "{log}");
    for secret in [
        handle.as_str(),
        &handle[3..],
        token.as_str(),
        main.token.as_str(),
        sw.admin.as_str(),
    ] {
        assert!(
            !log.contains(secret),
            "the log holds a credential:\n{}",
            log.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
