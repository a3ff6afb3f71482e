//! Retention on real SQLite files: pruning a task deletes the blobs its
//! outputs spilled, and only those.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde_json::json;
use swarmd_engine::EngineConfig;
use swarmd_engine::clock::ManualClock;
use swarmd_engine::store::SqliteTaskStore;
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_output_store::{SqliteDb, SqliteOptions, SqliteOutputStore};

const WAIT: Duration = Duration::from_secs(30);
const DAY_MS: u64 = 86_400_000;

fn blobs(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir.join("blobs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_a_task_sweeps_the_blobs_only_it_referenced() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("swarmd.db"))).unwrap();
    let store = SqliteTaskStore::open(db.clone()).unwrap();
    // Every Final of more than 64 bytes spills to a blob.
    let outputs = SqliteOutputStore::open(db.clone(), dir.path().join("blobs"), 64).unwrap();
    let spawner = ScriptedSpawner::new(|ctx| Script::Final {
        value: json!(ctx.agent.repeat(100)),
        ok: true,
    });
    let resolver = StaticResolver::new()
        .with("old", SpawnerKind::InProcess, None, spawner.clone())
        .with("new", SpawnerKind::InProcess, None, spawner);
    let clock = Arc::new(ManualClock::new(10 * DAY_MS));
    let engine = engine_with(
        Arc::new(resolver),
        Arc::new(store),
        Arc::new(outputs),
        EngineConfig::default(),
        clock.clone(),
    );
    let run = |agent: &str| {
        let spec = TaskSpec {
            agent: agent.into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        };
        let engine = engine.clone();
        async move {
            let task = engine.create_task(spec).await.unwrap();
            let task = engine.wait_task(task.id, WAIT).await.unwrap();
            assert_eq!(task.status(), TaskStatus::Pass);
            task.id
        }
    };
    let old = run("old").await;
    let old_blob = blobs(dir.path());
    assert_eq!(old_blob.len(), 1);
    clock.advance_ms(2 * DAY_MS);
    let new = run("new").await;
    assert_eq!(blobs(dir.path()).len(), 2);
    // Both blobs were spilled long before the sweep's grace.
    for name in blobs(dir.path()) {
        let file = std::fs::File::options()
            .write(true)
            .open(dir.path().join("blobs").join(name))
            .unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
    }

    assert_eq!(
        engine.prune(Duration::from_millis(DAY_MS)).await.unwrap(),
        1
    );

    assert!(engine.get_task(old).await.unwrap().is_none());
    assert!(engine.get_task(new).await.unwrap().is_some());
    let left = blobs(dir.path());
    assert_eq!(left.len(), 1);
    assert_ne!(left, old_blob, "the pruned task's blob is the one deleted");
    assert_eq!(engine.stats().blobs_swept.load(Ordering::Relaxed), 1);
    assert!(engine.stats().blob_bytes_swept.load(Ordering::Relaxed) > 300);
    // Nothing left to delete: the surviving blob is referenced.
    let again = engine.sweep_blobs().await.unwrap();
    assert_eq!((again.removed, again.kept), (0, 1));
}
