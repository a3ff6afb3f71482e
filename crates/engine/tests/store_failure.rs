//! A task whose record cannot be written is never acknowledged, never
//! reaches a worker, and leaves nothing behind that blocks a retry.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::gate::Verb;
use swarmd_engine::store::TaskStore;
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{GatedStore, Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{EngineConfig, EngineError, ResultPost, body_digest};
use swarmd_output_store::{MemoryOutputStore, SystemClock};

#[tokio::test(start_paused = true)]
async fn an_unrecorded_task_is_refused_and_its_key_stays_free() {
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver =
        StaticResolver::new().with("remote", SpawnerKind::Operator, None, remote.clone());
    let store = Arc::new(GatedStore::default());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let spec = TaskSpec {
        agent: "remote".into(),
        prompt: "p".into(),
        idempotency_key: Some("k".into()),
        ..TaskSpec::default()
    };

    store.fail_writes(true);
    let refused = engine.create_task(spec.clone()).await;
    assert!(matches!(refused, Err(EngineError::Store(_))), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.live_tasks(), 0, "the task left memory");
    assert!(remote.spawned().is_empty(), "no worker was launched");

    // The disk is back: the same key creates a task that runs to the end.
    store.fail_writes(false);
    let task = engine.create_task(spec).await.unwrap();
    for _ in 0..1000 {
        if remote.credential(task.id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let credential = remote.credential(task.id).expect("the retry was spawned");
    let auth = engine
        .authenticate_worker(credential.handle(), Verb::PostResult)
        .unwrap();
    let value = json!("done");
    let post = ResultPost {
        task_id: Some(task.id),
        attempt: None,
        value: value.clone(),
        ok: true,
        idempotency_key: None,
        body_digest: body_digest(&serde_json::to_vec(&value).unwrap()),
    };
    engine.post_result(&auth, post).await.unwrap();
    let done = engine
        .wait_task(task.id, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(store.task_for_key("k").await.unwrap(), Some(task.id));
}

#[tokio::test(start_paused = true)]
async fn a_credential_that_leaves_the_daemon_is_handed_out_only_once_recorded() {
    // A remote agent's attempt (its credential goes to a pool, which may
    // show it to another node) against a process agent's (its child dies
    // with the daemon), both of kind `process`.
    let pooled = ScriptedSpawner::new(|_| Script::AwaitPost);
    let local = ScriptedSpawner::new(|_| Script::AwaitPost);
    let profile = |credential_leaves| swarmd_engine::AgentProfile {
        kind: SpawnerKind::Process,
        concurrency: None,
        allow_subtasks: false,
        credential_leaves,
    };
    let resolver = StaticResolver::new()
        .with_profile("pooled", profile(true), pooled.clone())
        .with_profile("local", profile(false), local.clone());
    let store = Arc::new(GatedStore::default());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let spec = |agent: &str| TaskSpec {
        agent: agent.into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let pooled_task = engine.create_task(spec("pooled")).await.unwrap();
    let local_task = engine.create_task(spec("local")).await.unwrap();
    // The disk fails before either first attempt's record is written.
    store.fail_writes(true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        local.credential(local_task.id).is_some(),
        "a local child starts while its record is written"
    );
    assert!(
        pooled.credential(pooled_task.id).is_none(),
        "a pool's credential waits for its record, which failed"
    );
}
