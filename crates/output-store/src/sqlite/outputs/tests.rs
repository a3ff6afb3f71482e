//! Tests of `SqliteOutputStore` on real database files: conformance, spill, reopen.

use std::fs;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::*;
use crate::spill::hex;
use crate::{ContentRef, ManualClock, SqliteOptions, conformance};

fn open_store(state: &Path, inline_max_bytes: usize) -> SqliteOutputStore {
    let db = SqliteDb::open(SqliteOptions::new(state.join("swarmd.db"))).unwrap();
    SqliteOutputStore::open(db, state.join("blobs"), inline_max_bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_store_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("swarmd.db"))).unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let store = SqliteOutputStore::with_clock(db, dir.path().join("blobs"), 1 << 18, clock.clone())
        .unwrap();
    conformance::run_all(Arc::new(store), &clock).await;
}

#[tokio::test]
async fn large_inline_values_spill_to_verified_deduplicated_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path(), 64);
    let task = Uuid::new_v4();
    let big = json!({"text": "y".repeat(500)});
    let events = vec![
        OutputEvent::Progress {
            stage: "s".repeat(200),
            note: None,
        },
        OutputEvent::Partial {
            chunk: ContentRef::Inline { value: big.clone() },
        },
        OutputEvent::Artifact {
            name: "small".into(),
            content: ContentRef::Inline {
                value: json!("tiny"),
            },
        },
        OutputEvent::inline_final(big.clone(), true),
    ];
    let records = store.append(task, 1, "w", events.clone()).await.unwrap();

    let bytes = serde_json::to_vec(&big).unwrap();
    let sha256 = hex(&Sha256::digest(&bytes));
    let expected_ref = ContentRef::FileRef {
        path: format!("blobs/{sha256}"),
        mime: Some("application/json".into()),
        size: bytes.len() as u64,
        sha256: sha256.clone(),
    };
    assert_eq!(records[0].event, events[0], "progress never spills");
    assert_eq!(
        records[1].event,
        OutputEvent::Partial {
            chunk: expected_ref.clone()
        }
    );
    assert_eq!(records[2].event, events[2], "small values stay inline");
    assert_eq!(
        records[3].event,
        OutputEvent::Final {
            content: expected_ref,
            ok: true
        }
    );

    let blob = fs::read(dir.path().join("blobs").join(&sha256)).unwrap();
    assert_eq!(hex(&Sha256::digest(&blob)), sha256);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&blob).unwrap(),
        big
    );
    let files: Vec<_> = fs::read_dir(dir.path().join("blobs")).unwrap().collect();
    assert_eq!(
        files.len(),
        1,
        "identical content is stored once, no temp files remain"
    );

    assert_eq!(store.tail(task, 1, 0, 10).await.unwrap(), records);
    assert_eq!(
        store.last_final(task, 1).await.unwrap().as_ref(),
        records.get(3)
    );
}

#[tokio::test]
async fn reopen_sees_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let task = Uuid::new_v4();
    let written = {
        let store = open_store(dir.path(), 1 << 18);
        let mut written = Vec::new();
        for attempt in 1..=3 {
            let events = vec![
                OutputEvent::Progress {
                    stage: "start".into(),
                    note: Some(format!("attempt {attempt}")),
                },
                OutputEvent::inline_final(json!({"attempt": attempt}), attempt == 3),
            ];
            written.extend(store.append(task, attempt, "w", events).await.unwrap());
        }
        store.db().close().unwrap();
        written
    };
    let store = open_store(dir.path(), 1 << 18);
    assert_eq!(store.list_attempts(task).await.unwrap(), [1, 2, 3]);
    let mut read = Vec::new();
    for attempt in 1..=3 {
        read.extend(store.tail(task, attempt, 0, 100).await.unwrap());
    }
    assert_eq!(read, written);
    let next = store
        .append(
            task,
            3,
            "w",
            vec![OutputEvent::inline_final(json!(1), true)],
        )
        .await;
    assert_eq!(next.unwrap()[0].seq, 3, "seq continues after reopen");
}

#[tokio::test]
async fn unreadable_stored_events_come_back_as_entries_not_a_failed_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path(), 1 << 18);
    let task = Uuid::new_v4();
    // Deeper than serde_json's recursion limit, as a row written before
    // intake bounded the depth could be.
    let deep = format!(
        r#"{{"type":"final","ok":true,"content":{{"kind":"inline","value":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(serde_json::from_str::<OutputEvent>(&deep).is_err());
    store
        .db()
        .write(move |tx| {
            let key = &task.as_bytes()[..];
            let insert = "INSERT INTO outputs VALUES (?1, 1, ?2, 0, 'w', ?3)";
            tx.execute(insert, rusqlite::params![key, 1, r#"{"type":"nope"}"#])?;
            tx.execute(insert, rusqlite::params![key, 2, deep])?;
            let fine = r#"{"type":"progress","stage":"fine"}"#;
            tx.execute(insert, rusqlite::params![key, 3, fine])?;
            Ok(())
        })
        .await
        .unwrap();
    let records = store.tail(task, 1, 0, 10).await.unwrap();
    assert_eq!(records.len(), 3);
    let OutputEvent::Progress { stage, note } = &records[0].event else {
        panic!("a corrupt row reads as a note: {:?}", records[0].event);
    };
    assert_eq!(stage, UNREADABLE_STAGE);
    assert!(note.as_deref().unwrap().contains(&format!("{task}/1/1")));
    let Some(ContentRef::Inline { value }) = records[1].event.content() else {
        panic!("the deep final keeps its shape: {:?}", records[1].event);
    };
    assert!(
        serde_json::to_string(value)
            .unwrap()
            .contains(crate::nesting::PRUNED_PLACEHOLDER)
    );
    assert_eq!(
        records[2].event,
        OutputEvent::Progress {
            stage: "fine".into(),
            note: None
        }
    );
    let last = store.last_final(task, 1).await.unwrap().unwrap();
    assert_eq!(last.seq, 2);
}

#[tokio::test]
async fn appends_after_close_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path(), 1 << 18);
    store.db().close().unwrap();
    let appended = store
        .append(
            Uuid::new_v4(),
            1,
            "w",
            vec![OutputEvent::inline_final(json!(1), true)],
        )
        .await;
    assert!(matches!(appended, Err(StoreError::Closed)));
}

/// Sets every blob's mtime `by` into the past, as if spilled that long ago.
fn age_blobs(state: &Path, by: Duration) {
    for entry in fs::read_dir(state.join("blobs")).unwrap() {
        let file = fs::File::options()
            .write(true)
            .open(entry.unwrap().path())
            .unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }
}

fn blob_of(record: &OutputRecord) -> String {
    match record.event.content() {
        Some(ContentRef::FileRef { sha256, .. }) => sha256.clone(),
        other => panic!("expected a blob reference, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_blobs_of_forgotten_tasks_and_keeps_shared_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path(), 64);
    let (gone, kept) = (Uuid::new_v4(), Uuid::new_v4());
    let shared = OutputEvent::inline_final(json!("s".repeat(200)), true);
    let own = OutputEvent::Partial {
        chunk: ContentRef::Inline {
            value: json!("o".repeat(200)),
        },
    };
    let gone_records = store
        .append(gone, 1, "w", vec![own, shared.clone()])
        .await
        .unwrap();
    // Behind the kept task's blob reference sit more rows than one scan
    // page holds, so the reference is only found on a later page.
    let filler: Vec<_> = (0..5000)
        .map(|i| OutputEvent::Progress {
            stage: format!("{i}"),
            note: None,
        })
        .collect();
    store.append(kept, 1, "w", filler).await.unwrap();
    store.append(kept, 2, "w", vec![shared]).await.unwrap();
    let (own_blob, shared_blob) = (blob_of(&gone_records[0]), blob_of(&gone_records[1]));

    store.forget(&[gone]).await.unwrap();
    let young = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(young, BlobSweep::default(), "blobs inside the grace stay");
    age_blobs(dir.path(), Duration::from_secs(7200));
    let sweep = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();

    assert_eq!((sweep.removed, sweep.kept), (1, 1));
    assert!(sweep.removed_bytes > 200);
    assert!(!dir.path().join("blobs").join(&own_blob).exists());
    let records = store.tail(kept, 2, 0, 10).await.unwrap();
    let ContentRef::FileRef { path, .. } = records[0].event.content().unwrap() else {
        panic!("the kept record still references its blob");
    };
    assert!(path.ends_with(&shared_blob));
    assert!(dir.path().join(path).exists());
}

#[tokio::test]
async fn the_sweep_deletes_blobs_whose_append_never_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path(), 64);
    // Spilled, but the append that was to reference it is never made.
    let prepared = store
        .prepare(vec![OutputEvent::inline_final(
            json!("z".repeat(200)),
            true,
        )])
        .await
        .unwrap();
    assert!(prepared.events[0].content().is_some());
    age_blobs(dir.path(), Duration::from_secs(7200));
    let sweep = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();
    assert_eq!((sweep.removed, sweep.kept), (1, 0));
    assert_eq!(fs::read_dir(dir.path().join("blobs")).unwrap().count(), 0);
}
