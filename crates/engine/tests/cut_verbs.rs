//! A verb whose caller goes away (an HTTP client that hung up) still ends
//! as it would have: a cancel retires its task, and a creation whose
//! record fails withdraws its task and frees its key.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{GatedStore, Script, ScriptedSpawner, StaticResolver, engine_over};
use swarmd_engine::{Engine, EngineConfig};

/// An engine over `store` whose agent `remote` runs one attempt at a time
/// and waits for a posted result; its spawner.
fn engine(store: &Arc<GatedStore>) -> (Engine, Arc<ScriptedSpawner>) {
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver =
        StaticResolver::new().with("remote", SpawnerKind::Operator, Some(1), remote.clone());
    let engine = engine_over(Arc::new(resolver), store.clone(), EngineConfig::default());
    (engine, remote)
}

fn spec(key: &str) -> TaskSpec {
    TaskSpec {
        agent: "remote".into(),
        prompt: "p".into(),
        idempotency_key: Some(key.into()),
        ..TaskSpec::default()
    }
}

/// Waits until a write is held at the store's gate.
async fn until_a_write_waits(store: &GatedStore) {
    for _ in 0..1_000 {
        if store.writes_waiting() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no write reached the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_caller_goes_away_still_retires_its_task() {
    let store = Arc::new(GatedStore::default());
    let (engine, _) = engine(&store);
    let task = engine.create_task(spec("k")).await.unwrap();
    store.hold_writes(true);
    let cancelling = tokio::spawn({
        let engine = engine.clone();
        async move { engine.cancel_task(task.id, None).await }
    });
    until_a_write_waits(&store).await;
    cancelling.abort();
    let _ = cancelling.await;
    store.hold_writes(false);
    for _ in 0..1_000 {
        if !engine.holds_task(task.id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !engine.holds_task(task.id),
        "the cancelled task stayed held"
    );
    let stored = engine.get_task(task.id).await.unwrap().unwrap();
    assert_eq!(stored.status(), TaskStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_whose_caller_goes_away_and_whose_record_fails_is_withdrawn() {
    let store = Arc::new(GatedStore::default());
    let (engine, remote) = engine(&store);
    // The agent's one slot is taken, so the new task only waits in the
    // queue: nothing but its creation withdraws it.
    let busy = engine.create_task(spec("busy")).await.unwrap();
    for _ in 0..1_000 {
        if !remote.spawned().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(remote.spawned().len(), 1, "the busy task did not start");
    // Its attempt's records are written before the gate closes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.hold_writes(true);
    let creating = tokio::spawn({
        let engine = engine.clone();
        async move { engine.create_task(spec("k")).await }
    });
    until_a_write_waits(&store).await;
    creating.abort();
    let _ = creating.await;
    // The record the caller no longer waits for fails.
    store.fail_writes(true);
    store.hold_writes(false);
    for _ in 0..1_000 {
        if engine.live_tasks() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(engine.live_tasks(), 1, "the unrecorded task stayed held");
    assert!(engine.holds_task(busy.id));
    // Its key is free: the retry creates and records a task of its own.
    store.fail_writes(false);
    let retry = engine.create_task(spec("k")).await.unwrap();
    assert!(engine.get_task(retry.id).await.unwrap().is_some());
}
