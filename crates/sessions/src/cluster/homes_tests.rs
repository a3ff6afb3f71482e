//! Sessions across nodes, without a database: a copy of a session homed
//! elsewhere is neither expired nor written by this node, mail becomes
//! frames in the home's outbox whose replies go back as mail, a cancel
//! withdraws its spawn, a move hands the undelivered frames over, and a
//! copy's `task_done` watermark stays where it was read.

use serde_json::json;
use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_spawner::operator::{SpawnFrame, SpawnReply};
use swarmd_types::cluster::{Mail, NewMail, NodeId};

use super::mail::{self, CancelBody, TextBody};
use super::mail_pump::deliver;
use super::postbox::{Postbox, Posted};
use crate::testing::Harness;
use crate::tests::{manual, queued, roles};
use crate::*;

fn elsewhere() -> NodeId {
    uuid::Uuid::from_u128(7)
}

fn here() -> NodeId {
    uuid::Uuid::from_u128(1)
}

fn spawn_frame(task: TaskId) -> SpawnFrame {
    SpawnFrame {
        attempt: AttemptId { task, n: 1 },
        agent: "quick".into(),
        credential: WorkerCredential::new("swc1.t".into(), "wh-h".into(), u64::MAX),
        worker_binding: None,
        directive: "go".into(),
        base_url: "http://127.0.0.1:9".into(),
        lease_deadline_ms: 1,
        worktree: None,
        continued_from: None,
        resume_session: None,
    }
}

fn mail(id: i64, sid: SessionId, kind: &str, req_id: Option<&str>, body: String) -> Mail {
    Mail {
        id,
        sid,
        to_node: None,
        reply_to: Some(elsewhere()),
        kind: kind.to_owned(),
        req_id: req_id.map(str::to_owned),
        body,
    }
}

#[tokio::test]
async fn only_the_home_node_expires_or_writes_a_session() {
    let (harness, clock) = manual(60);
    let registry = &harness.registry;
    let login = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = registry.get(&login.sid).unwrap();
    session.set_elsewhere(Some(elsewhere()));

    clock.advance_ms(120_000);
    assert!(
        registry.authenticate(&login.token).is_some(),
        "its home judges it"
    );
    assert_eq!(registry.sweep(&harness.engine).await, 0);
    assert!(registry.get(&login.sid).is_some());
    let stored = harness.engine.stored_sessions().await.unwrap();
    let record = stored.iter().find(|r| r.sid == login.sid).unwrap();
    assert_eq!(
        record.last_seen_ms, 1_700_000_000_000,
        "a copy writes nothing back"
    );

    // Homed here again, the same session expires.
    session.set_elsewhere(None);
    clock.advance_ms(60_000);
    assert_eq!(registry.sweep(&harness.engine).await, 1);
    assert!(registry.get(&login.sid).is_none());
}

#[tokio::test]
async fn a_copy_keeps_the_watermark_it_was_read_with_while_its_home_routes() {
    let harness = Harness::new().await;
    let registry = &harness.registry;
    let login = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = registry.get(&login.sid).unwrap();
    let read_with = session.delivery.through();
    session.set_elsewhere(Some(elsewhere()));

    // This node routes past events of the session's tasks (to nobody: its
    // home delivers them): its checkpoints leave the copy's watermark.
    registry.routed(read_with + 50);
    registry.checkpoint_delivery(&harness.engine, true).await;
    registry.checkpoint_delivery(&harness.engine, false).await;
    assert_eq!(session.delivery.through(), read_with);

    // Homed here, the same session's watermark follows the router.
    session.set_elsewhere(None);
    registry.checkpoint_delivery(&harness.engine, true).await;
    assert_eq!(session.delivery.through(), read_with + 50);
}

#[tokio::test]
async fn a_relayed_spawn_is_queued_here_and_its_reply_goes_back_as_mail() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let (post, mut sent) = Postbox::channel();
    let task = TaskId::new();

    let body = mail::encode_spawn(&spawn_frame(task));
    let outbox_id = deliver(
        &post,
        here(),
        &session,
        &mail(1, login.sid, mail::SPAWN, Some("spawn-1"), body),
    )
    .expect("a spawn waits for its delivery");
    assert_eq!(
        queued(&session),
        [json!({"type": "spawn", "req_id": "spawn-1"})]
    );
    assert_eq!(session.pending_requests(), 1);
    assert!(session.outbox.acked_through() < outbox_id);

    let ack = SpawnReply::Ack {
        value: json!("done"),
        ok: true,
        error: None,
        stats: None,
    };
    assert_eq!(
        session.answer("spawn-1", Reply::Spawn(ack.clone())),
        Ok(true)
    );
    let reply = mailed(sent.try_recv().expect("the reply is mailed back"));
    assert_eq!(reply.to_node, Some(elsewhere()));
    assert_eq!(reply.kind, mail::REPLY);
    assert_eq!(reply.req_id.as_deref(), Some("spawn-1"));
    assert_eq!(mail::decode_reply(&reply.body), Some(Reply::Spawn(ack)));
    assert_eq!(session.pending_requests(), 0);
}

#[tokio::test]
async fn a_relayed_cancel_withdraws_its_spawn_and_sends_the_cancel_frame() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&[]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let (post, _sent) = Postbox::channel();
    let task = TaskId::new();
    let spawn = mail::encode_spawn(&spawn_frame(task));
    deliver(
        &post,
        here(),
        &session,
        &mail(1, login.sid, mail::SPAWN, Some("spawn-1"), spawn),
    );
    let cancel = mail::encode(&CancelBody {
        task_id: task,
        attempt: 1,
        reason: "cancelled".into(),
    });
    let waits = deliver(
        &post,
        here(),
        &session,
        &mail(2, login.sid, mail::CANCEL, Some("spawn-1"), cancel),
    );
    assert_eq!(waits, None, "a cancel's row goes at once");
    let frames = queued(&session);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["type"], "cancel");
    assert_eq!(frames[0]["req_id"], "spawn-1");
    assert_eq!(session.pending_requests(), 0);

    // Malformed mail is dropped, never a panic.
    assert_eq!(
        deliver(
            &post,
            here(),
            &session,
            &mail(3, login.sid, mail::SPAWN, Some("x"), "{".into())
        ),
        None
    );
    assert_eq!(
        deliver(
            &post,
            here(),
            &session,
            &mail(4, login.sid, "nonsense", None, "{}".into())
        ),
        None
    );
}

#[tokio::test]
async fn a_handed_over_frame_keeps_its_text_and_class() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&[]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let (post, _sent) = Postbox::channel();
    let text = json!({"type": "task_done", "task_id": TaskId::new()}).to_string();
    let body = mail::encode(&TextBody {
        class: FrameClass::Notice.into(),
        text: text.clone(),
    });
    assert!(
        deliver(
            &post,
            here(),
            &session,
            &mail(1, login.sid, mail::TEXT, None, body)
        )
        .is_some()
    );
    let batch = session.outbox.peek(8);
    match &batch.frames[..] {
        [
            (
                _,
                Outgoing::Text {
                    class,
                    text: queued,
                },
            ),
        ] => {
            assert_eq!(class, &FrameClass::Notice);
            assert_eq!(queued.as_str(), text);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_reply_that_came_before_its_handed_over_waiter_still_reaches_it() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&[]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let (post, mut sent) = Postbox::channel();

    // The MainAI answers on the new home before the old home's hand-over
    // of that request arrived: an error for now, kept a while.
    assert!(
        session
            .answer("ask-1", Reply::Answer(json!("yes")))
            .is_err()
    );
    let expects = mail::encode(&Expects::Answer);
    let waiter = mail(1, login.sid, mail::WAITER, Some("ask-1"), expects.clone());
    assert_eq!(deliver(&post, here(), &session, &waiter), None);
    let reply = mailed(sent.try_recv().expect("the kept reply goes to its node"));
    assert_eq!(reply.to_node, Some(elsewhere()));
    assert_eq!(
        mail::decode_reply(&reply.body),
        Some(Reply::Answer(json!("yes")))
    );

    // A request this node sent itself keeps its own waiter.
    let (tx, rx) = tokio::sync::oneshot::channel();
    session.pending.insert("ask-2".into(), Waiter::Ask(tx));
    let mut own = mail(2, login.sid, mail::WAITER, Some("ask-2"), expects);
    own.reply_to = Some(here());
    assert_eq!(deliver(&post, here(), &session, &own), None);
    assert_eq!(session.answer("ask-2", Reply::Answer(json!(2))), Ok(true));
    assert_eq!(rx.await.unwrap(), json!(2));
    assert!(
        sent.try_recv().is_err(),
        "nothing mailed for its own waiter"
    );
}

/// The mail a postbox was handed.
fn mailed(posted: Posted) -> NewMail {
    match posted {
        Posted::Mail(mail) => mail,
        Posted::Flush(_) => panic!("a flush, not mail"),
    }
}
