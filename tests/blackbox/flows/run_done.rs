//! `run_done` on the WebSocket (docs/protocol.md, Frames): a session that
//! starts a run over HTTP with its own token hears how it ended, its result
//! or its error; when its socket is away the frame waits in its outbox.

use serde_json::{Value, json};

use super::{daemon, run, step};
use crate::daemon::Swarmd;
use crate::harness::parts;

fn plan_do() -> Value {
    json!({"name": "plan-do", "output": {"op": "path", "at": "$.done"},
        "body": {"kind": "seq", "children": [
            step("echo", "plan {{ input.topic }}", "$.plan"),
            step("echo", "do {{ plan }}", "$.done")]}})
}

fn doomed() -> Value {
    json!({"name": "doomed", "body": step("fail", "x", "$.r")})
}

/// Starts a run with `bearer`; its id.
async fn start_as(sw: &Swarmd, bearer: &str, body: Value) -> String {
    let (status, answer) = parts(
        sw.post("/v1/runs", bearer)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    answer["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_session_that_starts_a_run_hears_run_done_with_its_result() {
    let sw = daemon(&[("plan-do", plan_do())]).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    let id = start_as(
        &sw,
        &login.token,
        json!({"flow": "plan-do", "input": {"topic": "tea"}}),
    )
    .await;
    let (done, _) = ws
        .recv_until(|f| f["type"] == "run_done" && f["run_id"] == id.as_str())
        .await;
    assert_eq!(
        done,
        json!({"type": "run_done", "run_id": id, "flow": "plan-do", "status": "passed",
               "result": "DO PLAN TEA"})
    );
}

#[tokio::test]
async fn a_run_that_ends_while_the_socket_is_away_is_told_on_reconnect() {
    let sw = daemon(&[("doomed", doomed())]).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let id = start_as(&sw, &login.token, json!({"flow": "doomed"})).await;
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "failed", "{view}");

    let mut ws = sw.connect(&login).await;
    let (done, _) = ws
        .recv_until(|f| f["type"] == "run_done" && f["run_id"] == id.as_str())
        .await;
    assert_eq!(
        (&done["status"], &done["flow"]),
        (&json!("failed"), &json!("doomed")),
        "{done}"
    );
    assert_eq!(done["error"], view["error"], "{done}");
    assert!(done.get("result").is_none(), "{done}");
}
