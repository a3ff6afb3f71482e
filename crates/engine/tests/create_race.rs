//! Concurrent creations under one idempotency key, on both stores: exactly
//! one task is created and every caller gets it, never a `not_found` from a
//! key published before its task.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::clock::SystemClock;
use swarmd_engine::store::{MemoryTaskStore, SqliteTaskStore, TaskFilter};
use swarmd_engine::task::{SpawnerKind, TaskSpec};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig};
use swarmd_output_store::{MemoryOutputStore, SqliteDb, SqliteOptions, SqliteOutputStore};
use tokio::sync::Barrier;

const CALLERS: usize = 64;
const ROUNDS: usize = 300;

fn resolver() -> Arc<StaticResolver> {
    let spawner = ScriptedSpawner::new(|_| Script::Delayed {
        after: Duration::from_millis(50),
        value: serde_json::json!("done"),
        ok: true,
    });
    Arc::new(StaticResolver::new().with("a", SpawnerKind::Process, None, spawner))
}

fn spec(key: &str) -> TaskSpec {
    TaskSpec {
        agent: "a".into(),
        prompt: "p".into(),
        idempotency_key: Some(key.to_owned()),
        ..TaskSpec::default()
    }
}

/// `CALLERS` creations of one key released at once, `ROUNDS` times.
async fn race(engine: Engine) {
    for round in 0..ROUNDS {
        let key = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(CALLERS));
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (engine, barrier, key) = (engine.clone(), barrier.clone(), key.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    engine.create_task(spec(&key)).await
                })
            })
            .collect();
        let mut ids = Vec::new();
        for caller in callers {
            match caller.await.unwrap() {
                Ok(task) => ids.push(task.id),
                Err(error) => panic!("round {round}: a caller got {error}"),
            }
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "round {round}: one task for the key");
    }
    let all = engine
        .list_tasks(&TaskFilter {
            limit: 10 * ROUNDS,
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), ROUNDS, "one task per key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_created_concurrently_is_one_task_on_the_memory_store() {
    let engine = engine_with(
        resolver(),
        Arc::new(MemoryTaskStore::new()),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    race(engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_created_concurrently_is_one_task_on_the_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("swarmd.db"))).unwrap();
    let store = SqliteTaskStore::open(db.clone()).unwrap();
    let outputs = SqliteOutputStore::open(db, dir.path().join("blobs"), 256 * 1024).unwrap();
    let engine = engine_with(
        resolver(),
        Arc::new(store),
        Arc::new(outputs),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    race(engine).await;
}
