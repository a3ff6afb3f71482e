//! The output store's conformance suite, and what only the PostgreSQL
//! output store shows, against a fresh database of the test cluster.

use std::sync::Arc;

use swarmd_output_store::{ManualClock, OutputEvent, OutputStore, conformance};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgOutputStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_store_conformance() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let blobs = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let store =
        PgOutputStore::with_clock(db.clone(), blobs.path().join("blobs"), 1024, clock.clone())
            .unwrap();
    conformance::run_all(Arc::new(store), &clock).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_survive_a_reopen_and_large_values_spill_to_blobs() {
    let database = fresh_database().await;
    let blobs = tempfile::tempdir().unwrap();
    let task = uuid::Uuid::now_v7();
    let big = "x".repeat(4096);
    {
        let db = PgDb::open(database.options()).await.unwrap();
        let store = PgOutputStore::open(db.clone(), blobs.path().join("blobs"), 1024).unwrap();
        let stored = store
            .append(
                task,
                1,
                "w",
                vec![OutputEvent::Final {
                    content: swarmd_output_store::ContentRef::Inline {
                        value: serde_json::json!(big),
                    },
                    ok: true,
                }],
            )
            .await
            .unwrap();
        assert!(
            matches!(
                stored[0].event.content(),
                Some(swarmd_output_store::ContentRef::FileRef { .. })
            ),
            "{:?}",
            stored[0].event
        );
        db.close().await;
    }
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgOutputStore::open(db.clone(), blobs.path().join("blobs"), 1024).unwrap();
    let last = store.last_final(task, 1).await.unwrap().unwrap();
    assert_eq!(last.seq, 1);
    // A referenced blob outlives a sweep with no grace.
    let swept = store.sweep_blobs(std::time::Duration::ZERO).await.unwrap();
    assert_eq!((swept.removed, swept.kept), (0, 1));
    store.forget(&[task]).await.unwrap();
    let swept = store.sweep_blobs(std::time::Duration::ZERO).await.unwrap();
    assert_eq!(swept.removed, 1);
}
