//! A wait for a task another engine holds (another cluster node, sharing
//! the store): it waits for that task's `task_finished` on this engine's
//! bus, which the cluster's event pump feeds with the other node's events,
//! and answers the terminal task from the store; without the event it
//! waits out its timeout. A group another node's notification carries is
//! taken the same way, unless something follows the log.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::clock::SystemClock;
use swarmd_engine::event::{Event, EventRecord, Logged};
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::{MemoryTaskStore, TaskStore};
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig};
use swarmd_output_store::{MemoryOutputStore, OutputStore};
use tokio::sync::broadcast;

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

fn queued(seq: u64) -> Logged {
    Logged::Whole(EventRecord {
        seq,
        ts_ms: seq,
        session: None,
        event: Event::TaskQueued {
            task_id: TaskId::new(),
        },
    })
}

/// The seq of the next record broadcast, if one is waiting.
fn next_broadcast(rx: &mut broadcast::Receiver<Arc<EventRecord>>) -> Option<u64> {
    rx.try_recv().ok().map(|record| record.seq)
}

#[tokio::test]
async fn a_notified_group_is_taken_in_order_unless_something_follows_the_log() {
    let store = Arc::new(MemoryTaskStore::new());
    let outputs = Arc::new(MemoryOutputStore::new());
    let node = engine(&store, &outputs);
    let mut rx = node.subscribe();

    // A follower wants every body: the group is refused, the pump reads.
    let follower = node.follow();
    assert!(!node.offer_notified(vec![Logged::Seq(1), queued(2)]));
    assert_eq!(next_broadcast(&mut rx), None);
    drop(follower);

    // Taken: the bare seq stepped past, the whole record broadcast.
    assert!(node.offer_notified(vec![Logged::Seq(1), queued(2)]));
    assert_eq!(next_broadcast(&mut rx), Some(2));
    assert_eq!(node.last_event_seq(), 2);

    // A group past a gap waits for it, and the gap shows until it fills.
    assert!(!node.event_gapped());
    assert!(node.offer_notified(vec![queued(5)]));
    assert!(node.event_gapped());
    assert_eq!(next_broadcast(&mut rx), None);
    assert!(node.offer_notified(vec![queued(3), Logged::Seq(4)]));
    assert!(!node.event_gapped());
    assert_eq!(next_broadcast(&mut rx), Some(3));
    assert_eq!(next_broadcast(&mut rx), Some(5));
    assert_eq!(node.last_event_seq(), 5);
}
