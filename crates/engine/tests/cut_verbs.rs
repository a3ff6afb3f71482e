//! A verb whose caller goes away (an HTTP client that hung up) still ends
//! as it would have: a cancel retires its task, a creation whose record
//! fails withdraws its task and frees its key, and a result post cut before
//! it queued its Final leaves the Final to the worker's retry or loses it
//! to a cancel.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::{MemoryTaskStore, TaskStore};
use swarmd_engine::task::{SpawnerKind, Task, TaskSpec, TaskStatus};
use swarmd_engine::testing::{
    GatedOutputs, GatedStore, Script, ScriptedSpawner, StaticResolver, engine_over, engine_with,
};
use swarmd_engine::{Engine, EngineConfig, EngineError, ResultPost, body_digest};

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

/// Starts cancelling `task` with the store's writes held; returns once the
/// cancel's write waits at the store's gate.
async fn cancel_held(
    engine: &Engine,
    store: &GatedStore,
    task: TaskId,
) -> tokio::task::JoinHandle<Result<Task, EngineError>> {
    store.hold_writes(true);
    let cancelling = tokio::spawn({
        let engine = engine.clone();
        async move { engine.cancel_task(task, None).await }
    });
    until_a_write_waits(store).await;
    cancelling
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_caller_goes_away_still_retires_its_task() {
    let store = Arc::new(GatedStore::default());
    let (engine, _) = engine(&store);
    let task = engine.create_task(spec("k")).await.unwrap();
    let cancelling = cancel_held(&engine, &store, task.id).await;
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
    // The gate closes once its attempt's records are written: the store
    // holds it running, with its attempt open.
    let mut recorded = false;
    for _ in 0..1_000 {
        let task = store.task(busy.id).await.unwrap();
        let attempts = store.attempts(busy.id).await.unwrap();
        recorded = task.is_some_and(|t| t.status() == TaskStatus::Running)
            && attempts
                .iter()
                .any(|a| a.attempt == 1 && a.outcome.is_none());
        if recorded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(recorded, "the busy task's attempt was not recorded");
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

/// A task of `remote` whose attempt waits for its result, and a keyless
/// post of it (as `curl` sends) that was cut at its encoding, after it
/// claimed the attempt's Final: the engine, the attempt's handle and the
/// body posted.
async fn a_post_cut_at_its_encoding() -> (
    Engine,
    Arc<MemoryTaskStore>,
    TaskId,
    String,
    impl Fn() -> ResultPost,
) {
    let outputs = Arc::new(GatedOutputs::default());
    let store = Arc::new(MemoryTaskStore::new());
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver =
        StaticResolver::new().with("remote", SpawnerKind::Operator, None, remote.clone());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        outputs.clone(),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let task = engine.create_task(spec("k")).await.unwrap();
    for _ in 0..1_000 {
        if remote.credential(task.id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let handle = remote.credential(task.id).unwrap().handle().to_owned();
    let id = task.id;
    let post = move || {
        let value = json!("done");
        ResultPost {
            task_id: Some(id),
            attempt: None,
            body_digest: body_digest(&serde_json::to_vec(&value).unwrap()),
            value,
            ok: true,
            idempotency_key: None,
        }
    };
    outputs.hold_encodes(true);
    let posting = tokio::spawn({
        let (engine, handle, post) = (engine.clone(), handle.clone(), post());
        async move {
            let auth = engine.authenticate_worker(&handle, Verb::PostResult)?;
            engine.post_result(&auth, post).await
        }
    });
    for _ in 0..1_000 {
        if outputs.encode_waiting() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        outputs.encode_waiting(),
        "the post never reached its encoding"
    );
    posting.abort();
    let _ = posting.await;
    outputs.hold_encodes(false);
    (engine, store, task.id, handle, post)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_post_cut_before_its_final_was_queued_leaves_it_to_the_retry() {
    let (engine, _, task, handle, post) = a_post_cut_at_its_encoding().await;
    // The worker heard nothing and posts again.
    let auth = engine
        .authenticate_worker(&handle, Verb::PostResult)
        .unwrap();
    engine.post_result(&auth, post()).await.unwrap();
    let done = engine
        .wait_task(task, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(done.result.unwrap().value, json!("done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_after_a_post_cut_before_its_final_was_queued_wins() {
    let (engine, store, task, handle, post) = a_post_cut_at_its_encoding().await;
    let cancelled = engine.cancel_task(task, None).await.unwrap();
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);
    // The abandoned claim's fingerprint went with the cancel's write.
    assert_eq!(store.posted_final(task, 1).await.unwrap(), None);
    let done = engine
        .wait_task(task, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Cancelled);
    // The worker's retry now meets a decided task.
    let auth = engine.authenticate_worker(&handle, Verb::PostResult);
    let refused = match auth {
        Ok(auth) => engine.post_result(&auth, post()).await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a post after the cancel was accepted");
}

/// A task that ended in memory is read finished only once its end is
/// written: a reader never sees a finish a crash could still take back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_reads_finished_only_once_its_end_is_written() {
    let store = Arc::new(GatedStore::default());
    let (engine, _) = engine(&store);
    let task = engine.create_task(spec("k")).await.unwrap();
    let cancelling = cancel_held(&engine, &store, task.id).await;
    let reading = tokio::spawn({
        let engine = engine.clone();
        async move { engine.get_task(task.id).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !reading.is_finished(),
        "the cancel was read before it was written"
    );
    store.hold_writes(false);
    let read = reading.await.unwrap().unwrap().unwrap();
    assert_eq!(read.status(), TaskStatus::Cancelled);
    cancelling.await.unwrap().unwrap();
    let stored = store.task(task.id).await.unwrap().unwrap();
    assert_eq!(stored.status(), TaskStatus::Cancelled);
}
