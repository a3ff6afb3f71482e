//! Append throughput of `SqliteOutputStore` with group commit, from concurrent
//! producers, under `synchronous = FULL` and `NORMAL`.
//!
//! Run: `cargo bench -p swarmd-output-store --bench append`. Each row is a
//! fresh database in a temp dir; a producer is a tokio task appending to its
//! own stream and waiting for each append to be durable before the next.
//! `cpu µs/ev` is the process's CPU time per event (all threads), which stays
//! meaningful on a shared machine where wall-clock rates swing with load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use swarmd_output_store::{
    ContentRef, OutputEvent, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore, Synchronous,
};
use uuid::Uuid;

struct Scenario {
    producers: usize,
    events_per_append: usize,
    total_events: usize,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        producers: 1,
        events_per_append: 1,
        total_events: 5_000,
    },
    Scenario {
        producers: 64,
        events_per_append: 1,
        total_events: 256_000,
    },
    Scenario {
        producers: 256,
        events_per_append: 1,
        total_events: 256_000,
    },
    Scenario {
        producers: 64,
        events_per_append: 16,
        total_events: 1_024_000,
    },
    Scenario {
        producers: 64,
        events_per_append: 64,
        total_events: 2_048_000,
    },
];

struct Outcome {
    elapsed: Duration,
    cpu: Duration,
    commits: u64,
    jobs: u64,
    latencies: Vec<Duration>,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!(
        "{:<7} {:>9} {:>10} {:>9} {:>7} {:>10} {:>10} {:>11} {:>9} {:>9}",
        "sync",
        "producers",
        "ev/append",
        "events",
        "secs",
        "events/s",
        "cpu µs/ev",
        "jobs/commit",
        "p50",
        "p99"
    );
    for synchronous in [Synchronous::Full, Synchronous::Normal] {
        for scenario in SCENARIOS {
            let outcome = runtime.block_on(run(synchronous, scenario));
            let mut latencies = outcome.latencies;
            latencies.sort_unstable();
            let percentile = |p: usize| latencies[(latencies.len() - 1) * p / 100];
            println!(
                "{:<7} {:>9} {:>10} {:>9} {:>7.2} {:>10.0} {:>10.2} {:>11.1} {:>9.2?} {:>9.2?}",
                format!("{synchronous:?}"),
                scenario.producers,
                scenario.events_per_append,
                scenario.total_events,
                outcome.elapsed.as_secs_f64(),
                scenario.total_events as f64 / outcome.elapsed.as_secs_f64(),
                outcome.cpu.as_secs_f64() * 1e6 / scenario.total_events as f64,
                outcome.jobs as f64 / outcome.commits.max(1) as f64,
                percentile(50),
                percentile(99),
            );
        }
    }
}

async fn run(synchronous: Synchronous, scenario: &Scenario) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = SqliteOptions::new(dir.path().join("swarmd.db"));
    options.synchronous = synchronous;
    let db = SqliteDb::open(options).expect("open db");
    let store = Arc::new(
        SqliteOutputStore::open(db.clone(), dir.path().join("blobs"), 256 * 1024)
            .expect("open store"),
    );
    let appends_per_producer =
        scenario.total_events / scenario.producers / scenario.events_per_append;
    let (commits_before, jobs_before) = (db.stats().commits(), db.stats().jobs());
    let started = Instant::now();
    let cpu_started = process_cpu_time();
    let mut producers = tokio::task::JoinSet::new();
    for producer in 0..scenario.producers {
        let store = Arc::clone(&store);
        let events_per_append = scenario.events_per_append;
        producers.spawn(async move {
            let task = Uuid::new_v4();
            let mut latencies = Vec::with_capacity(appends_per_producer);
            for n in 0..appends_per_producer {
                let events = (0..events_per_append)
                    .map(|k| OutputEvent::Partial {
                        chunk: ContentRef::Inline {
                            value: json!({"producer": producer, "n": n, "k": k, "line": "compiling swarmd-output-store v0.1.0"}),
                        },
                    })
                    .collect();
                let append_started = Instant::now();
                store.append(task, 1, "bench", events).await.expect("append");
                latencies.push(append_started.elapsed());
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = producers.join_next().await {
        latencies.extend(joined.expect("producer"));
    }
    let elapsed = started.elapsed();
    let outcome = Outcome {
        elapsed,
        cpu: process_cpu_time().saturating_sub(cpu_started),
        commits: db.stats().commits() - commits_before,
        jobs: db.stats().jobs() - jobs_before,
        latencies,
    };
    db.close().expect("close");
    outcome
}

/// User + system CPU time of this process (all threads), from `/proc/self/stat`
/// in clock ticks of 10 ms. Unlike wall time it barely moves when other
/// processes compete for the cores, so it shows the store's own cost.
fn process_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}
