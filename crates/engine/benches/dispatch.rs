//! In-process dispatch throughput: spawn → attempt → Final → pass through
//! the engine with the scripted test spawner, on the memory and the SQLite
//! stores, with a fixed number of tasks in flight (closed loop).
//!
//! Run: `cargo bench -p swarmd-engine --bench dispatch`
//! (`SWARMD_BENCH_TASKS=N` changes the task count per run;
//! `SWARMD_BENCH_STORES=memory,full,normal` picks the stores.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use swarmd_engine::clock::SystemClock;
use swarmd_engine::store::{MemoryTaskStore, SqliteTaskStore, TaskStore};
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig};
use swarmd_output_store::{
    MemoryOutputStore, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore, Synchronous,
};

fn engine(store: Arc<dyn TaskStore>, outputs: Arc<dyn OutputStore>) -> Engine {
    let spawner = ScriptedSpawner::new(|_| Script::Final {
        value: json!("ok"),
        ok: true,
    });
    let resolver = StaticResolver::new().with("bench", SpawnerKind::InProcess, None, spawner);
    engine_with(
        Arc::new(resolver),
        store,
        outputs,
        EngineConfig::default(),
        Arc::new(SystemClock),
    )
}

/// Runs `total` tasks with `in_flight` concurrent clients; returns tasks/s.
async fn run(engine: &Engine, total: usize, in_flight: usize) -> f64 {
    let started = Instant::now();
    let per_client = total / in_flight;
    let mut clients = Vec::new();
    for _ in 0..in_flight {
        let engine = engine.clone();
        clients.push(tokio::spawn(async move {
            for _ in 0..per_client {
                let spec = TaskSpec {
                    agent: "bench".into(),
                    prompt: "p".into(),
                    ..TaskSpec::default()
                };
                let task = engine.create_task(spec).await.expect("spawn");
                let done = engine
                    .wait_task(task.id, Duration::from_secs(60))
                    .await
                    .expect("wait");
                assert_eq!(done.status(), TaskStatus::Pass);
            }
        }));
    }
    for c in clients {
        c.await.expect("client");
    }
    (per_client * in_flight) as f64 / started.elapsed().as_secs_f64()
}

#[allow(
    clippy::disallowed_methods,
    reason = "the benchmark's knobs are environment variables"
)]
fn main() {
    let total: usize = std::env::var("SWARMD_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stores =
        std::env::var("SWARMD_BENCH_STORES").unwrap_or_else(|_| "memory,full,normal".into());
    let wanted = |name: &str| stores.split(',').any(|s| s.trim() == name);
    println!("{:<28} {:>10} {:>14}", "store", "in flight", "tasks/s");
    for in_flight in [32, 256].into_iter().filter(|_| wanted("memory")) {
        let rate = rt.block_on(async {
            let e = engine(
                Arc::new(MemoryTaskStore::new()),
                Arc::new(MemoryOutputStore::new()),
            );
            run(&e, total, in_flight).await
        });
        println!("{:<28} {:>10} {:>14.0}", "memory", in_flight, rate);
    }
    let syncs = [("full", Synchronous::Full), ("normal", Synchronous::Normal)];
    for sync in syncs.into_iter().filter(|(n, _)| wanted(n)).map(|(_, s)| s) {
        for in_flight in [32, 256] {
            let dir = tempfile::tempdir().expect("tempdir");
            let rate = rt.block_on(async {
                let mut opts = SqliteOptions::new(dir.path().join("swarmd.db"));
                opts.synchronous = sync;
                let db = SqliteDb::open(opts).expect("open db");
                let store = SqliteTaskStore::open(db.clone()).expect("task store");
                let outputs = SqliteOutputStore::open(db, dir.path().join("blobs"), 256 * 1024)
                    .expect("output store");
                let e = engine(Arc::new(store), Arc::new(outputs));
                run(&e, total / 2, in_flight).await
            });
            println!(
                "{:<28} {:>10} {:>14.0}",
                format!("sqlite synchronous={sync:?}"),
                in_flight,
                rate
            );
        }
    }
}
