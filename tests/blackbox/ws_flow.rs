//! MainAI flows over the real socket (docs/tasks.md, Layers; Operator agents; Senior;
//! docs/protocol.md, WebSocket): a delegated `spawn_task` completed by a SubAgent over HTTP with
//! its handle, an operator agent routed to the session holding its role, senior
//! escalation answered through `ask`, `hook_before` refusal, a
//! `long_hold_warn` while the attempt still runs, and garbage frames.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};

use crate::daemon::{Incoming, Swarmd, delegate_frame};
use crate::harness::parts;

/// Agents of these tests: `cat` prints its prompt (a JSON prompt becomes a
/// JSON value); `coder` is delegated to the session holding `main-ai`;
/// `doubtful` finishes blocked with a reason and escalates to the senior.
const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"

[agents.coder]
kind = "operator"
operator_role = "main-ai"
worker_binding = { subagent_type = "general-purpose", tools = ["Read", "Edit"] }
system_prompt = "Make the smallest change."

[agents.doubtful]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '{\"reason\":\"tests fail\",\"failing\":3}'; exit 1"]
stdin = "none"
layers = ["senior_escalation"]
"#;

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

fn str_of<'a>(frame: &'a Value, key: &str) -> &'a str {
    frame[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {frame}"))
}

/// Checks every field of a `spawn` frame (docs/protocol.md, Frames; The spawn directive).
fn check_spawn(sw: &Swarmd, spawn: &Value, task: &str, agent: &str) {
    assert_eq!(spawn["type"], "spawn");
    assert!(!str_of(spawn, "req_id").is_empty(), "{spawn}");
    assert_eq!(spawn["task_id"], task);
    assert_eq!(spawn["agent"], agent);
    assert_eq!(spawn["attempt"], 1);
    let token = str_of(spawn, "capability_token");
    let fields: Vec<&str> = token.split('.').collect();
    assert_eq!(
        (fields.len(), fields[0]),
        (4, "swc1"),
        "capability_token {token}"
    );
    let handle = str_of(spawn, "worker_handle");
    let hex = handle.strip_prefix("wh-").unwrap_or("");
    assert!(
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "worker_handle {handle}"
    );
    assert_eq!(spawn["base_url"], sw.base, "base_url is the real bound URL");
    let deadline = spawn["deadline"].as_u64().unwrap();
    let now = now_ms();
    assert!(
        deadline > now && deadline <= now + 1_800_000 + 5_000,
        "deadline {deadline} now {now}"
    );
    let directive = str_of(spawn, "directive");
    for line in [
        format!("task_id: {task}"),
        format!("worker_handle: {handle}"),
        format!("base_url: {}", sw.base),
        format!("GET {}/v1/worker/prompt?task_id={task}", sw.base),
        format!("POST {}/v1/worker/submit", sw.base),
        format!("Authorization: Bearer {handle}"),
    ] {
        assert!(
            directive.contains(&line),
            "`{line}` missing in:\n{directive}"
        );
    }
}

#[tokio::test]
async fn a_delegated_task_goes_from_spawn_task_to_task_done_through_the_subagent() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    ws.send(delegate_frame("r-1", "researcher", "find the bug"))
        .await;
    let accepted = ws.recv().await;
    assert_eq!(accepted["type"], "task_accepted", "{accepted}");
    assert_eq!(accepted["req_id"], "r-1");
    let task = str_of(&accepted, "task_id").to_owned();
    let spawn = ws.recv_type("spawn").await;
    check_spawn(&sw, &spawn, &task, "researcher");
    let handle = str_of(&spawn, "worker_handle");

    // The SubAgent, with nothing but the handle and the base URL.
    let subagent = reqwest::Client::new();
    let base = str_of(&spawn, "base_url");
    let (status, prompt) = parts(
        subagent
            .get(format!("{base}/v1/worker/prompt?task_id={task}"))
            .bearer_auth(handle)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{prompt}");
    assert_eq!(
        (
            &prompt["task_id"],
            &prompt["attempt"],
            &prompt["agent"],
            &prompt["prompt"]
        ),
        (
            &json!(task),
            &json!(1),
            &json!("researcher"),
            &json!("find the bug")
        )
    );
    assert!(prompt["deadline"].is_u64(), "{prompt}");
    // The long token works where the handle does.
    let by_token = subagent
        .get(format!("{base}/v1/worker/prompt"))
        .bearer_auth(str_of(&spawn, "capability_token"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), 200);

    let (status, ack) = parts(
        subagent
            .post(format!("{base}/v1/worker/submit?task_id={task}"))
            .bearer_auth(handle)
            .body("the bug is on line 7\n")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(
        ack,
        json!({"task_id": task, "attempt": 1, "accepted": true})
    );

    let done = ws.done(&task).await;
    assert_eq!(
        done,
        json!({"type": "task_done", "task_id": task, "attempt": 1, "status": "pass",
               "ok": true, "value": "the bug is on line 7"})
    );
    let view = sw.task(&task).await;
    assert_eq!(view["status"], "pass");
    assert_eq!(view["session"], login.sid.as_str());

    // The MainAI's ack after the SubAgent submitted is accepted quietly: the
    // next error frame is the one about the unknown answer.
    ws.send(json!({"type": "spawn_ack", "req_id": spawn["req_id"]}))
        .await;
    ws.send(json!({"type": "answer", "req_id": "probe", "value": 1}))
        .await;
    let error = ws.recv_type("error").await;
    assert_eq!(error["req_id"], "probe", "{error}");
}

#[tokio::test]
async fn an_operator_agent_sends_http_tasks_to_the_role_holder_and_spawn_ack_completes_them() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    let (status, created) = sw
        .create(json!({"agent": "coder", "prompt": "fix the typo in README"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = str_of(&created, "task_id").to_owned();

    let spawn = ws.recv_type("spawn").await;
    check_spawn(&sw, &spawn, &task, "coder");
    assert_eq!(spawn["worker"]["subagent_type"], "general-purpose");
    assert_eq!(spawn["worker"]["tools"], json!(["Read", "Edit"]));
    assert_eq!(
        spawn["worker"]["system_prompt"],
        "Make the smallest change."
    );
    let directive = str_of(&spawn, "directive");
    assert!(
        directive.contains("`general-purpose`") && directive.contains("Read, Edit"),
        "{directive}"
    );
    assert_eq!(sw.task(&task).await["status"], "running");

    // The SubAgent posted nothing; the ack's value becomes the Final.
    ws.send(json!({"type": "spawn_ack", "req_id": spawn["req_id"],
                   "value": {"summary": "fixed"}, "ok": true}))
        .await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}");
    assert_eq!(
        view["result"],
        json!({"value": {"summary": "fixed"}, "ok": true})
    );
}

#[tokio::test]
async fn a_senior_session_answers_the_ask_and_its_override_decides() {
    let sw = Swarmd::new(AGENTS).start().await;
    let senior = sw
        .login(json!({"roles": ["senior"], "kind": "automate"}))
        .await;
    let mut ws = sw.connect(&senior).await;
    let original = json!({"reason": "tests fail", "failing": 3});

    // An answer overrides the blocked verdict.
    let (status, created) = sw
        .create(json!({"agent": "doubtful", "prompt": "is it done?"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = str_of(&created, "task_id").to_owned();
    let ask = ws.recv_type("ask").await;
    assert_eq!(ask["task_id"], task);
    let question = &ask["question"];
    assert_eq!(question["reason"], "tests fail", "{ask}");
    assert_eq!(question["value"], original);
    assert_eq!(
        (
            &question["task"]["id"],
            &question["task"]["agent"],
            &question["task"]["prompt"]
        ),
        (&json!(task), &json!("doubtful"), &json!("is it done?"))
    );
    assert_eq!(
        sw.task(&task).await["status"],
        "running",
        "a task whose escalation is pending is still running"
    );
    ws.send(json!({"type": "answer", "req_id": ask["req_id"], "value": "accept: flaky test"}))
        .await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}");
    assert_eq!(
        view["result"],
        json!({"value": {"original": original, "senior_answer": "accept: flaky test"},
               "ok": true})
    );
    let finals: Vec<(Value, String)> = sw
        .output(&task)
        .await
        .into_iter()
        .filter(|r| r["event"]["type"] == "final")
        .map(|r| (r["event"]["ok"].clone(), str_of(&r, "producer").to_owned()))
        .collect();
    assert_eq!(finals.len(), 2, "the original Final stays: {finals:?}");
    assert_eq!(finals[0].0, false);
    assert_eq!(finals[1], (json!(true), "senior_escalation".to_owned()));

    // An answer that says `ok: false` keeps the verdict.
    let (_, created) = sw
        .create(json!({"agent": "doubtful", "prompt": "and now?"}))
        .await;
    let task = str_of(&created, "task_id").to_owned();
    let ask = ws.recv_type("ask").await;
    assert_eq!(ask["task_id"], task);
    ws.send(json!({"type": "answer", "req_id": ask["req_id"],
                   "value": {"ok": false, "why": "really broken"}}))
        .await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "blocked", "{view}");
    assert_eq!(
        view["result"]["value"]["senior_answer"]["why"],
        "really broken"
    );
}

#[tokio::test]
async fn hook_before_refusal_fails_the_attempt_with_its_reason() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"kind": "main_ai"})).await;
    let mut ws = sw.connect(&login).await;

    ws.send(
        json!({"type": "spawn_task", "req_id": "h-1", "agent": "cat",
                   "prompt": "\"hello\"", "layers": ["main_ai"]}),
    )
    .await;
    let task = str_of(&ws.recv_type("task_accepted").await, "task_id").to_owned();
    let hook = ws.recv_type("hook_before").await;
    assert_eq!(
        (&hook["task_id"], &hook["agent"], &hook["attempt"]),
        (&json!(task), &json!("cat"), &json!(1))
    );
    ws.send(
        json!({"type": "hook_ack", "req_id": hook["req_id"], "ok": false,
                   "reason": "not on a Friday"}),
    )
    .await;
    let done = ws.done(&task).await;
    assert_eq!(
        (&done["status"], &done["ok"]),
        (&json!("failed"), &json!(false)),
        "{done}"
    );
    let view = sw.task(&task).await;
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not on a Friday"), "{view}");
    assert!(
        sw.output(&task).await.is_empty(),
        "a refused attempt never ran its worker"
    );

    // Approved, the same task shape runs and `hook_after` reports the result.
    ws.send(
        json!({"type": "spawn_task", "req_id": "h-2", "agent": "cat",
                   "prompt": "\"hello\"", "layers": ["main_ai"]}),
    )
    .await;
    let task = str_of(&ws.recv_type("task_accepted").await, "task_id").to_owned();
    let hook = ws.recv_type("hook_before").await;
    assert_eq!(hook["task_id"], task);
    ws.send(json!({"type": "hook_ack", "req_id": hook["req_id"], "ok": true}))
        .await;
    let mut after = None;
    let mut done = None;
    while after.is_none() || done.is_none() {
        let frame = ws.recv().await;
        if frame["task_id"] != task {
            continue;
        }
        match frame["type"].as_str() {
            Some("hook_after") => after = Some(frame),
            Some("task_done") => done = Some(frame),
            _ => {}
        }
    }
    let (after, done) = (after.unwrap(), done.unwrap());
    assert_eq!(
        (&done["status"], &done["value"]),
        (&json!("pass"), &json!("hello"))
    );
    assert_eq!(
        (&after["agent"], &after["attempt"]),
        (&json!("cat"), &json!(1))
    );
    assert!(
        after["result"].to_string().contains("hello"),
        "hook_after carries the result: {after}"
    );
}

#[tokio::test]
async fn long_hold_warn_arrives_while_the_attempt_still_runs() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    let mut frame = delegate_frame("l-1", "slowpoke", "take your time");
    frame["policy"] = json!({"long_hold_warn_secs": 1});
    ws.send(frame).await;
    let task = str_of(&ws.recv_type("task_accepted").await, "task_id").to_owned();
    let spawn = ws.recv_type("spawn").await;
    let spawned = Instant::now();

    // The SubAgent holds; the warning comes over the socket meanwhile.
    let (warn, skipped) = ws
        .recv_until(|f| f["type"] == "task_event" && f["event"]["kind"] == "long_hold_warn")
        .await;
    let waited = spawned.elapsed();
    assert_eq!(warn["task_id"], task);
    assert_eq!(warn["attempt"], 1);
    assert!(warn["seq"].is_u64(), "{warn}");
    assert!(
        warn["event"]["elapsed_secs"].as_u64().unwrap() >= 1,
        "{warn}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "the warning is sent at the moment, not at the end ({waited:?})"
    );
    assert!(
        skipped.iter().all(|f| f["type"] != "task_done"),
        "{skipped:?}"
    );
    assert_eq!(sw.task(&task).await["status"], "running");

    let submitted = sw
        .http
        .post(sw.url("/v1/worker/submit"))
        .bearer_auth(str_of(&spawn, "worker_handle"))
        .header("content-type", "application/json")
        .body(r#"{"slept": true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 200);
    let done = ws.done(&task).await;
    assert_eq!(
        (&done["status"], &done["value"]),
        (&json!("pass"), &json!({"slept": true}))
    );
}

#[tokio::test]
async fn garbage_frames_get_error_frames_and_the_daemon_keeps_serving() {
    let sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    let garbage: [(Message, Option<&str>, &str); 7] = [
        (Message::text("this is not json"), None, "not a JSON object"),
        (Message::text("[1, 2, 3]"), None, "not a JSON object"),
        (
            Message::text(r#"{"type": "launch_missiles", "req_id": "g-1"}"#),
            Some("g-1"),
            "unknown frame type",
        ),
        (
            Message::text(r#"{"req_id": "g-2"}"#),
            Some("g-2"),
            "no `type`",
        ),
        (
            Message::text(r#"{"type": "spawn_task", "req_id": "g-3"}"#),
            Some("g-3"),
            "malformed",
        ),
        (
            Message::text(r#"{"type": "cancel_task", "req_id": "g-4", "task_id": "T-nope"}"#),
            Some("g-4"),
            "malformed",
        ),
        (Message::binary(vec![0u8, 159, 146, 150]), None, "binary"),
    ];
    for (message, req_id, says) in garbage {
        let sent = format!("{message:?}");
        ws.send_message(message).await;
        let error = ws.recv().await;
        assert_eq!(error["type"], "error", "after {sent}: {error}");
        assert_eq!(error["code"], "bad_request", "after {sent}: {error}");
        assert_eq!(error["req_id"].as_str(), req_id, "after {sent}: {error}");
        assert!(
            str_of(&error, "error").contains(says),
            "after {sent}: {error}"
        );
    }

    // The same socket still works.
    ws.send(
        json!({"type": "spawn_task", "req_id": "ok-1", "agent": "cat",
                   "prompt": "\"still here\""}),
    )
    .await;
    let task = str_of(&ws.recv_type("task_accepted").await, "task_id").to_owned();
    let done = ws.done(&task).await;
    assert_eq!(
        (&done["status"], &done["value"]),
        (&json!("pass"), &json!("still here"))
    );

    // A frame over 1 MiB closes the socket with a policy violation. The
    // daemon may close before the client has written the whole frame; then
    // the write itself meets the reset and the close frame is lost with it.
    if ws
        .try_send_message(Message::text("x".repeat(2 << 20)))
        .await
    {
        match ws.next_within(Duration::from_secs(10)).await {
            Incoming::Closed(Some(close)) => assert_eq!(close.code, CloseCode::Policy),
            Incoming::Closed(None) => {}
            other => panic!("expected the socket to close, got {other:?}"),
        }
    }
    // A text frame that is not UTF-8 closes the socket with 1007.
    let mut ws = sw.connect(&login).await;
    let bad = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    ws.send_message(Message::Frame(bad)).await;
    match ws.next_within(Duration::from_secs(10)).await {
        Incoming::Closed(Some(close)) => {
            assert_eq!(close.code, CloseCode::Invalid, "{close:?}");
            assert!(close.reason.contains("UTF-8"), "{close:?}");
        }
        other => panic!("expected the socket to close, got {other:?}"),
    }
    // … and the session, the daemon and its HTTP API live on.
    let mut ws = sw.connect(&login).await;
    ws.send(
        json!({"type": "spawn_task", "req_id": "ok-2", "agent": "cat",
                   "prompt": "\"again\""}),
    )
    .await;
    let task = str_of(&ws.recv_type("task_accepted").await, "task_id").to_owned();
    assert_eq!(ws.done(&task).await["value"], "again");
    let health = sw.http.get(sw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}
