//! End-to-end flows over a real socket: spawning tasks, delegated spawns
//! completed by a SubAgent's handle, parking across a disconnect, the bridge
//! requests, subscriptions and cancel.

use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::ResultPost;
use swarmd_engine::body_digest;
use swarmd_engine::event::Event;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_engine::task::{TaskSpec, TaskStatus};
use swarmd_spawner::operator::{HookAck, HookRequest, SessionDirectory};

use super::support::{Client, Server, eventually};

fn task_id(frame: &Value) -> TaskId {
    frame["task_id"].as_str().unwrap().parse().unwrap()
}

/// Frames up to and including the `task_done` of `task`.
async fn until_done(client: &mut Client, task: TaskId) -> (Vec<Value>, Value) {
    let mut events = Vec::new();
    loop {
        let frame = client.recv().await;
        if frame["type"] == "task_done" && task_id(&frame) == task {
            return (events, frame);
        }
        events.push(frame);
    }
}

/// `task_done` carries the attempt its `task_finished` names; an event with
/// attempt 0 (logged before the field existed, or a task that never ran)
/// gets the task's own attempt.
#[tokio::test]
async fn task_done_takes_its_attempt_from_the_event_and_a_zero_from_the_task() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["main-ai"]})).await;
    let mut client = server.connect(&login).await;
    client
        .send(json!({"type": "spawn_task", "req_id": "c-1", "agent": "echo", "prompt": "hi"}))
        .await;
    let task = task_id(&client.recv_type("task_accepted").await);
    let (_, done) = until_done(&mut client, task).await;
    assert_eq!(done["attempt"], 1, "{done}");

    let finished = |attempt| Event::TaskFinished {
        task_id: task,
        attempt,
        status: TaskStatus::Pass,
        result: None,
    };
    server.engine().publish_for_session(login.sid, finished(7));
    let (_, done) = until_done(&mut client, task).await;
    assert_eq!(done["attempt"], 7, "the event's attempt: {done}");
    server.engine().publish_for_session(login.sid, finished(0));
    let (_, done) = until_done(&mut client, task).await;
    assert_eq!(done["attempt"], 1, "the task's attempt: {done}");
}

#[tokio::test]
async fn spawn_task_is_accepted_first_then_done_and_its_events_are_subscribed() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["main-ai"]})).await;
    let mut client = server.connect(&login).await;
    client
        .send(json!({"type": "spawn_task", "req_id": "c-1", "agent": "echo", "prompt": "hi"}))
        .await;
    let accepted = client.recv().await;
    assert_eq!(
        accepted["type"], "task_accepted",
        "nothing about the task comes before it"
    );
    assert_eq!(accepted["req_id"], "c-1");
    let task = task_id(&accepted);

    let (others, done) = until_done(&mut client, task).await;
    assert_eq!(
        done,
        json!({"type": "task_done", "task_id": task.to_string(), "attempt": 1, "status": "pass",
               "ok": true, "value": "echoed"})
    );
    assert!(
        others.is_empty(),
        "an unsubscribed owner hears task_done and nothing else: {others:?}"
    );

    // Its events stay in the log, in order, for `subscribe`.
    client
        .send(json!({"type": "subscribe", "req_id": "s-1", "task_id": task, "after_seq": 0}))
        .await;
    let mut kinds = Vec::new();
    let mut seqs = Vec::new();
    while kinds.last().map(String::as_str) != Some("task_finished") {
        let frame = client.recv_type("task_event").await;
        assert_eq!(task_id(&frame), task);
        seqs.push(frame["seq"].as_u64().unwrap());
        kinds.push(frame["event"]["kind"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        kinds[..3],
        ["task_created", "task_queued", "attempt_started"]
    );
    assert!(
        kinds.iter().any(|k| k == "output") && kinds.iter().any(|k| k == "attempt_finished"),
        "{kinds:?}"
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // A retry after a lost reply names the same task.
    client
        .send(json!({"type": "spawn_task", "req_id": "c-1", "agent": "echo", "prompt": "hi"}))
        .await;
    let again = client.recv_type("task_accepted").await;
    assert_eq!(task_id(&again), task);
    let owned = server.engine().get_task(task).await.unwrap().unwrap();
    assert_eq!(owned.session, Some(login.sid));
}

#[tokio::test]
async fn a_delegated_spawn_is_completed_by_the_subagent_handle() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["main-ai"]})).await;
    let mut client = server.connect(&login).await;
    client
        .send(
            json!({"type": "spawn_task", "req_id": "d-1", "agent": "reviewer",
                     "prompt": "review it", "delegate": true}),
        )
        .await;
    let task = task_id(&client.recv_type("task_accepted").await);
    let spawn = client.recv_type("spawn").await;
    assert_eq!(task_id(&spawn), task);
    assert_eq!(
        (spawn["agent"].clone(), spawn["attempt"].clone()),
        (json!("reviewer"), json!(1))
    );
    assert_eq!(spawn["base_url"], server.url(""));
    assert!(
        spawn["capability_token"]
            .as_str()
            .unwrap()
            .starts_with("swc1.")
    );
    assert!(spawn["deadline"].as_u64().unwrap() > 0);
    let handle = spawn["worker_handle"].as_str().unwrap();
    assert!(handle.starts_with("wh-"));
    let directive = spawn["directive"].as_str().unwrap();
    assert!(
        directive.contains(&format!("worker_handle: {handle}")),
        "{directive}"
    );
    assert!(directive.contains(&format!(
        "{}/v1/worker/prompt?task_id={task}",
        server.url("")
    )));

    // The SubAgent fetches its prompt and posts its result with the handle.
    let engine = server.engine();
    let auth = engine
        .authenticate_worker(handle, Verb::FetchPrompt)
        .unwrap();
    assert_eq!(
        engine.fetch_prompt(&auth, Some(task)).await.unwrap().prompt,
        "review it"
    );
    let auth = engine
        .authenticate_worker(handle, Verb::PostResult)
        .unwrap();
    let post = ResultPost {
        task_id: Some(task),
        attempt: None,
        value: json!("reviewed"),
        ok: true,
        idempotency_key: None,
        body_digest: body_digest(b"reviewed"),
    };
    engine.post_result(&auth, post).await.unwrap();
    let (_, done) = until_done(&mut client, task).await;
    assert_eq!(
        (done["status"].clone(), done["value"].clone()),
        (json!("pass"), json!("reviewed"))
    );

    // The MainAI's ack after the SubAgent posted is accepted quietly.
    let req_id = spawn["req_id"].as_str().unwrap();
    client
        .send(json!({"type": "spawn_ack", "req_id": req_id}))
        .await;
    client
        .send(json!({"type": "answer", "req_id": "nobody", "value": 1}))
        .await;
    let error = client.recv_type("error").await;
    assert_eq!(
        error["req_id"], "nobody",
        "the first error is the unknown answer, not the ack"
    );
    assert_eq!(error["code"], "unknown_request");
}

#[tokio::test]
async fn frames_park_while_disconnected_and_arrive_in_order_on_reconnect() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["main-ai"]})).await;
    let registry = &server.harness.registry;
    let session = registry.get(&login.sid).unwrap();
    let client = server.connect(&login).await;
    eventually("attach", || session.connected()).await;
    assert!(
        client.close().await,
        "the server answers the close handshake"
    );
    eventually("detach", || !session.connected()).await;

    let hooks = registry.session(&login.sid).unwrap().hooks.unwrap();
    let task = TaskId::new();
    for attempt in 1..=3 {
        let request = HookRequest {
            task_id: task,
            agent: "a".into(),
            attempt,
        };
        hooks.after(request, json!({"n": attempt}));
    }
    let spec = TaskSpec {
        agent: "echo".into(),
        prompt: "p".into(),
        session: Some(login.sid),
        ..TaskSpec::default()
    };
    let owned = server.engine().create_task(spec).await.unwrap();
    let finished = server
        .engine()
        .wait_task(owned.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(finished.status(), TaskStatus::Pass);
    eventually("the task_done parked", || session.parked() >= 4).await;
    assert_eq!(session.parked(), 4, "three hook_after and the task_done");

    let mut client = server.connect(&login).await;
    for attempt in 1..=3 {
        let frame = client.recv().await;
        assert_eq!(frame["type"], "hook_after");
        assert_eq!(frame["attempt"], attempt);
        assert_eq!(frame["result"], json!({"n": attempt}));
    }
    let (others, done) = until_done(&mut client, owned.id).await;
    assert!(others.is_empty(), "{others:?}");
    assert_eq!(done["value"], "echoed");
    eventually("the outbox drained", || session.parked() == 0).await;

    let log = server.engine().events_after(0, 1000).await.unwrap();
    let attached = log
        .iter()
        .filter(|r| r.event == Event::SessionAttached { sid: login.sid })
        .count();
    let detached = log
        .iter()
        .filter(|r| r.event == Event::SessionDetached { sid: login.sid })
        .count();
    assert_eq!((attached, detached), (2, 1));
}

#[tokio::test]
async fn ask_and_hook_before_are_answered_over_the_socket() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["senior"]})).await;
    let mut client = server.connect(&login).await;
    let registry = &server.harness.registry;
    eventually("attach", || registry.connected() == 1).await;
    let info = registry.by_role("senior").unwrap();
    let task = TaskId::new();

    let senior = info.senior.clone().unwrap();
    let asking = tokio::spawn(async move {
        senior
            .ask(AttemptId::new(task, 2), json!({"reason": "tests fail"}))
            .await
    });
    let ask = client.recv_type("ask").await;
    assert_eq!(ask["question"], json!({"reason": "tests fail"}));
    assert_eq!(task_id(&ask), task);
    client
        .send(json!({"type": "answer", "req_id": ask["req_id"], "value": {"ok": true, "hint": "retry"}}))
        .await;
    assert_eq!(
        asking.await.unwrap().unwrap(),
        json!({"ok": true, "hint": "retry"})
    );

    let hooks = info.hooks.clone().unwrap();
    let request = HookRequest {
        task_id: task,
        agent: "echo".into(),
        attempt: 1,
    };
    let hooking = tokio::spawn(async move { hooks.before(request).await });
    let before = client.recv_type("hook_before").await;
    assert_eq!(
        (before["agent"].clone(), before["attempt"].clone()),
        (json!("echo"), json!(1))
    );
    // A reply of the wrong kind is refused and the hook still waits.
    client
        .send(json!({"type": "answer", "req_id": before["req_id"], "value": 1}))
        .await;
    assert_eq!(client.recv_type("error").await["code"], "bad_request");
    client
        .send(json!({"type": "hook_ack", "req_id": before["req_id"], "ok": false, "reason": "not now"}))
        .await;
    let ack = hooking.await.unwrap().unwrap();
    assert_eq!(
        ack,
        HookAck {
            ok: false,
            reason: Some("not now".into())
        }
    );
}

#[tokio::test]
async fn subscribe_replays_then_streams_until_the_task_finishes() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let mut client = server.connect(&login).await;
    let engine = server.engine();
    // A session follows its own tasks (another's is unknown to it).
    let spec = TaskSpec {
        agent: "slow".into(),
        prompt: "p".into(),
        session: Some(login.sid),
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    eventually("the attempt started", || {
        server.harness.slow.credential(task.id).is_some()
    })
    .await;
    client
        .send(json!({"type": "subscribe", "req_id": "s-1", "task_id": task.id, "after_seq": 0}))
        .await;
    let first = client.recv_type("task_event").await;
    assert_eq!(first["event"]["kind"], "task_created");
    let mut seqs = vec![first["seq"].as_u64().unwrap()];
    let mut kinds = vec!["task_created".to_owned()];
    while kinds.last().map(String::as_str) != Some("attempt_started") {
        let frame = client.recv_type("task_event").await;
        seqs.push(frame["seq"].as_u64().unwrap());
        kinds.push(frame["event"]["kind"].as_str().unwrap().to_owned());
    }
    engine.cancel_task(task.id, None).await.unwrap();
    while kinds.last().map(String::as_str) != Some("task_finished") {
        let frame = client.recv_type("task_event").await;
        assert_eq!(task_id(&frame), task.id);
        seqs.push(frame["seq"].as_u64().unwrap());
        kinds.push(frame["event"]["kind"].as_str().unwrap().to_owned());
    }
    assert!(kinds.contains(&"task_cancelled".to_owned()), "{kinds:?}");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "no repeats, in order: {seqs:?}"
    );

    // A finished task replays from the log and ends; an unknown one is an error.
    let from = seqs[1];
    client
        .send(json!({"type": "subscribe", "req_id": "s-2", "task_id": task.id, "after_seq": from}))
        .await;
    let replayed = client.recv_type("task_event").await;
    assert_eq!(replayed["seq"], seqs[2]);
    let unknown = TaskId::new();
    client
        .send(json!({"type": "subscribe", "req_id": "s-3", "task_id": unknown}))
        .await;
    let error = client.recv_type("error").await;
    assert_eq!(
        (error["req_id"].clone(), error["code"].clone()),
        (json!("s-3"), json!("not_found"))
    );
}

#[tokio::test]
async fn cancel_task_only_for_tasks_the_session_owns() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let mut client = server.connect(&login).await;
    client
        .send(json!({"type": "spawn_task", "req_id": "c-1", "agent": "slow", "prompt": "p"}))
        .await;
    let task = task_id(&client.recv_type("task_accepted").await);
    client
        .send(json!({"type": "cancel_task", "req_id": "c-2", "task_id": task}))
        .await;
    let (_, done) = until_done(&mut client, task).await;
    assert_eq!(
        (done["status"].clone(), done["ok"].clone()),
        (json!("cancelled"), json!(false))
    );

    let spec = TaskSpec {
        agent: "slow".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let foreign = server.engine().create_task(spec).await.unwrap();
    client
        .send(json!({"type": "cancel_task", "req_id": "c-3", "task_id": foreign.id}))
        .await;
    let error = client.recv_type("error").await;
    assert_eq!(
        (error["req_id"].clone(), error["code"].clone()),
        (json!("c-3"), json!("not_found"))
    );
    let still = server.engine().get_task(foreign.id).await.unwrap().unwrap();
    assert!(!still.status().is_terminal());
    server.engine().cancel_task(foreign.id, None).await.unwrap();
}
