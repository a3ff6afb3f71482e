//! Registry tests of a session's presence: a stale role holder taken over
//! with its parked spawns (and their cancels following them), and MCP
//! presence standing in for a socket.

use serde_json::json;
use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_spawner::operator::{SpawnFrame, SpawnReply};

use super::tests::{manual, queued, roles};
use super::*;
use crate::testing::Harness;

#[tokio::test]
async fn a_stale_role_holder_is_taken_over_with_its_parked_spawns() {
    let (harness, clock) = manual(3600);
    let registry = &harness.registry;
    let old = registry
        .login(&harness.engine, roles(&["main-ai", "senior"]))
        .await
        .unwrap();
    let old_session = registry.get(&old.sid).unwrap();
    let frame = spawn_frame("wh-1");
    let channel = registry.session(&old.sid).unwrap().spawn_channel.unwrap();
    let receipt = channel.spawn(frame).await.unwrap();

    // Within the grace period, or while a socket is attached, the role stays.
    clock.advance_ms(29_000);
    let early = registry.login(&harness.engine, roles(&["main-ai"])).await;
    assert!(
        matches!(early, Err(SessionError::RoleTaken(_))),
        "{early:?}"
    );
    let socket = old_session.outbox.attach();
    clock.advance_ms(60_000);
    let attached = registry.login(&harness.engine, roles(&["main-ai"])).await;
    assert!(
        matches!(attached, Err(SessionError::RoleTaken(_))),
        "{attached:?}"
    );
    assert!(old_session.outbox.detach(socket.conn));

    clock.advance_ms(31_000);
    let new = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    assert!(registry.get(&old.sid).is_none(), "the stale session ended");
    assert!(registry.authenticate(&old.token).is_none());
    assert_eq!(registry.by_role("main-ai").unwrap().sid, new.sid);
    assert!(
        registry.by_role("senior").is_none(),
        "its other roles are free"
    );
    let stored = harness.engine.stored_sessions().await.unwrap();
    assert_eq!(stored.iter().map(|s| s.sid).collect::<Vec<_>>(), [new.sid]);

    // The parked spawn now waits in the new session, and its reply there
    // reaches the attempt that sent it.
    let new_session = registry.get(&new.sid).unwrap();
    let frames = queued(&new_session);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["req_id"], receipt.req_id.as_str());
    let reply = SpawnReply::Halt {
        value: None,
        reason: Some("moved".into()),
    };
    new_session
        .pending
        .complete(&receipt.req_id, Reply::Spawn(reply.clone()))
        .unwrap();
    assert_eq!(receipt.reply.await.unwrap(), reply);

    // A cancel through the channel the attempt holds (the old session's)
    // reaches the session the spawn moved to.
    let frame = spawn_frame("wh-2");
    let moving = registry
        .login(&harness.engine, roles(&["mover"]))
        .await
        .unwrap();
    let moving_session = registry.get(&moving.sid).unwrap();
    let channel = registry
        .session(&moving.sid)
        .unwrap()
        .spawn_channel
        .unwrap();
    let attempt = frame.attempt;
    let receipt = channel.spawn(frame).await.unwrap();
    clock.advance_ms(31_000);
    let taker = registry
        .login(&harness.engine, roles(&["mover"]))
        .await
        .unwrap();
    let taker_session = registry.get(&taker.sid).unwrap();
    assert!(moving_session.is_closed());
    // The taker's socket took the spawn already: the cancel must follow it.
    taker_session.outbox.ack(Some(u64::MAX), 0);
    channel.cancel(&receipt.req_id, attempt, "stop");
    let frames = queued(&taker_session);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(
        (&frames[0]["type"], &frames[0]["req_id"]),
        (&json!("cancel"), &json!(receipt.req_id))
    );
    assert!(receipt.reply.await.is_err(), "the waiter is gone");
}

fn spawn_frame(handle: &str) -> SpawnFrame {
    SpawnFrame {
        attempt: AttemptId::new(TaskId::new(), 1),
        agent: "a".into(),
        credential: WorkerCredential::new("swc1.t".into(), handle.into(), u64::MAX),
        worker_binding: None,
        directive: String::new(),
        base_url: String::new(),
        lease_deadline_ms: 0,
        worktree: None,
        continued_from: None,
        resume_session: None,
    }
}

#[tokio::test]
async fn a_spawn_sent_to_a_session_just_taken_over_follows_the_roles() {
    let (harness, clock) = manual(3600);
    let registry = &harness.registry;
    let old = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    // A dispatch found the holder, then read its task while the role was
    // taken over: it sends on the channel it found.
    let channel = registry.session(&old.sid).unwrap().spawn_channel.unwrap();
    clock.advance_ms(31_000);
    let new = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let new_session = registry.get(&new.sid).unwrap();
    assert!(queued(&new_session).is_empty());

    let late = spawn_frame("wh-late");
    let attempt = late.attempt;
    let receipt = channel.spawn(late).await.unwrap();
    let frames = queued(&new_session);
    assert_eq!(frames.len(), 1, "the spawn waits for the new holder");
    assert_eq!(frames[0]["req_id"], receipt.req_id.as_str());

    // Its cancel, sent on the old channel, follows it too.
    new_session.outbox.ack(Some(u64::MAX), 0);
    channel.cancel(&receipt.req_id, attempt, "stop");
    let frames = queued(&new_session);
    assert_eq!(
        (&frames[0]["type"], &frames[0]["req_id"]),
        (&json!("cancel"), &json!(receipt.req_id))
    );
    assert!(receipt.reply.await.is_err(), "the waiter is gone");
}

#[tokio::test(start_paused = true)]
async fn mcp_presence_counts_as_connected_for_its_window_and_while_polling() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    assert!(!session.connected(), "no socket, no MCP request");

    session.mark_present(std::time::Duration::from_secs(60));
    assert!(session.connected());
    tokio::time::advance(std::time::Duration::from_secs(59)).await;
    assert!(session.connected(), "inside the window");
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    assert!(!session.connected(), "the window lapsed");

    let polling = session.polling();
    assert!(session.connected(), "a pop in flight");
    drop(polling);
    assert!(!session.connected());

    // A shorter window never cuts a longer one short.
    session.mark_present(std::time::Duration::from_secs(60));
    session.mark_present(std::time::Duration::from_secs(5));
    tokio::time::advance(std::time::Duration::from_secs(30)).await;
    assert!(session.connected());
}
