//! The output store's conformance suite, and what only the PostgreSQL
//! output store shows, against a fresh database of the test cluster: big
//! values spilled into the database and read back by another node, and
//! swept once nothing references them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_output_store::{ContentRef, ManualClock, OutputEvent, OutputStore, conformance};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgOutputStore};

fn big_final(value: &str) -> OutputEvent {
    OutputEvent::Final {
        content: ContentRef::Inline {
            value: json!(value),
        },
        ok: true,
    }
}

/// The blob name of a stored `file_ref`.
fn blob_of(event: &OutputEvent) -> String {
    match event.content() {
        Some(ContentRef::FileRef { sha256, path, .. }) => {
            assert_eq!(path, &format!("blobs/{sha256}"));
            sha256.clone()
        }
        other => panic!("expected a file_ref, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_store_conformance() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let store = PgOutputStore::with_clock(db.clone(), 1024, clock.clone());
    conformance::run_all(Arc::new(store), &clock).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_value_spilled_by_one_node_is_read_by_another() {
    let database = fresh_database().await;
    let (one, other) = (
        PgDb::open(database.options()).await.unwrap(),
        PgDb::open(database.options()).await.unwrap(),
    );
    let writer = PgOutputStore::open(one.clone(), 1024);
    let reader = PgOutputStore::open(other.clone(), 1024);
    let task = uuid::Uuid::now_v7();
    let big = "x".repeat(64 * 1024);
    let stored = writer
        .append(task, 1, "w", vec![big_final(&big)])
        .await
        .unwrap();
    let name = blob_of(&stored[0].event);

    // The other node reads the record and, by its name, the value's bytes.
    let read = reader.last_final(task, 1).await.unwrap().unwrap();
    assert_eq!(blob_of(&read.event), name);
    let bytes = reader.read_blob(&name).await.unwrap().expect("the blob");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
        json!(big)
    );
    // Through `append_at` (the engine's path) the other node's copy of the
    // same bytes reuses the blob.
    let prepared = reader.prepare(vec![big_final(&big)]).await.unwrap();
    let (records, durable) = reader.append_at(task, 2, 1, "w", prepared);
    durable.await.unwrap();
    assert_eq!(blob_of(&records[0].event), name);
    assert_eq!(
        one.query_i32("SELECT count(*)::int FROM blobs").await,
        vec![1]
    );
    assert_eq!(reader.read_blob(&"0".repeat(64)).await.unwrap(), None);
    assert_eq!(reader.read_blob("../../etc/passwd").await.unwrap(), None);
    one.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_keeps_referenced_and_fresh_blobs_and_deletes_the_rest() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgOutputStore::open(db.clone(), 1024);
    let (kept_task, gone_task) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let kept = store
        .append(kept_task, 1, "w", vec![big_final(&"k".repeat(4096))])
        .await
        .unwrap();
    let gone = store
        .append(gone_task, 1, "w", vec![big_final(&"g".repeat(4096))])
        .await
        .unwrap();
    let (kept, gone) = (blob_of(&kept[0].event), blob_of(&gone[0].event));
    // An orphan, as a crash between the spill and its row leaves one.
    let orphan = store
        .prepare(vec![big_final(&"o".repeat(4096))])
        .await
        .unwrap();
    let orphan = blob_of(&orphan.events()[0]);

    // Within the grace nothing goes, referenced or not.
    let swept = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(swept, Default::default());
    store.forget(&[gone_task]).await.unwrap();
    db.execute_sql("UPDATE blobs SET claimed_at = now() - interval '2 hours'")
        .await;
    let swept = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();
    assert_eq!((swept.removed, swept.kept), (2, 1), "{swept:?}");
    assert!(swept.removed_bytes > 8192, "{swept:?}");
    assert!(store.read_blob(&kept).await.unwrap().is_some());
    for name in [&gone, &orphan] {
        assert_eq!(store.read_blob(name).await.unwrap(), None);
    }
    // A value spilled again after its blob was swept is stored again.
    let again = store
        .append(gone_task, 2, "w", vec![big_final(&"g".repeat(4096))])
        .await
        .unwrap();
    assert_eq!(blob_of(&again[0].event), gone);
    assert!(store.read_blob(&gone).await.unwrap().is_some());
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mark_phase_pages_through_every_output() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgOutputStore::open(db.clone(), 1024);
    // More rows than one mark page, the referencing one last in key order.
    let small: Vec<OutputEvent> = (0..5000)
        .map(|i| OutputEvent::Progress {
            stage: format!("s{i}"),
            note: None,
        })
        .collect();
    let first = uuid::Uuid::from_u128(1);
    let last = uuid::Uuid::from_u128(u128::MAX);
    store.append(first, 1, "w", small).await.unwrap();
    let stored = store
        .append(last, 1, "w", vec![big_final(&"m".repeat(4096))])
        .await
        .unwrap();
    let name = blob_of(&stored[0].event);
    db.execute_sql("UPDATE blobs SET claimed_at = now() - interval '2 hours'")
        .await;
    let swept = store.sweep_blobs(Duration::from_secs(3600)).await.unwrap();
    assert_eq!((swept.removed, swept.kept), (0, 1), "{swept:?}");
    assert!(store.read_blob(&name).await.unwrap().is_some());
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spilled_values_survive_a_reopen() {
    let database = fresh_database().await;
    let task = uuid::Uuid::now_v7();
    let big = "x".repeat(4096);
    {
        let db = PgDb::open(database.options()).await.unwrap();
        let store = PgOutputStore::open(db.clone(), 1024);
        store
            .append(task, 1, "w", vec![big_final(&big)])
            .await
            .unwrap();
        db.close().await;
    }
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgOutputStore::open(db.clone(), 1024);
    let last = store.last_final(task, 1).await.unwrap().unwrap();
    let bytes = store
        .read_blob(&blob_of(&last.event))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
        json!(big)
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_files_of_an_earlier_swarmd_move_into_the_database() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgOutputStore::open(db.clone(), 1024);
    let dir = tempfile::tempdir().unwrap();
    let bytes = serde_json::to_vec(&json!("f".repeat(2048))).unwrap();
    let name = swarmd_output_store::blob_name(&bytes);
    std::fs::write(dir.path().join(&name), &bytes).unwrap();
    // A file whose bytes do not match its name, and one that is no blob.
    let damaged = "ab".repeat(32);
    std::fs::write(dir.path().join(&damaged), b"\"not its bytes\"").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"kept").unwrap();

    assert_eq!(store.import_blob_files(dir.path()).await.unwrap(), 1);
    assert_eq!(store.read_blob(&name).await.unwrap(), Some(bytes));
    assert!(!dir.path().join(&name).exists());
    assert!(dir.path().join(&damaged).exists());
    assert!(dir.path().join("notes.txt").exists());
    assert_eq!(store.read_blob(&damaged).await.unwrap(), None);
    // Again: nothing left to move; a missing directory is nothing too.
    assert_eq!(store.import_blob_files(dir.path()).await.unwrap(), 0);
    let missing = dir.path().join("missing");
    assert_eq!(store.import_blob_files(&missing).await.unwrap(), 0);
    db.close().await;
}
