//! Restarts: a second engine on the stores of a first that died without
//! shutting down, as after kill -9. Interrupted in-process work fails or
//! retries, delegated attempts resume, and the handles a SubAgent held
//! before the crash keep working.

use std::sync::Arc;

use serde_json::json;
use swarmd_engine::EngineConfig;
use swarmd_engine::event::Event;
use swarmd_engine::gate::Verb;
use swarmd_engine::store::{MemoryTaskStore, TaskStore};
use swarmd_engine::task::{SpawnerKind, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_output_store::{MemoryOutputStore, OutputStore};

use super::{WAIT, post, spawned, spec};

#[tokio::test(start_paused = true)]
async fn recovery_fails_interrupted_work_and_resumes_delegated_attempts() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new());
    let outputs: Arc<dyn OutputStore> = Arc::new(MemoryOutputStore::new());
    let clock = Arc::new(swarmd_engine::clock::SystemClock);
    let local = ScriptedSpawner::new(|_| Script::Hang);
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver = || {
        Arc::new(
            StaticResolver::new()
                .with("local", SpawnerKind::Process, None, local.clone())
                .with("remote", SpawnerKind::Operator, None, remote.clone())
                .with("slow", SpawnerKind::Process, Some(1), local.clone()),
        )
    };
    let first = engine_with(
        resolver(),
        store.clone(),
        outputs.clone(),
        EngineConfig::default(),
        clock.clone(),
    );
    let interrupted = first.create_task(spec("local")).await.unwrap();
    let mut retried = spec("local");
    retried.policy.max_attempts = Some(2);
    let retried = first.create_task(retried).await.unwrap();
    let delegated = first.create_task(spec("remote")).await.unwrap();
    spawned(&local, interrupted.id, 1).await;
    spawned(&local, retried.id, 1).await;
    spawned(&remote, delegated.id, 1).await;
    let handle = remote.credential(delegated.id).unwrap().handle().to_owned();
    // The old process dies: its engine is dropped without any shutdown.
    drop(first);

    let second = engine_with(
        resolver(),
        store.clone(),
        outputs.clone(),
        EngineConfig::default(),
        clock.clone(),
    );
    let report = second.recover().await.unwrap();
    assert_eq!(
        (report.interrupted, report.retried, report.resumed),
        (2, 1, 1)
    );
    second.start_recovered();
    // The delegated attempt is announced again, with a fresh handle.
    spawned(&remote, delegated.id, 2).await;
    let fresh = remote.credential(delegated.id).unwrap();
    assert_ne!(fresh.handle(), handle);
    assert_eq!(
        remote.spawned().last().map(|s| s.1),
        Some(1),
        "same attempt"
    );
    let t = second.wait_task(interrupted.id, WAIT).await.unwrap();
    assert_eq!(
        (t.status(), t.reason.as_deref()),
        (TaskStatus::Failed, Some("interrupted"))
    );
    spawned(&local, retried.id, 2).await;

    // The SubAgent posts with its old handle and the task passes.
    let auth = second
        .authenticate_worker(&handle, Verb::PostResult)
        .unwrap();
    second
        .post_result(&auth, post(delegated.id, json!("late but fine"), None))
        .await
        .unwrap();
    let t = second.wait_task(delegated.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
    assert_eq!(t.result.unwrap().value, json!("late but fine"));

    // The event log continues without reusing sequence numbers.
    let events = second.events_after(0, 10_000).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gapless: {seqs:?}"
    );
    assert!(events.iter().any(
        |e| matches!(e.event, Event::TaskFinished { task_id, .. } if task_id == delegated.id)
    ));
}

/// After a restart the SubAgent may still hold the handle it got before the
/// crash as well as the one announced since: a heartbeat that re-mints moves
/// the expiry of both, so neither expires under a SubAgent that heartbeats.
#[tokio::test(start_paused = true)]
async fn after_a_restart_a_heartbeat_moves_every_handle_of_the_attempt() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new());
    let outputs: Arc<dyn OutputStore> = Arc::new(MemoryOutputStore::new());
    let clock = Arc::new(swarmd_engine::clock::ManualClock::at_secs(1_000_000));
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver = || {
        Arc::new(StaticResolver::new().with("remote", SpawnerKind::Operator, None, remote.clone()))
    };
    let config = || EngineConfig {
        worker_token_ttl_secs: 60,
        ..EngineConfig::default()
    };
    let first = engine_with(
        resolver(),
        store.clone(),
        outputs.clone(),
        config(),
        clock.clone(),
    );
    let t = first.create_task(spec("remote")).await.unwrap();
    spawned(&remote, t.id, 1).await;
    let old = remote.credential(t.id).unwrap().handle().to_owned();
    drop(first);

    let second = engine_with(resolver(), store, outputs, config(), clock.clone());
    second.recover().await.unwrap();
    second.start_recovered();
    spawned(&remote, t.id, 2).await;
    let fresh = remote.credential(t.id).unwrap().handle().to_owned();
    assert_ne!(old, fresh);

    // Less than a third of the lifetime left: the heartbeat re-mints.
    clock.advance_ms(50_000);
    let auth = second.authenticate_worker(&old, Verb::Heartbeat).unwrap();
    let ack = second.heartbeat(&auth, Some(t.id)).await.unwrap();
    assert!(ack.token.is_some());
    assert_eq!(ack.handle_expires, 1_000_110);
    // Past the first expiry (and any leeway), both handles still work.
    clock.advance_ms(30_000);
    for handle in [&old, &fresh] {
        let auth = second.authenticate_worker(handle, Verb::FetchPrompt);
        assert!(auth.is_ok(), "{handle}: {auth:?}");
    }
}
