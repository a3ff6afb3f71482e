//! The upstream dialect (docs/protocol.md, Upstream clients): a session that
//! logs in as the upstream `mse` client does (`desc` and
//! `capability_manifest`, no roles) receives task ids as `ST-` step ids; its
//! SubAgent names the task by that step id on the worker routes, and a
//! submit named so is answered `204`. Everyone else keeps the documented wire.

use serde_json::json;

use crate::daemon::Swarmd;

const AGENTS: &str = r#"
[agents.helper]
kind = "operator"
"#;

#[tokio::test]
async fn an_upstream_session_gets_step_ids_and_its_subagent_uses_them() {
    let sw = Swarmd::new(AGENTS).start().await;
    let mse = sw
        .login(
            json!({"desc": "mse 0.32.1", "capability_manifest": {"tools": ["mse_worker_fetch"]}}),
        )
        .await;
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
