//! The upstream dialect (docs/protocol.md, Upstream clients): a session that
//! logs in as the upstream `mse` client does (`desc` and
//! `capability_manifest`, no roles) receives task ids as `ST-` step ids and
//! may name tasks so in its own frames; its SubAgent names the task by that
//! step id on the worker routes, or not at all, and its submit is answered
//! `204`. Everyone else keeps the documented wire. `mse.rs` drives the real
//! upstream client.

use serde_json::json;

use crate::daemon::Swarmd;

const AGENTS: &str = r#"
[agents.helper]
kind = "operator"

[agents.sleepy]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

fn mse_login() -> serde_json::Value {
    json!({"desc": "mse 0.32.1", "capability_manifest": {"tools": ["mse_worker_fetch"]}})
}

#[tokio::test]
async fn an_upstream_session_gets_step_ids_and_its_subagent_uses_them() {
    let sw = Swarmd::new(AGENTS).start().await;
    let mse = sw.login(mse_login()).await;
    let mut ws = sw.connect(&mse).await;
    let (status, body) = sw
        .create(json!({"agent": "helper", "prompt": "count to three"}))
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    let step = format!("ST-{}", &task[2..]);

    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], step.as_str(), "{spawn}");
    let directive = spawn["directive"].as_str().unwrap();
    assert!(directive.contains(&step), "{directive}");
    assert!(
        !directive.replace(&step, "").contains(&task),
        "no task id is left in {directive}"
    );
    let handle = spawn["worker_handle"].as_str().unwrap();

    let prompt = sw
        .get(&format!("/v1/worker/prompt?task_id={step}"), handle)
        .send()
        .await
        .unwrap();
    assert_eq!(prompt.status(), 200);
    let prompt: serde_json::Value = prompt.json().await.unwrap();
    assert_eq!(prompt["prompt"], "count to three");

    let submitted = sw
        .post(&format!("/v1/worker/submit?task_id={step}"), handle)
        .body("one two three")
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 204);
    assert!(submitted.text().await.unwrap().is_empty());
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], "one two three", "{done}");
    let listed = sw.get("/v1/operators", &sw.admin).send().await.unwrap();
    assert_eq!(listed.status(), 200);
}

#[tokio::test]
async fn a_documented_login_keeps_the_documented_wire() {
    let sw = Swarmd::new(AGENTS).start().await;
    let main = sw.login(json!({"description": "a MainAI"})).await;
    let mut ws = sw.connect(&main).await;
    let (_, body) = sw.create(json!({"agent": "helper", "prompt": "p"})).await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task.as_str());
    let handle = spawn["worker_handle"].as_str().unwrap();
    let submitted = sw
        .post(&format!("/v1/worker/submit?task_id={task}"), handle)
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 200);
    let ack: serde_json::Value = submitted.json().await.unwrap();
    assert_eq!(ack["task_id"], task.as_str(), "{ack}");

    let both = sw
        .post("/v1/operators", &sw.admin)
        .json(&json!({"desc": "x", "description": "y"}))
        .send()
        .await
        .unwrap();
    crate::harness::expect_error(both, 400, "bad_request").await;
}

#[tokio::test]
async fn the_upstream_subagent_submits_without_naming_its_task_and_gets_204() {
    let sw = Swarmd::new(AGENTS).start().await;
    let mse = sw.login(mse_login()).await;
    let mut ws = sw.connect(&mse).await;
    let (_, body) = sw.create(json!({"agent": "helper", "prompt": "p"})).await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    let handle = spawn["worker_handle"].as_str().unwrap();
    // As `mse_worker_submit` posts: text, the bearer, no task id.
    let submitted = sw
        .post("/v1/worker/submit", handle)
        .header("content-type", "text/plain")
        .body("done\n")
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 204);
    let done = sw.finished(&task).await;
    assert_eq!(done["result"]["value"], "done", "{done}");

    // Named by its `T-` id, the documented answer.
    let (_, body) = sw.create(json!({"agent": "helper", "prompt": "q"})).await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    let handle = spawn["worker_handle"].as_str().unwrap();
    let submitted = sw
        .post(&format!("/v1/worker/submit?task_id={task}"), handle)
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 200);

    // A documented session's SubAgent naming no task gets the documented
    // answer too.
    let main = sw.login(json!({"description": "a MainAI"})).await;
    drop(ws);
    let mut ws = sw.connect(&main).await;
    let (_, body) = sw
        .create(json!({"agent": "helper", "prompt": "r", "operator_sid": main.sid}))
        .await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task.as_str());
    let submitted = sw
        .post(
            "/v1/worker/submit",
            spawn["worker_handle"].as_str().unwrap(),
        )
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 200);
    let ack: serde_json::Value = submitted.json().await.unwrap();
    assert_eq!(ack["task_id"], task.as_str(), "{ack}");
}

#[tokio::test]
async fn an_upstream_session_names_its_tasks_by_step_id_in_its_own_frames() {
    let sw = Swarmd::new(AGENTS).start().await;
    let mse = sw.login(mse_login()).await;
    let mut ws = sw.connect(&mse).await;
    ws.send(json!({"type": "spawn_task", "req_id": "r-1", "agent": "sleepy", "prompt": "zz"}))
        .await;
    let accepted = ws.recv_type("task_accepted").await;
    let step = accepted["task_id"].as_str().unwrap().to_owned();
    let task = format!("T-{}", step.strip_prefix("ST-").expect("a step id"));

    ws.send(json!({"type": "subscribe", "req_id": "s-1", "task_id": step, "after_seq": 0}))
        .await;
    let event = ws.recv_type("task_event").await;
    assert_eq!(event["task_id"], step.as_str(), "{event}");

    ws.send(json!({"type": "cancel_task", "req_id": "c-1", "task_id": step}))
        .await;
    let (done, skipped) = ws
        .recv_until(|f| f["type"] == "task_done" || f["type"] == "error")
        .await;
    assert_eq!(done["type"], "task_done", "{done} after {skipped:?}");
    assert_eq!(done["task_id"], step.as_str(), "{done}");
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(sw.task(&task).await["status"], "cancelled");

    // A documented session names tasks by their task id only.
    let main = sw.login(json!({"description": "a MainAI"})).await;
    let mut ws = sw.connect(&main).await;
    ws.send(json!({"type": "cancel_task", "req_id": "c-2", "task_id": step}))
        .await;
    let refused = ws.recv_type("error").await;
    assert_eq!(refused["code"], "bad_request", "{refused}");
    assert_eq!(refused["req_id"], "c-2", "{refused}");
}

#[tokio::test]
async fn a_login_with_a_null_manifest_is_upstream_shaped_too() {
    let sw = Swarmd::new(AGENTS).start().await;
    // What `mse_operator_join {desc}` sends when given no manifest.
    let mse = sw
        .login(json!({"desc": "mse without a manifest", "capability_manifest": null}))
        .await;
    let mut ws = sw.connect(&mse).await;
    let (_, body) = sw
        .create(json!({"agent": "helper", "prompt": "p", "operator_sid": mse.sid}))
        .await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], format!("ST-{}", &task[2..]), "{spawn}");

    // `desc` alone, or with roles, stays on the documented wire.
    for login in [
        json!({"desc": "no manifest key"}),
        json!({"desc": "a role", "capability_manifest": null, "roles": ["r"]}),
    ] {
        let main = sw.login(login).await;
        let mut ws = sw.connect(&main).await;
        let (_, body) = sw
            .create(json!({"agent": "helper", "prompt": "p", "operator_sid": main.sid}))
            .await;
        let spawn = ws.recv_type("spawn").await;
        assert_eq!(spawn["task_id"], body["task_id"], "{spawn}");
    }
}

#[tokio::test]
async fn named_parts_and_reports_are_output_events_and_bad_ones_are_refused() {
    let sw = Swarmd::new(AGENTS).start().await;
    let mse = sw.login(mse_login()).await;
    let mut ws = sw.connect(&mse).await;
    let (_, body) = sw.create(json!({"agent": "helper", "prompt": "p"})).await;
    let task = body["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    let handle = spawn["worker_handle"].as_str().unwrap();
    let long = "n".repeat(257);
    for query in ["", "?name=", &format!("?name={long}")] {
        let refused = sw
            .post(&format!("/v1/worker/artifact{query}"), handle)
            .body("x")
            .send()
            .await
            .unwrap();
        crate::harness::expect_error(refused, 400, "bad_request").await;
    }
    let stored = sw
        .post("/v1/worker/artifact?name=a.json", handle)
        .header("content-type", "application/json")
        .body(r#"{"k": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 204);
    for (route, body) in [
        ("stats", r#"{"usage": {"total_tokens": 12}}"#),
        ("degradation", r#"{"tool": "grep", "error": "timeout"}"#),
    ] {
        let stored = sw
            .post(&format!("/v1/worker/{route}"), handle)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(stored.status(), 204, "{route}");
        let huge = format!(r#"{{"pad": "{}"}}"#, "x".repeat(64 << 10));
        for bad in ["not json", huge.as_str()] {
            let refused = sw
                .post(&format!("/v1/worker/{route}"), handle)
                .body(bad.to_owned())
                .send()
                .await
                .unwrap();
            crate::harness::expect_error(refused, 400, "bad_request").await;
        }
    }
    let records = sw.output(&task).await;
    let events: Vec<&serde_json::Value> = records.iter().map(|r| &r["event"]).collect();
    assert_eq!(
        events,
        [
            &json!({"type": "artifact", "name": "a.json", "content": {"kind": "inline", "value": {"k": 1}}}),
            &json!({"type": "progress", "stage": "stats", "note": r#"{"usage":{"total_tokens":12}}"#}),
            &json!({"type": "progress", "stage": "degradation", "note": r#"{"error":"timeout","tool":"grep"}"#}),
        ]
    );
}
