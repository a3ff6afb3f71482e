//! PostgreSQL-only store tests: nodes starting together on an empty
//! database, group commits under concurrent submitters, a batch that fails
//! alone, state across a reopen, a newer schema refused.

use std::sync::{Arc, Mutex};

use swarmd_engine::event::{Event, EventRecord, Logged};
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::conformance::{apply, event_seqs, new_task, put};
use swarmd_engine::store::{TaskStore, WriteOp, commit};
use swarmd_output_store::StoreError;
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgTaskStore, SCHEMA_VERSION};

pub(crate) fn event(seq: u64, task_id: TaskId) -> EventRecord {
    EventRecord {
        seq,
        ts_ms: seq,
        session: None,
        event: Event::TaskQueued { task_id },
    }
}

/// Opens `n` stores at once on the same fresh database and returns them
/// with the database's `schema_version` rows.
async fn open_together(n: usize) -> (Vec<PgDb>, Vec<i32>) {
    let database = fresh_database().await;
    let opens = (0..n).map(|_| {
        let opts = database.options();
        tokio::spawn(async move { PgDb::open(opts).await })
    });
    let mut dbs = Vec::new();
    for open in opens {
        dbs.push(open.await.unwrap().expect("every node opens the database"));
    }
    let rows = dbs[0]
        .query_i32("SELECT version FROM schema_version ORDER BY version")
        .await;
    (dbs, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_apply_the_schema_once() {
    let (dbs, versions) = open_together(4).await;
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    // Every node writes and reads through the one schema.
    for db in &dbs {
        let store = PgTaskStore::new(db.clone());
        let task = new_task("a", 1);
        apply(&store, vec![put(&task)]).await;
        assert_eq!(store.task(task.id).await.unwrap().unwrap(), task);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    db.execute_sql("INSERT INTO schema_version (version) VALUES (999)")
        .await;
    db.close().await;
    let refused = PgDb::open(database.options()).await.unwrap_err();
    assert!(
        matches!(&refused, StoreError::Schema(message) if message.contains("999")),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_share_group_commits_in_submission_order() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = Arc::new(PgTaskStore::new(db.clone()));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let total = 2_000u64;
    for seq in 1..=total {
        let task = new_task("a", seq);
        let order = Arc::clone(&order);
        let tx = tx.clone();
        store.submit(
            vec![put(&task), WriteOp::Events(vec![event(seq, task.id)])],
            Box::new(move |outcome| {
                outcome.unwrap();
                order.lock().unwrap().push(seq);
                let _ = tx.send(());
            }),
        );
    }
    for _ in 0..total {
        rx.recv().await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (1..=total).collect::<Vec<_>>());
    let stats = db.stats();
    assert!(
        stats.commits() < stats.jobs() / 4,
        "{} commits for {} jobs: writes were not grouped",
        stats.commits(),
        stats.jobs()
    );
    let seqs = event_seqs(&*store, usize::MAX).await;
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_fails_alone_and_order_holds() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = Arc::new(PgTaskStore::new(db.clone()));
    let first = new_task("a", 1);
    apply(&*store, vec![WriteOp::Events(vec![event(1, first.id)])]).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let before = new_task("a", 2);
    let mut doomed = new_task("a", 3);
    doomed.agent = "a\0".to_owned();
    let after = new_task("a", 4);
    let batches = vec![
        (
            "before",
            vec![put(&before), WriteOp::Events(vec![event(2, before.id)])],
        ),
        // PostgreSQL text cannot hold a NUL: this batch fails, nothing of
        // it is stored, and its event takes no seq.
        (
            "doomed",
            vec![put(&doomed), WriteOp::Events(vec![event(1, doomed.id)])],
        ),
        (
            "after",
            vec![put(&after), WriteOp::Events(vec![event(3, after.id)])],
        ),
    ];
    for (name, batch) in batches {
        let outcomes = Arc::clone(&outcomes);
        let tx = tx.clone();
        store.submit(
            batch,
            Box::new(move |outcome| {
                outcomes.lock().unwrap().push((name, outcome.is_ok()));
                let _ = tx.send(());
            }),
        );
    }
    for _ in 0..3 {
        rx.recv().await.unwrap();
    }
    assert_eq!(
        *outcomes.lock().unwrap(),
        [("before", true), ("doomed", false), ("after", true)]
    );
    assert!(store.task(doomed.id).await.unwrap().is_none());
    assert!(store.task(before.id).await.unwrap().is_some());
    assert!(store.task(after.id).await.unwrap().is_some());
    // The store numbers events at commit, whatever seq they carried: the
    // log stays gapless.
    let logged: Vec<(u64, Option<TaskId>)> = store
        .events_after(0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.event.task_id()))
        .collect();
    assert_eq!(
        logged,
        [
            (1, Some(first.id)),
            (2, Some(before.id)),
            (3, Some(after.id))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_close_and_reopen() {
    let database = fresh_database().await;
    let task = new_task("a", 1);
    {
        let db = PgDb::open(database.options()).await.unwrap();
        let store = PgTaskStore::new(db.clone());
        commit(
            &store,
            vec![
                put(&task),
                WriteOp::Events(vec![event(7, task.id), event(7, task.id)]),
            ],
        )
        .await
        .unwrap();
        db.close().await;
        let closed = commit(&store, vec![put(&task)]).await.unwrap_err();
        assert!(matches!(closed, StoreError::Closed), "{closed}");
    }
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgTaskStore::new(db);
    assert_eq!(store.task(task.id).await.unwrap().unwrap(), task);
    let live = store.load_live(0).await.unwrap();
    // Numbered at commit: the seqs given are ignored.
    assert_eq!(live.last_event_seq, 2);
    assert_eq!(live.tasks.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pump_reads_only_the_kinds_it_asks_for_whole() {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgTaskStore::new(db.clone());
    let task = TaskId::new();
    let finished = EventRecord {
        seq: 2,
        ts_ms: 2,
        session: None,
        event: Event::TaskFinished {
            task_id: task,
            attempt: 1,
            status: swarmd_engine::task::TaskStatus::Failed,
            result: None,
        },
    };
    apply(
        &store,
        vec![WriteOp::Events(vec![
            event(1, task),
            finished.clone(),
            event(3, task),
        ])],
    )
    .await;
    // A row logged before events had a kind is read whole.
    let old = serde_json::to_string(&event(4, task)).unwrap();
    db.execute_sql(&format!(
        "INSERT INTO events (seq, ts_ms, task, body) VALUES (4, 4, '{}', '{old}')",
        task.as_uuid()
    ))
    .await;

    let acted_on = store
        .log_after(0, 100, Some(&Event::ACTED_ON))
        .await
        .unwrap();
    assert_eq!(
        acted_on,
        [
            Logged::Seq(1),
            Logged::Whole(finished.clone()),
            Logged::Seq(3),
            Logged::Whole(event(4, task)),
        ]
    );
    let whole = store.log_after(1, 2, None).await.unwrap();
    assert_eq!(
        whole,
        [Logged::Whole(finished), Logged::Whole(event(3, task))]
    );
    assert!(store.log_after(4, 10, Some(&[])).await.unwrap().is_empty());
}
