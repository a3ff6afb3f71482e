//! A wait for a task another engine holds (another cluster node, sharing
//! the store): it waits for that task's `task_finished` on this engine's
//! bus, which the cluster's event pump feeds with the other node's events,
//! and answers the terminal task from the store; without the event it
//! waits out its timeout.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::clock::SystemClock;
use swarmd_engine::event::Logged;
use swarmd_engine::store::{MemoryTaskStore, TaskStore};
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig};
use swarmd_output_store::{MemoryOutputStore, OutputStore};

fn engine(store: &Arc<MemoryTaskStore>, outputs: &Arc<MemoryOutputStore>) -> Engine {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let resolver = StaticResolver::new().with("hang", SpawnerKind::Process, None, spawner);
    engine_with(
        Arc::new(resolver),
        Arc::clone(store) as Arc<dyn TaskStore>,
        Arc::clone(outputs) as Arc<dyn OutputStore>,
        EngineConfig::default(),
        Arc::new(SystemClock),
    )
}

#[tokio::test]
async fn a_wait_for_a_task_held_elsewhere_ends_with_its_task_finished_event() {
    let store = Arc::new(MemoryTaskStore::new());
    let outputs = Arc::new(MemoryOutputStore::new());
    let owner = engine(&store, &outputs);
    let other = engine(&store, &outputs);
    let spec = TaskSpec {
        agent: "hang".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let task = owner.create_task(spec).await.unwrap();
    assert!(owner.holds_task(task.id));
    assert!(!other.holds_task(task.id));

    // Nothing reached the other engine's bus: its wait runs out.
    let waited = other
        .wait_task(task.id, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(!waited.status().is_terminal(), "{waited:?}");

    let waiting = {
        let other = other.clone();
        tokio::spawn(async move { other.wait_task(task.id, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    owner
        .cancel_task(task.id, Some("done".into()))
        .await
        .unwrap();
    let ended = owner
        .wait_task(task.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(ended.status(), TaskStatus::Cancelled);
    assert!(!waiting.is_finished(), "the wait ended before the pump");

    // The pump's part: the owner's committed events, offered in order.
    other.offer_log(Logged::whole(owner.events_after(0, 1000).await.unwrap()));
    let waited = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the wait ended on the event")
        .unwrap()
        .unwrap();
    assert_eq!(waited.status(), TaskStatus::Cancelled);
}
