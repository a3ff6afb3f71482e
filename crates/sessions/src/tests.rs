//! Registry tests: exclusive roles and their release, persistence and
//! restore, idle expiry, the directory's view, and the bridges over the
//! outbox and the pending table.

use std::sync::Arc;

use serde_json::{Value, json};
use swarmd_engine::clock::ManualClock;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_engine::{SpawnError, WorkerCredential};
use swarmd_spawner::operator::{BridgeError, HookAck, HookRequest, SpawnFrame};

use super::*;
use crate::testing::{Harness, default_settings, eventually};

pub(super) fn roles(names: &[&str]) -> LoginRequest {
    LoginRequest {
        roles: names.iter().map(|r| (*r).to_owned()).collect(),
        ..LoginRequest::default()
    }
}

pub(super) fn manual(idle_secs: u64) -> (Harness, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let settings = SessionSettings {
        idle: Duration::from_secs(idle_secs),
        ..default_settings()
    };
    let harness = Harness::build(settings, clock.clone(), "http://127.0.0.1:9");
    (harness, clock)
}

/// The texts of the frames queued in a session's outbox, as JSON.
pub(super) fn queued(session: &Session) -> Vec<Value> {
    session
        .outbox
        .peek(usize::MAX)
        .frames
        .into_iter()
        .map(|(_, frame)| match frame {
            Outgoing::Text { text, .. } => serde_json::from_str(text.as_str()).unwrap(),
            Outgoing::Spawn(spawn) => json!({"type": "spawn", "req_id": spawn.req_id}),
        })
        .collect()
}

#[tokio::test]
async fn roles_are_exclusive_until_the_holder_is_deleted() {
    let harness = Harness::new().await;
    let registry = &harness.registry;
    let first = registry
        .login(&harness.engine, roles(&["main-ai", "senior", "main-ai"]))
        .await
        .unwrap();
    assert_eq!(first.roles, ["main-ai", "senior"], "duplicates collapse");
    let taken = registry
        .login(&harness.engine, roles(&["worker-x", "senior"]))
        .await
        .unwrap_err();
    assert!(
        matches!(taken, SessionError::RoleTaken(ref r) if r == "senior"),
        "{taken}"
    );
    assert_eq!(registry.len(), 1, "a refused login leaves nothing behind");

    registry.delete(&harness.engine, &first.sid).await.unwrap();
    assert!(registry.authenticate(&first.token).is_none());
    assert!(matches!(
        registry.delete(&harness.engine, &first.sid).await,
        Err(SessionError::NotFound)
    ));
    let second = registry
        .login(&harness.engine, roles(&["senior"]))
        .await
        .unwrap();
    assert_eq!(registry.by_role("senior").unwrap().sid, second.sid);
}

#[tokio::test]
async fn bad_logins_are_refused() {
    let harness = Harness::new().await;
    for bad in [roles(&["Main"]), roles(&[""]), roles(&[&"r".repeat(65)])] {
        let error = harness
            .registry
            .login(&harness.engine, bad)
            .await
            .unwrap_err();
        assert!(matches!(error, SessionError::BadRequest(_)), "{error}");
    }
    let parsed: LoginRequest =
        serde_json::from_value(json!({"desc": "x", "capability_manifest": {"tools": []}})).unwrap();
    assert_eq!(parsed.desc.as_deref(), Some("x"));
    assert_eq!(parsed.capability_manifest, Some(json!({"tools": []})));
    assert_eq!(
        parsed.dialect(),
        Dialect::Upstream,
        "the upstream login shape"
    );
    let named: LoginRequest = serde_json::from_value(
        json!({"desc": "x", "capability_manifest": {}, "dialect": "standard"}),
    )
    .unwrap();
    assert_eq!(named.dialect(), Dialect::Standard);
    let with_roles: LoginRequest = serde_json::from_value(
        json!({"desc": "x", "capability_manifest": {}, "roles": ["main-ai"]}),
    )
    .unwrap();
    assert_eq!(with_roles.dialect(), Dialect::Standard);
}

#[tokio::test]
async fn sessions_are_persisted_and_restored_with_their_token() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let stored = harness.engine.stored_sessions().await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].sid, login.sid);
    assert!(
        !stored[0].token_digest.contains(&login.token),
        "only the digest is stored"
    );

    let restarted = SessionRegistry::new(default_settings(), harness.engine.clock());
    restarted.restore(&harness.engine, stored);
    let session = restarted.authenticate(&login.token).unwrap();
    assert_eq!(
        (session.sid, session.roles.clone()),
        (login.sid, vec!["main-ai".to_owned()])
    );
    assert_eq!(restarted.by_role("main-ai").unwrap().sid, login.sid);

    harness
        .registry
        .delete(&harness.engine, &login.sid)
        .await
        .unwrap();
    let stored = harness.engine.stored_sessions().await.unwrap();
    assert!(stored.is_empty(), "deletion reaches the store");
}

#[tokio::test]
async fn idle_sessions_expire_and_release_their_roles() {
    let (harness, clock) = manual(60);
    let registry = &harness.registry;
    let idle = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let busy = registry
        .login(&harness.engine, roles(&["senior"]))
        .await
        .unwrap();
    let attached = registry
        .login(&harness.engine, roles(&["observer-1"]))
        .await
        .unwrap();
    let socket = registry.get(&attached.sid).unwrap().outbox.attach();

    clock.advance_ms(59_000);
    assert!(registry.authenticate(&busy.token).is_some(), "activity");
    assert_eq!(registry.sweep(&harness.engine).await, 0);
    clock.advance_ms(1_000);
    assert_eq!(registry.sweep(&harness.engine).await, 1);
    assert!(registry.get(&idle.sid).is_none());
    assert!(
        registry.by_role("main-ai").is_none(),
        "its role is free again"
    );
    assert!(registry.get(&busy.sid).is_some());
    assert!(
        registry.get(&attached.sid).is_some(),
        "a socket keeps a session alive"
    );
    assert_eq!(*socket.close.borrow(), None);
    registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();

    // The sweep wrote the busy session's activity back.
    let stored = harness.engine.stored_sessions().await.unwrap();
    let record = stored.iter().find(|r| r.sid == busy.sid).unwrap();
    assert_eq!(record.last_seen_ms, 1_700_000_059_000);
    assert!(stored.iter().all(|r| r.sid != idle.sid));
}

#[tokio::test]
async fn a_request_never_revives_an_idle_session() {
    let (harness, clock) = manual(60);
    let registry = &harness.registry;
    let idle = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let attached = registry
        .login(&harness.engine, roles(&["senior"]))
        .await
        .unwrap();
    let _socket = registry.get(&attached.sid).unwrap().outbox.attach();

    clock.advance_ms(59_999);
    assert!(registry.authenticate(&idle.token).is_some(), "not idle yet");
    clock.advance_ms(60_000);
    assert!(
        registry.authenticate(&idle.token).is_none(),
        "idle for the whole period: refused before any sweep"
    );
    assert!(
        registry.authenticate(&idle.token).is_none(),
        "the refusal did not count as activity"
    );
    assert!(
        registry.authenticate(&attached.token).is_some(),
        "a socket keeps a session alive"
    );
    assert_eq!(registry.sweep(&harness.engine).await, 1);
}

#[tokio::test]
async fn sessions_that_expired_while_down_are_not_restored() {
    let (harness, clock) = manual(60);
    let stale = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    clock.advance_ms(30_000);
    let fresh = harness
        .registry
        .login(&harness.engine, roles(&["senior"]))
        .await
        .unwrap();
    clock.advance_ms(31_000);
    let stored = harness.engine.stored_sessions().await.unwrap();
    assert_eq!(stored.len(), 2);

    let restarted = SessionRegistry::new(
        SessionSettings {
            idle: Duration::from_secs(60),
            ..default_settings()
        },
        harness.engine.clock(),
    );
    restarted.restore(&harness.engine, stored);
    assert!(restarted.get(&stale.sid).is_none());
    assert!(restarted.authenticate(&stale.token).is_none());
    assert!(restarted.by_role("main-ai").is_none(), "its role is free");
    assert!(restarted.authenticate(&fresh.token).is_some());
    // Its record is deleted too, so no later boot brings it back.
    let mut left = Vec::new();
    for _ in 0..100 {
        left = harness.engine.stored_sessions().await.unwrap();
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        left.iter().map(|r| r.sid).collect::<Vec<_>>(),
        vec![fresh.sid]
    );
}

#[tokio::test]
async fn the_directory_gives_hooks_to_main_ai_kinds_and_a_senior_while_connected() {
    let harness = Harness::new().await;
    let registry = &harness.registry;
    let main = registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let automate = registry
        .login(
            &harness.engine,
            LoginRequest {
                kind: SessionKind::Automate,
                ..roles(&["bot"])
            },
        )
        .await
        .unwrap();
    let info = registry.session(&main.sid).unwrap();
    assert!(info.hooks.is_some() && info.spawn_channel.is_some());
    assert!(info.senior.is_none(), "not connected");
    let info = registry.by_role("bot").unwrap();
    assert_eq!(info.sid, automate.sid);
    assert!(info.hooks.is_none(), "automate sessions take no hooks");
    assert!(info.spawn_channel.is_some());
    let _socket = registry.get(&main.sid).unwrap().outbox.attach();
    assert!(registry.session(&main.sid).unwrap().senior.is_some());
    assert_eq!(registry.connected(), 1);
}

#[tokio::test]
async fn bridge_requests_park_and_complete_by_req_id() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let info = harness.registry.session(&login.sid).unwrap();
    let task_id = TaskId::new();
    let request = HookRequest {
        task_id,
        agent: "a".into(),
        attempt: 1,
    };
    let hooks = info.hooks.clone().unwrap();
    let before = tokio::spawn(async move { hooks.before(request).await });
    eventually("hook_before queued", || session.parked() == 1).await;
    let frame = queued(&session).remove(0);
    assert_eq!(frame["type"], "hook_before");
    let req_id = frame["req_id"].as_str().unwrap().to_owned();
    let ack = HookAck {
        ok: false,
        reason: Some("not now".into()),
    };
    session
        .pending
        .complete(&req_id, Reply::Hook(ack.clone()))
        .unwrap();
    assert_eq!(before.await.unwrap().unwrap(), ack);

    let frame = SpawnFrame {
        attempt: AttemptId::new(task_id, 1),
        agent: "a".into(),
        credential: WorkerCredential::new("swc1.t".into(), "wh-1".into(), u64::MAX),
        worker_binding: None,
        directive: String::new(),
        base_url: String::new(),
        lease_deadline_ms: 0,
        worktree: None,
        continued_from: None,
        resume_session: None,
    };
    let channel = info.spawn_channel.clone().unwrap();
    let receipt = channel.spawn(frame).await.unwrap();
    assert!(receipt.req_id.starts_with("spawn-"));
    channel.cancel(&receipt.req_id, AttemptId::new(task_id, 1), "cancelled");
    let frames = queued(&session);
    let kinds: Vec<_> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["hook_before", "cancel"],
        "an undelivered spawn is withdrawn"
    );
    assert_eq!(frames[1]["req_id"], receipt.req_id.as_str());
    assert!(receipt.reply.await.is_err());
}

#[tokio::test]
async fn a_deleted_session_closes_its_socket_and_fails_its_waiters() {
    let harness = Harness::new().await;
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let socket = session.outbox.attach();
    let info = harness.registry.session(&login.sid).unwrap();
    let senior = info.senior.clone().unwrap();
    let asking = tokio::spawn(async move {
        senior
            .ask(AttemptId::new(TaskId::new(), 1), json!("why?"))
            .await
    });
    eventually("ask queued", || session.parked() == 1).await;

    harness
        .registry
        .delete(&harness.engine, &login.sid)
        .await
        .unwrap();
    assert_eq!(*socket.close.borrow(), Some(CloseReason::Deleted));
    assert_eq!(asking.await.unwrap(), Err(BridgeError::SessionGone));
    // Its bridges refuse new work.
    let channel = info.spawn_channel.unwrap();
    let frame = SpawnFrame {
        attempt: AttemptId::new(TaskId::new(), 1),
        agent: "a".into(),
        credential: WorkerCredential::new("swc1.t".into(), "wh-1".into(), u64::MAX),
        worker_binding: None,
        directive: String::new(),
        base_url: String::new(),
        lease_deadline_ms: 0,
        worktree: None,
        continued_from: None,
        resume_session: None,
    };
    assert!(matches!(
        channel.spawn(frame).await,
        Err(SpawnError::NoOperator(_))
    ));
}
