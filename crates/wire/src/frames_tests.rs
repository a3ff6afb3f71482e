//! Snapshot tests of every frame's JSON: the field names are a compatibility
//! contract (docs/protocol.md, Frames), so each frame is written out in full here.

use serde_json::{Value, json};
use swarmd_types::ErrorCode;
use swarmd_types::RunStatus;
use swarmd_types::event::Event;
use swarmd_types::ids::{ReqId, TaskId};
use swarmd_types::task::{PolicyOverrides, TaskStatus};

use crate::{CLIENT_TYPES, ClientFrame, ServerFrame, SpawnTaskFrame, SpawnWorktree};

const TASK: &str = "T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b";
const RUN: &str = "R-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b";

fn task() -> TaskId {
    TASK.parse().unwrap()
}

fn req(id: &str) -> ReqId {
    ReqId::new(id).unwrap()
}

/// Every server frame next to its exact JSON.
fn server_snapshots() -> Vec<(ServerFrame, Value)> {
    vec![
        (
            ServerFrame::Spawn {
                req_id: "spawn-1".into(),
                task_id: task(),
                agent: "reviewer".into(),
                attempt: 1,
                capability_token: "swc1.k.p.t".into(),
                worker_handle: "wh-00".into(),
                worker: Some(json!({"subagent_type": "code-reviewer"})),
                directive: "Launch one SubAgent".into(),
                base_url: "http://127.0.0.1:7700".into(),
                deadline: 1_700_000_000_000,
                worktree: None,
                continued_from: Some(task()),
                resume_session: Some("sess-1".into()),
            },
            json!({"type": "spawn", "req_id": "spawn-1", "task_id": TASK, "agent": "reviewer",
                   "attempt": 1, "capability_token": "swc1.k.p.t", "worker_handle": "wh-00",
                   "worker": {"subagent_type": "code-reviewer"}, "directive": "Launch one SubAgent",
                   "base_url": "http://127.0.0.1:7700", "deadline": 1_700_000_000_000u64,
                   "continued_from": TASK, "resume_session": "sess-1"}),
        ),
        (
            ServerFrame::Spawn {
                req_id: "spawn-2".into(),
                task_id: task(),
                agent: "coder".into(),
                attempt: 2,
                capability_token: "swc1.k.p.t".into(),
                worker_handle: "wh-01".into(),
                worker: None,
                directive: "Launch one SubAgent".into(),
                base_url: "http://127.0.0.1:7700".into(),
                deadline: 1_700_000_000_000,
                worktree: Some(SpawnWorktree {
                    path: "/var/lib/swarmd/worktrees/T-1-2".into(),
                    branch: "swarmd/T-1-2".into(),
                    base: "0123abcd".into(),
                }),
                continued_from: None,
                resume_session: None,
            },
            json!({"type": "spawn", "req_id": "spawn-2", "task_id": TASK, "agent": "coder",
                   "attempt": 2, "capability_token": "swc1.k.p.t", "worker_handle": "wh-01",
                   "directive": "Launch one SubAgent", "base_url": "http://127.0.0.1:7700",
                   "deadline": 1_700_000_000_000u64,
                   "worktree": {"path": "/var/lib/swarmd/worktrees/T-1-2",
                                "branch": "swarmd/T-1-2", "base": "0123abcd"}}),
        ),
        (
            ServerFrame::Ask {
                req_id: "ask-1".into(),
                task_id: task(),
                question: json!({"reason": "tests fail"}),
            },
            json!({"type": "ask", "req_id": "ask-1", "task_id": TASK, "question": {"reason": "tests fail"}}),
        ),
        (
            ServerFrame::HookBefore {
                req_id: "hook-1".into(),
                task_id: task(),
                agent: "a".into(),
                attempt: 2,
            },
            json!({"type": "hook_before", "req_id": "hook-1", "task_id": TASK, "agent": "a", "attempt": 2}),
        ),
        (
            ServerFrame::HookAfter {
                req_id: "hook-2".into(),
                task_id: task(),
                agent: "a".into(),
                attempt: 2,
                result: json!({"ok": true}),
            },
            json!({"type": "hook_after", "req_id": "hook-2", "task_id": TASK, "agent": "a",
                   "attempt": 2, "result": {"ok": true}}),
        ),
        (
            ServerFrame::Cancel {
                req_id: "spawn-1".into(),
                task_id: task(),
                attempt: 1,
                reason: "cancelled".into(),
            },
            json!({"type": "cancel", "req_id": "spawn-1", "task_id": TASK, "attempt": 1, "reason": "cancelled"}),
        ),
        (
            ServerFrame::TaskAccepted {
                req_id: req("c-1"),
                task_id: task(),
            },
            json!({"type": "task_accepted", "req_id": "c-1", "task_id": TASK}),
        ),
        (
            ServerFrame::TaskEvent {
                task_id: task(),
                attempt: None,
                seq: 7,
                event: Event::TaskQueued { task_id: task() },
            },
            json!({"type": "task_event", "task_id": TASK, "attempt": null, "seq": 7,
                   "event": {"kind": "task_queued", "task_id": TASK}}),
        ),
        (
            ServerFrame::TaskDone {
                task_id: task(),
                attempt: 1,
                status: TaskStatus::Pass,
                ok: true,
                value: json!("done"),
            },
            json!({"type": "task_done", "task_id": TASK, "attempt": 1, "status": "pass", "ok": true, "value": "done"}),
        ),
        (
            ServerFrame::RunDone {
                run_id: RUN.parse().unwrap(),
                flow: "review".into(),
                status: RunStatus::Passed,
                result: Some(json!({"ok": 1})),
                error: None,
            },
            json!({"type": "run_done", "run_id": RUN, "flow": "review", "status": "passed",
                   "result": {"ok": 1}}),
        ),
        (
            ServerFrame::RunDone {
                run_id: RUN.parse().unwrap(),
                flow: "review".into(),
                status: RunStatus::Failed,
                result: None,
                error: Some("step failed".into()),
            },
            json!({"type": "run_done", "run_id": RUN, "flow": "review", "status": "failed",
                   "error": "step failed"}),
        ),
        (
            ServerFrame::error(Some(req("c-2")), ErrorCode::BadRequest, "no"),
            json!({"type": "error", "req_id": "c-2", "code": "bad_request", "error": "no"}),
        ),
        (
            ServerFrame::error(None, ErrorCode::BadRequest, "no"),
            json!({"type": "error", "code": "bad_request", "error": "no"}),
        ),
    ]
}

/// Every client frame next to its exact JSON.
fn client_snapshots() -> Vec<(ClientFrame, Value)> {
    vec![
        (
            ClientFrame::SpawnAck {
                req_id: req("spawn-1"),
                value: json!({"summary": "ok"}),
                ok: false,
                error: Some("tests fail".into()),
                stats: Some(json!({"tokens": 12})),
            },
            json!({"type": "spawn_ack", "req_id": "spawn-1", "value": {"summary": "ok"}, "ok": false,
                   "error": "tests fail", "stats": {"tokens": 12}}),
        ),
        (
            ClientFrame::SpawnHalt {
                req_id: req("spawn-1"),
                value: Some(json!(3)),
                reason: Some("enough".into()),
            },
            json!({"type": "spawn_halt", "req_id": "spawn-1", "value": 3, "reason": "enough"}),
        ),
        (
            ClientFrame::Answer {
                req_id: req("ask-1"),
                value: json!({"ok": true}),
            },
            json!({"type": "answer", "req_id": "ask-1", "value": {"ok": true}}),
        ),
        (
            ClientFrame::HookAck {
                req_id: req("hook-1"),
                ok: false,
                reason: Some("not now".into()),
            },
            json!({"type": "hook_ack", "req_id": "hook-1", "ok": false, "reason": "not now"}),
        ),
        (
            ClientFrame::SpawnTask(Box::new(SpawnTaskFrame {
                req_id: req("c-1"),
                agent: "echo".into(),
                prompt: "hi".into(),
                system: Some("be brief".into()),
                input: Some(json!([1])),
                metadata: Some(json!({"k": "v"}).as_object().unwrap().clone()),
                layers: Some(vec!["main_ai".into()]),
                policy: Some(PolicyOverrides {
                    max_attempts: Some(2),
                    ..PolicyOverrides::default()
                }),
                delegate: true,
                continue_from: Some(task()),
            })),
            json!({"type": "spawn_task", "req_id": "c-1", "agent": "echo", "prompt": "hi",
                   "system": "be brief", "input": [1], "metadata": {"k": "v"}, "layers": ["main_ai"],
                   "policy": {"max_attempts": 2}, "delegate": true,
                   "continue_from": task().to_string()}),
        ),
        (
            ClientFrame::CancelTask {
                req_id: req("c-3"),
                task_id: task(),
            },
            json!({"type": "cancel_task", "req_id": "c-3", "task_id": TASK}),
        ),
        (
            ClientFrame::Subscribe {
                req_id: req("c-4"),
                task_id: task(),
                after_seq: Some(41),
            },
            json!({"type": "subscribe", "req_id": "c-4", "task_id": TASK, "after_seq": 41}),
        ),
    ]
}

/// A client frame as serde reads it; the daemon adds its bounds on top.
fn decode(text: &str) -> serde_json::Result<ClientFrame> {
    serde_json::from_str(text)
}

#[test]
fn server_frames_serialize_to_the_spec_fields_and_back() {
    for (frame, expected) in server_snapshots() {
        let json = serde_json::to_value(&frame).unwrap();
        assert_eq!(json, expected);
        let text = serde_json::to_string(&frame).unwrap();
        let back: ServerFrame = serde_json::from_str(&text).unwrap();
        assert_eq!(back, frame);
    }
}

#[test]
fn client_frames_decode_from_the_spec_fields_and_back() {
    let mut types = Vec::new();
    for (frame, json) in client_snapshots() {
        assert_eq!(decode(&json.to_string()).unwrap(), frame);
        assert_eq!(serde_json::to_value(&frame).unwrap(), json);
        types.push(json["type"].as_str().unwrap().to_owned());
    }
    assert_eq!(types, CLIENT_TYPES, "every client type has a snapshot");
}

#[test]
fn client_defaults_match_the_spec() {
    let ack = decode(r#"{"type":"spawn_ack","req_id":"r"}"#).unwrap();
    assert_eq!(
        ack,
        ClientFrame::SpawnAck {
            req_id: req("r"),
            value: Value::Null,
            ok: true,
            error: None,
            stats: None
        }
    );
    let ClientFrame::SpawnTask(spawn) =
        decode(r#"{"type":"spawn_task","req_id":"r","agent":"a","prompt":"p","extra":1}"#).unwrap()
    else {
        panic!("not a spawn_task");
    };
    assert!(!spawn.delegate);
    assert_eq!((spawn.layers, spawn.policy), (None, None));
    let halt = decode(r#"{"type":"spawn_halt","req_id":"r"}"#).unwrap();
    assert_eq!(
        halt,
        ClientFrame::SpawnHalt {
            req_id: req("r"),
            value: None,
            reason: None
        }
    );
}
