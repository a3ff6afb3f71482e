//! Test helper for `tests/crash.rs`, not a product binary: appends to a SQLite
//! output store from concurrent tasks until it is killed.
//!
//! Usage: `output-store-crash-child STATE_DIR full|normal`. Each of the
//! producers owns one stream and appends batches of 1–3 events built by
//! `expected_event`; only after an append resolved does it print one
//! `task attempt seq` line per record to stdout, flushed.

#[path = "../../tests/support/crash_events.rs"]
mod crash_events;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use swarmd_output_store::{OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore, Synchronous};
use uuid::Uuid;

const PRODUCERS: u32 = 8;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(sync)) = (args.next(), args.next()) else {
        eprintln!("usage: output-store-crash-child STATE_DIR full|normal");
        return ExitCode::from(64);
    };
    let synchronous = match sync.as_str() {
        "full" => Synchronous::Full,
        "normal" => Synchronous::Normal,
        other => {
            eprintln!("unknown synchronous mode {other:?}");
            return ExitCode::from(64);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(PathBuf::from(dir), synchronous)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("crash child: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: PathBuf, synchronous: Synchronous) -> Result<(), Error> {
    let mut options = SqliteOptions::new(dir.join("swarmd.db"));
    options.synchronous = synchronous;
    let db = SqliteDb::open(options)?;
    let store = SqliteOutputStore::open(db, dir.join("blobs"), crash_events::INLINE_MAX_BYTES)?;
    let mut producers = tokio::task::JoinSet::new();
    for producer in 0..PRODUCERS {
        producers.spawn(produce(store.clone(), producer % 3 + 1));
    }
    while let Some(joined) = producers.join_next().await {
        joined??;
    }
    Ok(())
}

/// Appends forever to a fresh stream, printing each acknowledged record.
async fn produce(store: SqliteOutputStore, attempt: u32) -> Result<(), Error> {
    let task = Uuid::new_v4();
    let mut next_seq = 1u64;
    loop {
        let count = next_seq % 3 + 1;
        let events = (next_seq..next_seq + count)
            .map(|seq| crash_events::expected_event(task, seq))
            .collect();
        let records = store.append(task, attempt, "crash-child", events).await?;
        let mut lines = String::new();
        for record in &records {
            if record.seq != next_seq {
                return Err(format!("expected seq {next_seq}, got {}", record.seq).into());
            }
            next_seq += 1;
            lines.push_str(&format!(
                "{} {} {}\n",
                record.task, record.attempt, record.seq
            ));
        }
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(lines.as_bytes())?;
        stdout.flush()?;
    }
}
