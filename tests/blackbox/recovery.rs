//! Crash windows of an acknowledged result (docs/tasks.md, Late writes; Recovery): a SubAgent's
//! Final acknowledged with `200` while the decision waits (a senior `ask`
//! nobody answers), then kill -9. After the restart the stored Final decides
//! the attempt, a different second result is refused, a replay with the same
//! `Idempotency-Key` and body answers the first `200` again, and the owning
//! MainAI gets its `task_done`. Also: a `task_done` parked for a MainAI
//! without a socket survives a kill -9.

use serde_json::{Value, json};

use crate::daemon::{Login, Swarmd, Ws, delegate_frame};
use crate::harness::{expect_error, parts};

fn str_of<'a>(frame: &'a Value, key: &str) -> &'a str {
    frame[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {frame}"))
}

/// Posts a result with the handle; the status and the answer.
async fn post_result(
    sw: &Swarmd,
    handle: &str,
    task: &str,
    key: &str,
    body: &Value,
) -> (u16, Value) {
    parts(
        sw.http
            .post(sw.url(&format!("/v1/worker/result?task_id={task}")))
            .bearer_auth(handle)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// A MainAI session with a delegated task: its login, socket, task id and
/// the SubAgent's handle.
async fn delegated(sw: &Swarmd) -> (Login, Ws, String, String) {
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&main_ai).await;
    ws.send(delegate_frame("r-1", "researcher", "go")).await;
    let spawn = ws.recv_type("spawn").await;
    let task = str_of(&spawn, "task_id").to_owned();
    let handle = str_of(&spawn, "worker_handle").to_owned();
    (main_ai, ws, task, handle)
}

#[tokio::test]
async fn an_acknowledged_final_decides_its_attempt_after_a_crash_before_the_decision() {
    let mut sw = Swarmd::new("").start().await;
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let senior = sw
        .login(json!({"roles": ["senior"], "kind": "automate"}))
        .await;
    let mut ws = sw.connect(&main_ai).await;
    let mut senior_ws = sw.connect(&senior).await;

    let mut frame = delegate_frame("r-1", "researcher", "is it done?");
    frame["layers"] = json!(["senior_escalation"]);
    frame["policy"] = json!({"max_attempts": 1});
    ws.send(frame).await;
    let spawn = ws.recv_type("spawn").await;
    let task = str_of(&spawn, "task_id").to_owned();
    let handle = str_of(&spawn, "worker_handle").to_owned();

    // A blocked Final: acknowledged, then held by the senior's question.
    let first = json!({"value": {"reason": "tests fail"}, "ok": false});
    let (status, ack) = post_result(&sw, &handle, &task, "k-1", &first).await;
    assert_eq!(status, 200, "{ack}");
    let ask = senior_ws.recv_type("ask").await;
    assert_eq!(ask["task_id"], task.as_str());
    assert_eq!(sw.task(&task).await["status"], "running");

    sw.kill9().await;
    drop((ws, senior_ws));
    sw.restart().await;

    // The stored Final decided the attempt during recovery.
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "blocked", "{view}\n{}", sw.log());
    assert_eq!(view["result"], first, "{view}");
    // A different second result does not flip it; the same one replays.
    let other = json!({"value": "all green", "ok": true});
    let (status, answer) = post_result(&sw, &handle, &task, "k-2", &other).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("already_final")),
        "{answer}"
    );
    let (status, replay) = post_result(&sw, &handle, &task, "k-1", &first).await;
    assert_eq!((status, &replay), (200, &ack), "{replay}");
    let finals = sw
        .output(&task)
        .await
        .into_iter()
        .filter(|r| r["event"]["type"] == "final")
        .count();
    assert_eq!(finals, 1, "the replay appended nothing");
    assert_eq!(sw.finished(&task).await["status"], "blocked");

    // The MainAI hears about it once it reconnects.
    let mut ws = sw.connect(&main_ai).await;
    let done = ws.done(&task).await;
    assert_eq!(
        (&done["attempt"], &done["status"]),
        (&json!(1), &json!("blocked"))
    );
}

#[tokio::test]
async fn a_result_replay_answers_its_first_200_after_a_restart_and_a_cancel_loses_to_it() {
    let mut sw = Swarmd::new("").start().await;
    let (_main_ai, _ws, task, handle) = delegated(&sw).await;
    let body = json!({"value": "done", "ok": true});
    let (status, ack) = post_result(&sw, &handle, &task, "k-1", &body).await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(sw.finished(&task).await["status"], "pass");
    // Once the result won, a cancel is told so.
    let cancel = sw
        .post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
        .send()
        .await
        .unwrap();
    expect_error(cancel, 410, "task_terminal").await;

    sw.kill9().await;
    sw.restart().await;
    let (status, replay) = post_result(&sw, &handle, &task, "k-1", &body).await;
    assert_eq!((status, &replay), (200, &ack), "{replay}\n{}", sw.log());
    let changed = json!({"value": "done!", "ok": true});
    let (status, answer) = post_result(&sw, &handle, &task, "k-1", &changed).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("already_final")),
        "{answer}"
    );
}

#[tokio::test]
async fn a_task_done_parked_for_a_mainai_without_a_socket_survives_a_kill_9() {
    let mut sw = Swarmd::new("").start().await;
    let (main_ai, ws, task, handle) = delegated(&sw).await;
    // The MainAI goes away; its task finishes; the daemon dies.
    drop(ws);
    let sid = main_ai.sid.clone();
    let mut gone = false;
    for _ in 0..200 {
        let (_, list) = parts(sw.get("/v1/operators", &sw.admin).send().await.unwrap()).await;
        let listed = list
            .as_array()
            .cloned()
            .or_else(|| list["sessions"].as_array().cloned());
        if listed
            .unwrap_or_default()
            .iter()
            .any(|s| s["sid"] == sid.as_str() && s["connected"] == false)
        {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(gone, "the session never showed as disconnected");
    let body = json!({"value": "done", "ok": true});
    let (status, _) = post_result(&sw, &handle, &task, "k-1", &body).await;
    assert_eq!(status, 200);
    assert_eq!(sw.finished(&task).await["status"], "pass");
    sw.kill9().await;
    sw.restart().await;

    let mut ws = sw.connect(&main_ai).await;
    let done = ws.done(&task).await;
    assert_eq!(
        (&done["attempt"], &done["status"], &done["value"]),
        (&json!(1), &json!("pass"), &json!("done"))
    );
}
