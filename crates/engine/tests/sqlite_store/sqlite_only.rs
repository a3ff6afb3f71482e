//! SQLite-only store tests: reopen, failed batches, the event high-water
//! mark, schema versions, a closed database.

use super::*;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::TaskResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_state_survives_close_and_reopen() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let live = running("a", 1);
    let done = finished("b", AttemptOutcome::Pass, 50);
    let s1 = session("kept");
    apply(
        store,
        vec![
            put(&live),
            put(&done),
            WriteOp::PutAttempt(attempt(live.id, 1, None)),
            WriteOp::PutAttempt(attempt(done.id, 1, Some(AttemptOutcome::Pass))),
            WriteOp::PutHandle {
                digest: digest(7),
                record: handle(live.id, 1, 1_000),
            },
            WriteOp::IdempotencyKey {
                key: "k".into(),
                task_id: live.id,
            },
            WriteOp::Events(vec![event(1, 1, live.id), event(2, 2, done.id)]),
            WriteOp::Audit(audit(live.id, 3, AuditAction::Spawned)),
            WriteOp::PutSession(Box::new(s1.clone())),
        ],
    )
    .await;
    let tasks_before = store.list_tasks(&all(None, None, None)).await.unwrap();
    let events_before = store.events_after(0, 100).await.unwrap();
    let audit_before = store.audit(None, 100).await.unwrap();
    let snap_before = store.load_live(10).await.unwrap();

    fixture.store.db().close().unwrap();
    assert!(matches!(store.task(live.id).await, Err(StoreError::Closed)));
    let reopened = open_sqlite(&fixture.path).unwrap();
    let store: &dyn TaskStore = &reopened;
    assert_eq!(
        store.list_tasks(&all(None, None, None)).await.unwrap(),
        tasks_before
    );
    assert_eq!(store.events_after(0, 100).await.unwrap(), events_before);
    assert_eq!(store.audit(None, 100).await.unwrap(), audit_before);
    assert_eq!(store.task_for_key("k").await.unwrap(), Some(live.id));
    assert_eq!(store.attempts(done.id).await.unwrap().len(), 1);
    let snap = store.load_live(10).await.unwrap();
    assert_eq!(snap.tasks, snap_before.tasks);
    assert_eq!(snap.tasks, vec![live.clone()]);
    assert_eq!(snap.attempts, snap_before.attempts);
    assert_eq!(snap.handles, vec![(digest(7), handle(live.id, 1, 1_000))]);
    assert_eq!(snap.sessions, vec![s1]);
    assert_eq!(snap.last_event_seq, 2);

    // Audit ids keep counting after a restart.
    apply(
        store,
        vec![WriteOp::Audit(audit(done.id, 4, AuditAction::Completed))],
    )
    .await;
    assert_eq!(store.audit(None, 1).await.unwrap()[0].id, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_failed_batch_writes_nothing_and_keeps_order() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let first = new_task("a", 1);
    let rejected = new_task("a", 2);
    let after = new_task("a", 3);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let batches = vec![
        vec![put(&first), WriteOp::Events(vec![event(1, 1, first.id)])],
        // A reused event seq fails the whole batch, task included. Task-store
        // batches run without their own savepoint, so batches that shared its
        // group commit fail with it: each batch is all or nothing.
        vec![
            put(&rejected),
            WriteOp::IdempotencyKey {
                key: "r".into(),
                task_id: rejected.id,
            },
            WriteOp::Events(vec![event(1, 2, rejected.id)]),
        ],
        vec![put(&after), WriteOp::Events(vec![event(2, 3, after.id)])],
    ];
    for (n, batch) in batches.into_iter().enumerate() {
        let outcomes = Arc::clone(&outcomes);
        store.submit(
            batch,
            Box::new(move |outcome| outcomes.lock().unwrap().push((n, outcome.is_ok()))),
        );
    }
    // The barrier may share the failed group commit too.
    let _ = commit(store, vec![]).await;
    let outcomes = outcomes.lock().unwrap().clone();
    let order: Vec<usize> = outcomes.iter().map(|(n, _)| *n).collect();
    assert_eq!(order, vec![0, 1, 2], "callbacks run in submission order");
    assert!(!outcomes[1].1, "the bad batch fails");
    assert_eq!(store.task(rejected.id).await.unwrap(), None);
    assert_eq!(store.task_for_key("r").await.unwrap(), None);
    let events = store.events_after(0, 10).await.unwrap();
    for (n, ok) in [(0, outcomes[0].1), (2, outcomes[2].1)] {
        let task = if n == 0 { &first } else { &after };
        let stored = store.task(task.id).await.unwrap().is_some();
        assert_eq!(stored, ok, "batch {n}: acknowledged exactly when written");
        assert_eq!(
            events.iter().any(|e| e.event.task_id() == Some(task.id)),
            ok
        );
    }
    // The store goes on: a later batch commits.
    apply(
        store,
        vec![put(&after), WriteOp::Events(vec![event(5, 5, after.id)])],
    )
    .await;
    assert!(store.task(after.id).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_event_seq_high_water_survives_prune_and_reopen() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let task = new_task("a", 1);
    apply(
        store,
        vec![WriteOp::Events(
            (1..=3).map(|s| event(s, s, task.id)).collect(),
        )],
    )
    .await;
    store.prune(1_000).await.unwrap();
    assert!(store.events_after(0, 10).await.unwrap().is_empty());
    // The next event must not reuse a seq a subscriber may have seen.
    assert_eq!(store.load_live(0).await.unwrap().last_event_seq, 3);

    fixture.store.db().close().unwrap();
    let reopened = open_sqlite(&fixture.path).unwrap();
    assert_eq!(reopened.load_live(0).await.unwrap().last_event_seq, 3);
    apply(
        &reopened,
        vec![WriteOp::Events(vec![event(4, 2_000, task.id)])],
    )
    .await;
    assert_eq!(reopened.load_live(0).await.unwrap().last_event_seq, 4);
}

#[test]
fn sqlite_schema_version_is_stamped_and_newer_files_are_refused() {
    let fixture = sqlite_fixture();
    fixture.store.db().close().unwrap();
    let version = |path: &Path| -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(version(&fixture.path), SqliteTaskStore::SCHEMA_VERSION);

    // Opening again at the same version is a no-op migration.
    let again = open_sqlite(&fixture.path).unwrap();
    again.db().close().unwrap();
    assert_eq!(version(&fixture.path), SqliteTaskStore::SCHEMA_VERSION);

    let conn = rusqlite::Connection::open(&fixture.path).unwrap();
    conn.pragma_update(None, "user_version", SqliteTaskStore::SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let refused = open_sqlite(&fixture.path).unwrap_err();
    assert!(matches!(refused, StoreError::Sqlite(_)), "{refused}");
    let message = refused.to_string();
    let newer = SqliteTaskStore::SCHEMA_VERSION + 1;
    assert!(
        message.contains(&format!("task schema version {newer}")) && message.contains("newer"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_upgraded_with_its_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swarmd.db");
    let task = running("a", 1);
    let record = handle(task.id, 1, 1_000);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE handles (
             digest BLOB PRIMARY KEY, task BLOB NOT NULL, attempt INTEGER NOT NULL,
             exp_secs INTEGER NOT NULL, body TEXT NOT NULL
         ) WITHOUT ROWID;
         CREATE INDEX handles_task ON handles (task);
         CREATE TABLE events (seq INTEGER PRIMARY KEY, ts_ms INTEGER NOT NULL, task BLOB, body TEXT NOT NULL);
         CREATE INDEX events_ts ON events (ts_ms);
         PRAGMA user_version = 1;",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO handles VALUES (?1, ?2, 1, 1000, ?3)",
        rusqlite::params![
            digest(9),
            task.id.as_uuid().into_bytes(),
            serde_json::to_string(&record).unwrap()
        ],
    )
    .unwrap();
    drop(conn);

    let store = open_sqlite(&path).unwrap();
    let snap = store.load_live(10).await.unwrap();
    assert_eq!(snap.handles, vec![(digest(9), record)]);
    store.db().close().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SqliteTaskStore::SCHEMA_VERSION);
    let dropped: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name IN ('events_ts', 'handles_task', 'handles_v1')",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(dropped, 0);
}

#[test]
fn sqlite_open_on_a_closed_db_fails() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("swarmd.db"))).unwrap();
    db.close().unwrap();
    assert!(matches!(SqliteTaskStore::open(db), Err(StoreError::Closed)));
}

/// A JSON array nested `depth` levels around `1`.
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_the_reader_cannot_decode_never_fail_a_page() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let fine = finished("a", AttemptOutcome::Pass, 50);
    let deep = finished("b", AttemptOutcome::Pass, 60);
    let broken = finished("c", AttemptOutcome::Blocked, 70);
    let events = vec![
        event(1, 1, fine.id),
        event(2, 2, deep.id),
        event(3, 3, broken.id),
        event(4, 4, fine.id),
    ];
    apply(
        store,
        vec![
            put(&fine),
            put(&deep),
            put(&broken),
            WriteOp::Events(events),
        ],
    )
    .await;

    // Rows as a daemon without the intake bound could write them: deeper
    // than the decoder's recursion limit, or not JSON at all.
    let mut deep_body = serde_json::to_value(&deep).unwrap();
    deep_body["result"]["value"] = nested(200);
    let deep_event = json!({"seq": 2, "ts_ms": 2, "event": {"kind": "senior_asked",
        "task_id": deep.id, "attempt": 1, "question": nested(200)}});
    let conn = rusqlite::Connection::open(&fixture.path).unwrap();
    let key = |task: &Task| task.id.as_uuid().into_bytes();
    let update = "UPDATE tasks SET body = ?2 WHERE id = ?1";
    conn.execute(update, rusqlite::params![key(&deep), deep_body.to_string()])
        .unwrap();
    conn.execute(update, rusqlite::params![key(&broken), "{broken"])
        .unwrap();
    let update = "UPDATE events SET body = ?2 WHERE seq = ?1";
    conn.execute(update, rusqlite::params![2, deep_event.to_string()])
        .unwrap();
    conn.execute(update, rusqlite::params![3, "{broken"])
        .unwrap();
    drop(conn);

    let page = store.list_tasks(&all(None, None, None)).await.unwrap();
    assert_eq!(page.len(), 3, "every row is on the page");
    assert_eq!(page[2], fine);
    let read_deep = &page[1];
    assert_eq!(read_deep.id, deep.id);
    let value = &read_deep.result.as_ref().unwrap().value;
    assert!(
        value
            .to_string()
            .contains("<unreadable: nested too deeply>")
    );
    let stand_in = &page[0];
    assert_eq!(
        (stand_in.id, stand_in.status(), stand_in.agent.as_str()),
        (broken.id, TaskStatus::Blocked, "c")
    );
    assert_eq!(
        stand_in.reason.as_deref(),
        Some("the stored record of this task cannot be read")
    );
    assert_eq!(store.task(broken.id).await.unwrap().unwrap(), *stand_in);
    assert_eq!(store.task(deep.id).await.unwrap().unwrap(), *read_deep);

    let read: Vec<u64> = store
        .events_after(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    assert_eq!(read, vec![1, 2, 4], "the undecodable event is left out");
}

/// The `spec` and `body` columns of a task's row.
fn task_columns(path: &std::path::Path, task: &Task) -> (Option<String>, String) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT spec, body FROM tasks WHERE id = ?1",
        [task.id.as_uuid().into_bytes()],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spec_is_written_once_and_its_state_at_each_change() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let mut task = new_task("a", 10);
    task.prompt = "a long prompt ".repeat(100);
    apply(store, vec![put(&task)]).await;
    let (spec, created) = task_columns(&fixture.path, &task);
    let spec = spec.expect("a new task's row holds its spec");
    assert!(spec.contains("a long prompt"));
    assert!(
        !created.contains("a long prompt"),
        "the state leaves the prompt out"
    );

    task.start_attempt(11).unwrap();
    apply(store, vec![put(&task)]).await;
    let (spec_after, running) = task_columns(&fixture.path, &task);
    assert_eq!(
        spec_after.as_deref(),
        Some(spec.as_str()),
        "the spec is kept"
    );
    assert_ne!(running, created);
    assert_eq!(store.task(task.id).await.unwrap().unwrap(), task);
    let filter = TaskFilter {
        prompt_contains: Some("LONG PROMPT".into()),
        ..all(None, None, None)
    };
    assert_eq!(store.list_tasks(&filter).await.unwrap(), vec![task]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_holding_the_whole_task_reads_back_and_is_written_whole_again() {
    let fixture = sqlite_fixture();
    let store: &dyn TaskStore = &fixture.store;
    let mut task = running("a", 10);
    task.session = Some(SessionId::new());
    apply(store, vec![put(&task)]).await;
    // A row as a file from before specs had their column holds it.
    let conn = rusqlite::Connection::open(&fixture.path).unwrap();
    conn.execute(
        "UPDATE tasks SET spec = NULL, body = ?2 WHERE id = ?1",
        rusqlite::params![
            task.id.as_uuid().into_bytes(),
            serde_json::to_string(&task).unwrap()
        ],
    )
    .unwrap();
    drop(conn);
    assert_eq!(store.task(task.id).await.unwrap().unwrap(), task);
    let filter = TaskFilter {
        session: task.session,
        ..all(None, None, None)
    };
    assert_eq!(store.list_tasks(&filter).await.unwrap(), vec![task.clone()]);

    let task = {
        let result = TaskResult {
            value: json!("done"),
            ok: true,
        };
        let mut task = task;
        task.finish(AttemptOutcome::Pass, Some(result), None, 20)
            .unwrap();
        task
    };
    apply(store, vec![put(&task)]).await;
    let (spec, _) = task_columns(&fixture.path, &task);
    assert!(spec.is_some(), "its next change writes the spec apart");
    assert_eq!(store.task(task.id).await.unwrap().unwrap(), task);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_file_gets_the_spec_column_and_keeps_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swarmd.db");
    let task = running("a", 1);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE tasks (
             id BLOB PRIMARY KEY, status TEXT NOT NULL, agent TEXT NOT NULL,
             finished_ms INTEGER, body TEXT NOT NULL
         );
         PRAGMA user_version = 4;",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO tasks VALUES (?1, 'running', 'a', NULL, ?2)",
        rusqlite::params![
            task.id.as_uuid().into_bytes(),
            serde_json::to_string(&task).unwrap()
        ],
    )
    .unwrap();
    drop(conn);

    let store = open_sqlite(&path).unwrap();
    assert_eq!(store.load_live(10).await.unwrap().tasks, vec![task.clone()]);
    store.db().close().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SqliteTaskStore::SCHEMA_VERSION);
}
