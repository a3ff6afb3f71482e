//! The daemon's side of the frames: the text `encode` writes, what
//! `decode` refuses and why, how a reply reaches its waiter, and the `spawn`
//! frame of a delegated attempt. The frames' own JSON is pinned by the
//! wire crate's snapshot tests.

use serde_json::json;
use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::{AttemptId, TaskId};

use super::*;

const TASK: &str = "T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b";

fn task() -> TaskId {
    TASK.parse().unwrap()
}

fn req(id: &str) -> ReqId {
    ReqId::new(id).unwrap()
}

#[test]
fn encode_writes_the_frames_json() {
    let frame = ServerFrame::TaskAccepted {
        req_id: req("c-1"),
        task_id: task(),
    };
    let text = encode(&frame);
    let back: Value = serde_json::from_str(text.as_str()).unwrap();
    assert_eq!(
        back,
        json!({"type": "task_accepted", "req_id": "c-1", "task_id": TASK})
    );
}

#[test]
fn decode_reads_a_valid_frame_with_its_defaults() {
    assert_eq!(
        decode(r#"{"type":"spawn_ack","req_id":"r","extra":1}"#).unwrap(),
        ClientFrame::SpawnAck {
            req_id: req("r"),
            value: Value::Null,
            ok: true,
            error: None,
            stats: None
        }
    );
}

#[test]
fn replies_reach_their_waiter_and_requests_are_handed_back() {
    let hook = ClientFrame::HookAck {
        req_id: req("hook-1"),
        ok: false,
        reason: Some("not now".into()),
    };
    let (req_id, reply) = into_reply(hook).unwrap();
    assert_eq!(req_id, req("hook-1"));
    assert!(matches!(reply, Reply::Hook(HookAck { ok: false, .. })));
    let halt = ClientFrame::SpawnHalt {
        req_id: req("spawn-1"),
        value: None,
        reason: Some("enough".into()),
    };
    let (_, reply) = into_reply(halt).unwrap();
    assert!(matches!(reply, Reply::Spawn(SpawnReply::Halt { .. })));
    let cancel = ClientFrame::CancelTask {
        req_id: req("c-3"),
        task_id: task(),
    };
    assert_eq!(*into_reply(cancel.clone()).unwrap_err(), cancel);
}

#[test]
fn decode_errors_say_what_is_wrong_and_keep_the_req_id() {
    let cases = [
        ("not json", None, "not a JSON object"),
        ("[1,2]", None, "not a JSON object"),
        (r#"{"req_id":"r1"}"#, Some("r1"), "the frame has no `type`"),
        (
            r#"{"type":7,"req_id":"r1"}"#,
            Some("r1"),
            "`type` must be a string",
        ),
        (
            r#"{"type":"launch","req_id":"r2"}"#,
            Some("r2"),
            "unknown frame type `launch`",
        ),
        (
            r#"{"type":"answer","req_id":"r3"}"#,
            Some("r3"),
            "malformed `answer` frame",
        ),
        (
            r#"{"type":"cancel_task","req_id":"r4","task_id":"T-x"}"#,
            Some("r4"),
            "malformed `cancel_task`",
        ),
        (
            r#"{"type":"answer","req_id":""}"#,
            None,
            "malformed `answer` frame",
        ),
    ];
    for (text, req_id, message) in cases {
        let error = decode(text).unwrap_err();
        assert_eq!(error.req_id.as_ref().map(ReqId::as_str), req_id, "{text}");
        assert!(error.message.contains(message), "{text}: {}", error.message);
    }
}

#[test]
fn the_spawn_frame_carries_the_credential_and_binding() {
    let frame = SpawnFrame {
        attempt: AttemptId::new(task(), 3),
        agent: "fixer".into(),
        credential: WorkerCredential::new("swc1.a.b.c".into(), "wh-ab".into(), 99),
        worker_binding: None,
        directive: "do it".into(),
        base_url: "http://h:1".into(),
        lease_deadline_ms: 5,
        worktree: None,
        continued_from: None,
        resume_session: None,
    };
    let json = serde_json::to_value(spawn("spawn-9", &frame)).unwrap();
    assert_eq!(
        json,
        json!({"type": "spawn", "req_id": "spawn-9", "task_id": TASK, "agent": "fixer", "attempt": 3,
               "capability_token": "swc1.a.b.c", "worker_handle": "wh-ab", "directive": "do it",
               "base_url": "http://h:1", "deadline": 5})
    );
}

mod decode_properties {
    //! Arbitrary and adversarial client frames: decoding never panics, and a
    //! frame it accepts is never nested past the depth bound.

    use proptest::prelude::*;

    use super::*;

    /// A frame of a client type with a value nested `depth` deep.
    fn deep_frame(kind: &str, depth: usize) -> String {
        let value = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        format!(
            r#"{{"type":"{kind}","req_id":"r-1","agent":"a","prompt":"p","value":{value},"input":{value}}}"#
        )
    }

    fn frames() -> impl Strategy<Value = String> {
        prop_oneof![
            "\\PC{0,200}",
            r#"[\[\]{}",:a-z_0-9\\ ]{0,200}"#,
            (prop::sample::select(CLIENT_TYPES.to_vec()), 0usize..300)
                .prop_map(|(kind, depth)| deep_frame(kind, depth)),
            (
                prop::sample::select(CLIENT_TYPES.to_vec()),
                "\\PC{0,40}",
                any::<i64>()
            )
                .prop_map(|(kind, text, n)| {
                    serde_json::json!({"type": kind, "req_id": text, "task_id": text,
                        "agent": text, "prompt": text, "value": n, "ok": n % 2 == 0,
                        "after_seq": n, "policy": {"max_attempts": n}})
                    .to_string()
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn decoding_never_panics_and_never_accepts_too_deep(text in frames()) {
            match decode(&text) {
                Ok(frame) => {
                    let again = serde_json::to_string(&frame).unwrap();
                    prop_assert!(swarmd_output_store::check_text_depth(again.as_bytes()).is_ok());
                }
                Err(error) => prop_assert!(!error.message.is_empty()),
            }
        }
    }
}
