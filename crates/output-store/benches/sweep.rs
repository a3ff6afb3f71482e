//! Cost of the blob sweep's mark phase: how long `sweep_blobs` takes over a
//! large `outputs` table, where every row must be looked at once.
//!
//! Run: `cargo bench -p swarmd-output-store --bench sweep`. Builds a fresh
//! database of `TASKS` tasks × `ROWS_PER_TASK` progress rows, one spilled
//! Final per task on `SPILL_EVERY`-th task, forgets half the tasks, ages every
//! blob past the grace, then times one sweep (which deletes the forgotten
//! half's blobs and keeps the rest).

use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use swarmd_output_store::{OutputEvent, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore};
use uuid::Uuid;

const TASKS: usize = 20_000;
const ROWS_PER_TASK: usize = 50;
const SPILL_EVERY: usize = 20;
const GRACE: Duration = Duration::from_secs(3600);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("swarmd.db"))).expect("db");
    let store = SqliteOutputStore::open(db, dir.path().join("blobs"), 1024).expect("store");
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(TASKS);
    let mut appends = Vec::new();
    for i in 0..TASKS {
        let task = Uuid::now_v7();
        tasks.push(task);
        let mut events: Vec<_> = (0..ROWS_PER_TASK)
            .map(|n| OutputEvent::Progress {
                stage: format!("step {n}"),
                note: Some("a note about this step".to_owned()),
            })
            .collect();
        if i % SPILL_EVERY == 0 {
            events.push(OutputEvent::inline_final(json!(format!("{i:>2000}")), true));
        }
        let store = store.clone();
        appends.push(tokio::spawn(async move {
            store
                .append(task, 1, "bench", events)
                .await
                .expect("append")
        }));
        if appends.len() == 256 {
            for append in appends.drain(..) {
                append.await.expect("join");
            }
        }
    }
    for append in appends {
        append.await.expect("join");
    }
    let rows = TASKS * ROWS_PER_TASK + TASKS / SPILL_EVERY;
    println!(
        "built {rows} rows, {} blobs in {:.1} s",
        TASKS / SPILL_EVERY,
        started.elapsed().as_secs_f64()
    );
    let forgotten = &tasks[..TASKS / 2];
    store.forget(forgotten).await.expect("forget");
    for entry in std::fs::read_dir(dir.path().join("blobs")).expect("blobs") {
        let file = std::fs::File::options()
            .write(true)
            .open(entry.expect("entry").path())
            .expect("open blob");
        file.set_modified(SystemTime::now() - 2 * GRACE)
            .expect("age blob");
    }
    let left = rows - forgotten.len() * ROWS_PER_TASK - forgotten.len().div_ceil(SPILL_EVERY);
    let started = Instant::now();
    let sweep = store.sweep_blobs(GRACE).await.expect("sweep");
    let took = started.elapsed();
    println!(
        "sweep over {left} rows: {:.0} ms ({:.2} µs/row); removed {} blobs ({} bytes), kept {}",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / left as f64,
        sweep.removed,
        sweep.removed_bytes,
        sweep.kept
    );
}
