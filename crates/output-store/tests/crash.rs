//! Crash durability: SIGKILL a process appending to the SQLite store at random
//! moments after its first acknowledged append and check that every append
//! it acknowledged survives, intact.

mod support {
    pub(crate) mod crash_events;
}

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use support::crash_events::{INLINE_MAX_BYTES, expected_event};
use swarmd_output_store::{
    ContentRef, OutputEvent, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore,
};
use uuid::Uuid;

const ROUNDS: u32 = 24;

/// How long a child may take to acknowledge its first append (opening the
/// store included) on a loaded machine.
const FIRST_ACK_PATIENCE: Duration = Duration::from_secs(30);

/// Acknowledged records: (task, attempt) -> highest acknowledged seq.
type Acked = BTreeMap<(Uuid, u32), u64>;

#[test]
fn acknowledged_appends_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = XorShift(seed);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut acked = Acked::new();
    let mut rounds_with_acks = 0;
    let started = Instant::now();

    for round in 0..ROUNDS {
        let sync = if round % 2 == 0 { "full" } else { "normal" };
        let run_for = Duration::from_millis(20 + rng.next() % 181);
        let output = run_child_until_killed(dir.path(), sync, run_for);
        let new = parse_acked(&output, &mut acked);
        if new > 0 {
            rounds_with_acks += 1;
        }
        runtime.block_on(verify(dir.path(), &acked));
    }

    let total: u64 = acked.values().sum();
    eprintln!(
        "{ROUNDS} rounds, {rounds_with_acks} with acknowledged appends, {total} records checked, {:?}",
        started.elapsed()
    );
    // Each kill follows a complete acknowledgement line read from the child.
    assert_eq!(
        rounds_with_acks, ROUNDS,
        "every round's child acknowledged an append before its kill"
    );
}

/// Starts the child, SIGKILLs it `run_for` after the first acknowledgement
/// line read from it, and returns what it printed.
fn run_child_until_killed(dir: &Path, sync: &str, run_for: Duration) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_output-store-crash-child"))
        .arg(dir)
        .arg(sync)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (first_ack, acked) = mpsc::channel();
    // Drain the pipe while the child runs so it never blocks on a full pipe,
    // and say when the first complete line (an acknowledgement) arrived.
    let reader = std::thread::spawn(move || {
        let mut first_ack = Some(first_ack);
        let mut bytes = Vec::new();
        let mut chunk = [0; 8192];
        loop {
            let read = stdout.read(&mut chunk).unwrap();
            if read == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..read]);
            if chunk[..read].contains(&b'\n')
                && let Some(first_ack) = first_ack.take()
            {
                // The test may have stopped waiting; nothing to tell then.
                let _ = first_ack.send(());
            }
        }
        String::from_utf8(bytes).unwrap()
    });
    match acked.recv_timeout(FIRST_ACK_PATIENCE) {
        Ok(()) => std::thread::sleep(run_for),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the child acknowledged no append within {FIRST_ACK_PATIENCE:?}");
        }
        // The child closed its stdout without a line: the exit check below
        // reports it.
        Err(mpsc::RecvTimeoutError::Disconnected) => {}
    }
    // `Child::kill` sends SIGKILL: no destructor, flush or checkpoint runs.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(status.code().is_none(), "child exited by itself: {status}");
    reader.join().unwrap()
}

/// Adds the complete lines of `output` to `acked`; returns how many there were.
fn parse_acked(output: &str, acked: &mut Acked) -> usize {
    // A line cut by the kill has no newline and was never acknowledged.
    let complete = &output[..output.rfind('\n').map_or(0, |end| end + 1)];
    let mut count = 0;
    for line in complete.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [task, attempt, seq] = fields[..] else {
            panic!("malformed line {line:?}");
        };
        let key = (task.parse().unwrap(), attempt.parse().unwrap());
        let seq: u64 = seq.parse().unwrap();
        let highest = acked.entry(key).or_default();
        assert_eq!(
            seq,
            *highest + 1,
            "acknowledgements of a stream come in seq order"
        );
        *highest = seq;
        count += 1;
    }
    count
}

/// Reopens the store and checks every acknowledged record and the file's integrity.
async fn verify(dir: &Path, acked: &Acked) {
    let db = SqliteDb::open(SqliteOptions::new(dir.join("swarmd.db"))).unwrap();
    let store = SqliteOutputStore::open(db.clone(), dir.join("blobs"), INLINE_MAX_BYTES).unwrap();
    let integrity: String = db
        .read(|conn| Ok(conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?))
        .await
        .unwrap();
    assert_eq!(integrity, "ok");

    for (&(task, attempt), &highest) in acked {
        let stored = store.tail(task, attempt, 0, usize::MAX).await.unwrap();
        assert!(
            stored.len() as u64 >= highest,
            "{task}/{attempt}: acknowledged {highest} records, found {}",
            stored.len()
        );
        for (record, seq) in stored.iter().zip(1..) {
            assert_eq!(record.seq, seq, "{task}/{attempt}: seqs are dense");
            assert_eq!(record.producer, "crash-child");
            let event = resolve_blob(dir, record.event.clone());
            assert_eq!(
                event,
                expected_event(task, seq),
                "{task}/{attempt} seq {seq}"
            );
        }
    }
    db.close().unwrap();
}

/// Replaces a spilled `file_ref` by the inline value its blob holds, after checking the blob.
fn resolve_blob(dir: &Path, mut event: OutputEvent) -> OutputEvent {
    let content = match &mut event {
        OutputEvent::Progress { .. } => return event,
        OutputEvent::Partial { chunk } => chunk,
        OutputEvent::Artifact { content, .. } | OutputEvent::Final { content, .. } => content,
    };
    if let ContentRef::FileRef {
        path, size, sha256, ..
    } = content
    {
        let bytes = std::fs::read(dir.join(&*path)).unwrap();
        assert_eq!(bytes.len() as u64, *size, "{path}: size");
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(&digest, sha256, "{path}: sha256");
        *content = ContentRef::Inline {
            value: serde_json::from_slice(&bytes).unwrap(),
        };
    }
    event
}

/// A small deterministic generator for kill delays; the seed is printed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
