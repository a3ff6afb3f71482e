//! Operator agents without `operator_role` (docs/tasks.md, Operator agents):
//! their attempts go to the least loaded connected MainAI session, so
//! several MainAIs share the work; an `automate` session never gets one.
//! With no session to take it, a task waits queued until one connects, up
//! to its queue timeout or `spawner.session_wait_secs`.

use std::time::Duration;

use serde_json::json;

use crate::daemon::{Incoming, Login, Swarmd};
use crate::harness::{PATIENCE, parts};

const AGENTS: &str = r#"
[agents.helper]
kind = "operator"
worker_binding = { subagent_type = "general-purpose" }
"#;

/// Waits until the daemon reports `login`'s socket attached (`wanted`) or
/// not. An upgraded socket attaches a moment after its `101`, and "not
/// connected" until then is not "gone".
async fn until_connected_is(sw: &Swarmd, login: &Login, wanted: bool) {
    let summary = format!("/v1/operators/{}", login.sid);
    let started = std::time::Instant::now();
    loop {
        let (_, seen) = parts(sw.get(&summary, &sw.admin).send().await.unwrap()).await;
        if seen["connected"] == wanted {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "{seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn attempts_spread_over_main_ai_sessions_by_load() {
    let sw = Swarmd::new(AGENTS).start().await;
    let bot = sw.login(json!({"kind": "automate"})).await;
    let mut bot_ws = sw.connect(&bot).await;
    let first = sw.login(json!({})).await;
    let mut first_ws = sw.connect(&first).await;
    let second = sw.login(json!({"kind": "composite"})).await;
    let mut second_ws = sw.connect(&second).await;
    // Every socket is seen attached first: tasks are routed to attached ones.
    for login in [&bot, &first, &second] {
        until_connected_is(&sw, login, true).await;
    }

    // Each spawn stays unanswered, so each counts as its session's load
    // once it is sent: the second task, created after the first's spawn
    // arrived, lands on the other session.
    let mut tasks = Vec::new();
    let create = || async {
        let (status, body) = sw
            .create(json!({"agent": "helper", "prompt": "help"}))
            .await;
        assert!(status == 200 || status == 201, "{status} {body}");
        body["task_id"].as_str().unwrap().to_owned()
    };
    tasks.push(create().await);
    let deadline = tokio::time::Instant::now() + crate::harness::PATIENCE;
    let (one, two) = loop {
        assert!(tokio::time::Instant::now() < deadline, "no spawn frame");
        if let Incoming::Frame(frame) = first_ws.next_within(Duration::from_millis(50)).await
            && frame["type"] == "spawn"
        {
            tasks.push(create().await);
            break (frame, second_ws.recv_type("spawn").await);
        }
        if let Incoming::Frame(frame) = second_ws.next_within(Duration::from_millis(50)).await
            && frame["type"] == "spawn"
        {
            tasks.push(create().await);
            break (first_ws.recv_type("spawn").await, frame);
        }
    };
    let mut got = vec![
        one["task_id"].as_str().unwrap().to_owned(),
        two["task_id"].as_str().unwrap().to_owned(),
    ];
    got.sort();
    tasks.sort();
    assert_eq!(got, tasks, "one task per MainAI session");
    match bot_ws.next_within(Duration::from_millis(500)).await {
        Incoming::Nothing => {}
        Incoming::Frame(frame) => {
            assert_ne!(frame["type"], "spawn", "an automate session got {frame}")
        }
        Incoming::Closed(frame) => panic!("the automate socket closed: {frame:?}"),
    }

    // The MainAI answers; the task passes with its value.
    first_ws
        .send(json!({"type": "spawn_ack", "req_id": one["req_id"], "value": "done", "ok": true}))
        .await;
    let done = sw.finished(one["task_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], "done", "{done}");
}

#[tokio::test]
async fn without_a_main_ai_session_the_task_waits_queued_until_one_connects() {
    let sw = Swarmd::new(AGENTS).start().await;
    let (status, body) = sw
        .create(json!({"agent": "helper", "prompt": "help"}))
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let waiting = sw.task(&task).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    assert_eq!(waiting["attempts"], json!([]), "no attempt is opened");

    let main = sw.login(json!({})).await;
    let mut ws = sw.connect(&main).await;
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task.as_str());
    ws.send(json!({"type": "spawn_ack", "req_id": spawn["req_id"], "value": 42, "ok": true}))
        .await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
}

#[tokio::test]
async fn a_wait_ends_at_the_queue_timeout() {
    let sw = Swarmd::new(AGENTS).start().await;
    let (status, body) = sw
        .create(json!({"agent": "helper", "prompt": "help", "policy": {"queue_timeout_secs": 1}}))
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let done = sw.finished(body["task_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["reason"], "queue timeout", "{done}");
}

#[tokio::test]
async fn a_wait_ends_at_spawner_session_wait_secs() {
    let sw = Swarmd::new(&format!("session_wait_secs = 1\n{AGENTS}"))
        .start()
        .await;
    let (status, body) = sw
        .create(json!({"agent": "helper", "prompt": "help"}))
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let done = sw.finished(body["task_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    let reason = done["reason"].as_str().unwrap();
    assert!(
        reason.contains("no live operator session for `any MainAI session`")
            && reason.contains("waited"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_killed_main_ai_logs_in_again_and_gets_its_role_and_parked_spawns() {
    let sw = Swarmd::new(
        r#"
[auth]
role_takeover_secs = 5

[agents.coder]
kind = "operator"
operator_role = "main-ai"
"#,
    )
    .start()
    .await;
    let first = sw.login(json!({"roles": ["main-ai"]})).await;
    let ws = sw.connect(&first).await;
    // The MainAI dies: its socket goes, its session stays and holds the role.
    // The task comes once the daemon saw the socket go, so its spawn is
    // parked (a spawn written into a socket in its last moments is a gap
    // of its own, docs/decisions.md, Sessions and WebSocket). The socket is
    // seen attached first.
    until_connected_is(&sw, &first, true).await;
    drop(ws);
    until_connected_is(&sw, &first, false).await;
    let (status, body) = sw
        .create(json!({"agent": "coder", "prompt": "fix it"}))
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    // Within the grace (5 s, ample even on a loaded machine) the role stays.
    let refused = sw
        .post("/v1/operators", &sw.admin)
        .json(&json!({"roles": ["main-ai"]}))
        .send()
        .await
        .unwrap();
    crate::harness::expect_error(refused, 409, "role_taken").await;

    // Past the grace, a login takes the role.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let second = sw.login(json!({"roles": ["main-ai"]})).await;
    assert_ne!(second.sid, first.sid);
    let mut ws = sw.connect(&second).await;
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task.as_str(), "the parked spawn moved");
    ws.send(json!({"type": "spawn_ack", "req_id": spawn["req_id"], "value": "fixed", "ok": true}))
        .await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    let old = sw.dial(&first).await;
    assert!(old.is_err(), "the old session is gone");
}

#[tokio::test]
async fn operator_sid_pins_a_task_to_one_session() {
    let sw = Swarmd::new(&format!(
        "{AGENTS}\n[agents.coder]\nkind = \"operator\"\noperator_role = \"main-ai\"\n"
    ))
    .start()
    .await;
    let holder = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut holder_ws = sw.connect(&holder).await;
    let pinned = sw.login(json!({})).await;
    let mut pinned_ws = sw.connect(&pinned).await;

    // Both the role holder and the least loaded rule are overridden.
    for agent in ["coder", "helper"] {
        let (status, body) = sw
            .create(json!({"agent": agent, "prompt": "p", "operator_sid": pinned.sid}))
            .await;
        assert!(status == 200 || status == 201, "{status} {body}");
        let spawn = pinned_ws.recv_type("spawn").await;
        assert_eq!(spawn["task_id"], body["task_id"], "{agent}");
        assert_eq!(
            sw.task(body["task_id"].as_str().unwrap()).await["operator_sid"],
            pinned.sid.as_str()
        );
    }
    match holder_ws.next_within(Duration::from_millis(300)).await {
        Incoming::Frame(frame) => assert_ne!(frame["type"], "spawn", "{frame}"),
        Incoming::Nothing => {}
        Incoming::Closed(frame) => panic!("closed: {frame:?}"),
    }

    let (status, body) = sw
        .create(json!({"agent": "helper", "prompt": "p",
                       "operator_sid": "S-00000000000000000000000000000000"}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap().contains("operator_sid"),
        "{body}"
    );
}
