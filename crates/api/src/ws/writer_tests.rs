//! Writer tests: dead-peer detection, and the text of a parked `spawn` as
//! the writer sends it (`Session::prepare_spawn`), re-minted when its token
//! is about to expire.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use swarmd_engine::clock::ManualClock;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::AttemptId;
use swarmd_engine::task::TaskSpec;
use swarmd_spawner::operator::{SpawnChannel, SpawnFrame};

use super::*;
use crate::ws::tests::support::{Harness, eventually};
use swarmd_config::Config;
use swarmd_sessions::{LoginRequest, Outgoing};

#[tokio::test(start_paused = true)]
async fn a_peer_silent_for_the_limit_is_dead() {
    let liveness = Liveness::new(Duration::from_secs(60));
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(!liveness.is_dead());
    liveness.heard();
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(!liveness.is_dead(), "exactly the limit is still alive");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(liveness.is_dead());
    liveness.heard();
    assert!(!liveness.is_dead());
}

/// The `spawn` frame text `Session::prepare_spawn` produces for the queued spawn.
async fn deliver(harness: &Harness, session: &Session) -> Option<Value> {
    let (id, frame) = session.outbox.peek(1).frames.remove(0);
    let Outgoing::Spawn(spawn) = frame else {
        panic!("not a spawn");
    };
    let upstream = &harness.state.upstream_attempts;
    let text = session
        .prepare_spawn(&harness.engine, upstream, id, *spawn)
        .await?;
    Some(serde_json::from_str(text.as_str()).unwrap())
}

#[tokio::test]
async fn a_parked_spawn_near_expiry_is_reminted_at_delivery() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let harness = Harness::build(Config::default(), clock.clone(), "http://127.0.0.1:9");
    let engine = &harness.engine;
    let login = harness
        .registry
        .login(engine, LoginRequest::default())
        .await
        .unwrap();
    let session = harness.registry.get(&login.sid).unwrap();
    let spec = TaskSpec {
        agent: "slow".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    eventually("the attempt to start", || {
        harness.slow.credential(task.id).is_some()
    })
    .await;
    let credential = harness.slow.credential(task.id).unwrap();
    let frame = SpawnFrame {
        attempt: AttemptId::new(task.id, 1),
        agent: "slow".into(),
        credential: credential.clone(),
        worker_binding: None,
        directive: "launch".into(),
        base_url: "http://127.0.0.1:9".into(),
        lease_deadline_ms: 0,
        worktree: None,
        continued_from: None,
        resume_session: None,
    };
    let receipt = SpawnChannel::spawn(session.as_ref(), frame).await.unwrap();
    assert!(!session.connected());
    assert_eq!(session.parked(), 1, "no socket: the spawn is parked");

    // Far from expiry: the frame goes out with the token it was given.
    let sent = deliver(&harness, &session).await.unwrap();
    assert_eq!(sent["capability_token"], credential.token());

    // Thirty seconds before expiry: a fresh token for the same handle.
    clock.set_ms((credential.expires_secs() - 30) * 1000);
    let sent = deliver(&harness, &session).await.unwrap();
    let fresh = sent["capability_token"].as_str().unwrap();
    assert_ne!(fresh, credential.token());
    assert_eq!(sent["worker_handle"], credential.handle());
    assert_eq!(sent["req_id"], receipt.req_id.as_str());
    let by_token = engine
        .authenticate_worker(fresh, Verb::FetchPrompt)
        .unwrap();
    assert_eq!(by_token.attempt, AttemptId::new(task.id, 1));
    assert!(by_token.exp_secs > credential.expires_secs());
    let by_handle = engine
        .authenticate_worker(credential.handle(), Verb::PostResult)
        .unwrap();
    assert_eq!(
        by_handle.exp_secs, by_token.exp_secs,
        "the handle moved with the token"
    );
    // The queued copy carries the fresh token: a later delivery reuses it.
    let again = deliver(&harness, &session).await.unwrap();
    assert_eq!(again["capability_token"], fresh);

    // Once the attempt is over, the parked spawn is dropped with its waiter.
    engine.cancel_task(task.id, None).await.unwrap();
    clock.set_ms((by_token.exp_secs - 10) * 1000);
    assert_eq!(deliver(&harness, &session).await, None);
    assert!(
        receipt.reply.await.is_err(),
        "nobody waits for a reply any more"
    );
}
