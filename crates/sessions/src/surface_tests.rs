//! Surface tests: a client frame read by its session (replies taken by
//! their waiters, refusals as `error` frames), and a batch delivered to a
//! sink, acknowledged only once the sink took it all.

use std::convert::identity;

use futures_util::sink;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::*;
use crate::LoginRequest;
use crate::dialect::Dialect;
use crate::outbox::FrameClass;
use crate::pending::Waiter;
use crate::testing::Harness;
use crate::tests::{queued, roles};

/// The `error` frame `text` is refused with, as JSON.
fn refusal(session: &Session, text: &str) -> Value {
    let frame = session.read(text).unwrap_err();
    serde_json::from_str(encode(&frame).as_str()).unwrap()
}

async fn session(harness: &Harness) -> std::sync::Arc<Session> {
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    harness.registry.get(&login.sid).unwrap()
}

fn text(body: &str) -> Outgoing {
    Outgoing::Text {
        class: FrameClass::Notice,
        text: Utf8Bytes::from(body.to_owned()),
    }
}

#[tokio::test]
async fn a_reply_goes_to_its_waiter_and_other_frames_to_the_surface() {
    let harness = Harness::new().await;
    let session = session(&harness).await;
    let (tx, rx) = oneshot::channel();
    session.pending.insert("ask-1".into(), Waiter::Ask(tx));

    let read = session.read(r#"{"type":"answer","req_id":"ask-1","value":{"ok":true}}"#);
    assert!(matches!(read, Ok(None)), "{read:?}");
    assert_eq!(rx.await.unwrap(), json!({"ok": true}));

    let task = swarmd_engine::ids::TaskId::new();
    let cancel = json!({"type": "cancel_task", "req_id": "c-1", "task_id": task}).to_string();
    match session.read(&cancel) {
        Ok(Some(ClientFrame::CancelTask { task_id, .. })) => assert_eq!(task_id, task),
        other => panic!("not handed to the surface: {other:?}"),
    }
}

#[tokio::test]
async fn a_reply_nobody_waits_for_and_a_bad_frame_are_refused_with_their_codes() {
    let harness = Harness::new().await;
    let session = session(&harness).await;

    let unknown = refusal(&session, r#"{"type":"answer","req_id":"ask-9","value":1}"#);
    assert_eq!(unknown["code"], "unknown_request", "{unknown}");
    assert_eq!(unknown["req_id"], "ask-9", "{unknown}");

    let bad = refusal(&session, r#"{"type":"nonsense","req_id":"x"}"#);
    assert_eq!(bad["code"], "bad_request", "{bad}");
    assert_eq!(bad["req_id"], "x", "{bad}");

    // A reply of another kind than its request expects.
    let (tx, _rx) = oneshot::channel();
    session.pending.insert("ask-2".into(), Waiter::Ask(tx));
    let wrong = refusal(
        &session,
        r#"{"type":"hook_ack","req_id":"ask-2","ok":true}"#,
    );
    assert_eq!(wrong["code"], "bad_request", "{wrong}");
    assert_eq!(wrong["req_id"], "ask-2", "{wrong}");

    // A late spawn reply is no error: its attempt ended without it.
    let late = session.read(r#"{"type":"spawn_ack","req_id":"spawn-9"}"#);
    assert!(matches!(late, Ok(None)), "{late:?}");
}

#[tokio::test]
async fn a_delivered_batch_is_acknowledged_and_a_refused_one_stays_queued() {
    let harness = Harness::new().await;
    let session = session(&harness).await;
    let upstream = UpstreamAttempts::default();
    for body in [r#"{"n":1}"#, r#"{"n":2}"#] {
        session.outbox.push(text(body)).unwrap();
    }

    let refusing = sink::unfold((), |(), _text: Utf8Bytes| async { Err::<(), _>("gone") });
    futures_util::pin_mut!(refusing);
    let batch = session.outbox.peek(64);
    let refused = session
        .deliver(&harness.engine, &upstream, batch, &mut refusing, identity)
        .await;
    assert_eq!(refused, Err("gone"));
    assert_eq!(queued(&session), [json!({"n": 1}), json!({"n": 2})]);

    let mut sent = Vec::new();
    let batch = session.outbox.peek(64);
    let Ok(()) = session
        .deliver(&harness.engine, &upstream, batch, &mut sent, identity)
        .await;
    let sent: Vec<&str> = sent.iter().map(Utf8Bytes::as_str).collect();
    assert_eq!(sent, [r#"{"n":1}"#, r#"{"n":2}"#]);
    assert!(queued(&session).is_empty(), "acknowledged once sent");
}

#[tokio::test]
async fn an_upstream_session_names_a_task_by_its_step_id() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(
            &harness.engine,
            LoginRequest {
                dialect: Some(Dialect::Upstream),
                ..roles(&["main-ai"])
            },
        )
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let task = swarmd_engine::ids::TaskId::new();
    let step = crate::dialect::step_id(&task.to_string()).unwrap();
    let cancel = json!({"type": "cancel_task", "req_id": "c-1", "task_id": step}).to_string();
    match session.read(&cancel) {
        Ok(Some(ClientFrame::CancelTask { task_id, .. })) => assert_eq!(task_id, task),
        other => panic!("the step id was not read as its task: {other:?}"),
    }
}
