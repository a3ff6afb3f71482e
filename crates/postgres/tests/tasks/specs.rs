//! A task's row on PostgreSQL: its spec in `spec`, written once, and its
//! state in `body`, rewritten at each change; rows an older build wrote
//! whole (no spec) read and update as before; a group that folds a task's
//! creation with a later state keeps the spec; a failed group makes the
//! next write of a task carry its spec again, and a write queued before
//! its task's creation committed carries it too.

use serde_json::{Map, Value};
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::conformance::{apply, new_task, put};
use swarmd_engine::store::{TaskFilter, TaskStore, commit};
use swarmd_engine::task::{AttemptOutcome, Task};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgTaskStore};

/// A store on a fresh database.
async fn fresh() -> (swarmd_postgres::testing::TestDatabase, PgDb, PgTaskStore) {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store = PgTaskStore::new(db.clone());
    (database, db, store)
}

/// The raw `spec` and `body` columns of `id`'s row (`spec` "" when NULL).
async fn columns(db: &PgDb, id: TaskId) -> (String, String) {
    let id = id.as_uuid();
    let spec = db
        .query_text(&format!("SELECT spec FROM tasks WHERE id = '{id}'"))
        .await;
    let body = db
        .query_text(&format!("SELECT body FROM tasks WHERE id = '{id}'"))
        .await;
    assert_eq!((spec.len(), body.len()), (1, 1), "one row for {id}");
    (spec[0].clone(), body[0].clone())
}

fn object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text).unwrap() {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The task's whole JSON, as an older build stored it in `body`.
fn whole(task: &Task) -> String {
    serde_json::to_string(task).unwrap()
}

/// Inserts `task`'s row as an older build left it: the whole task in
/// `body`, no spec.
async fn insert_whole(db: &PgDb, task: &Task) {
    db.execute_sql(&format!(
        "INSERT INTO tasks (id, status, agent, body) VALUES ('{}', '{}', '{}', '{}')",
        task.id.as_uuid(),
        task.status().as_str(),
        task.agent,
        whole(task).replace('\'', "''"),
    ))
    .await;
}

/// `task` read back by id, by a listing on its prompt, and at boot.
async fn assert_reads_back(store: &PgTaskStore, task: &Task) {
    assert_eq!(store.task(task.id).await.unwrap().as_ref(), Some(task));
    let filter = TaskFilter {
        prompt_contains: Some(task.prompt.to_uppercase()),
        limit: 10,
        ..TaskFilter::default()
    };
    let listed = store.list_tasks(&filter).await.unwrap();
    assert_eq!(listed, std::slice::from_ref(task));
    if !task.status().is_terminal() {
        let live = store.load_live(0).await.unwrap();
        assert!(live.tasks.contains(task), "{:?} not live", task.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_writes_its_spec_once_and_its_state_at_each_change() {
    let (database, db, store) = fresh().await;
    let mut task = new_task("a", 1);
    apply(&store, vec![put(&task)]).await;
    let (spec, body) = columns(&db, task.id).await;
    assert_eq!(object(&spec), object(&task.encode_spec().unwrap()));
    assert_eq!(body, task.encode_state().unwrap());
    assert!(!body.contains("prompt"), "{body}");
    assert_reads_back(&store, &task).await;

    task.start_attempt(2).unwrap();
    apply(&store, vec![put(&task)]).await;
    let (spec_after, body) = columns(&db, task.id).await;
    assert_eq!(spec_after, spec, "the spec is written once");
    assert_eq!(body, task.encode_state().unwrap());
    assert_reads_back(&store, &task).await;

    // Another process sends the spec again (its first write of the task):
    // the stored one stays.
    let other = PgTaskStore::new(PgDb::open(database.options()).await.unwrap());
    let mut changed = task.clone();
    changed.prompt = "not the prompt it was created with".to_owned();
    changed.finish(AttemptOutcome::Pass, None, None, 3).unwrap();
    apply(&other, vec![put(&changed)]).await;
    let (spec_after, body) = columns(&db, task.id).await;
    assert_eq!(spec_after, spec);
    assert_eq!(body, changed.encode_state().unwrap());
    task.finish(AttemptOutcome::Pass, None, None, 3).unwrap();
    assert_reads_back(&store, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_written_whole_reads_back_and_takes_its_spec_at_its_next_write() {
    let (_database, db, store) = fresh().await;
    let mut task = new_task("a", 1);
    task.start_attempt(2).unwrap();
    insert_whole(&db, &task).await;
    assert_eq!(columns(&db, task.id).await.0, "");
    assert_reads_back(&store, &task).await;

    // This process has not sent its spec: the write carries it.
    task.requeue(3).unwrap();
    apply(&store, vec![put(&task)]).await;
    let (spec, body) = columns(&db, task.id).await;
    assert_eq!(object(&spec), object(&task.encode_spec().unwrap()));
    assert_eq!(body, task.encode_state().unwrap());
    assert_reads_back(&store, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_without_a_spec_stays_whole_when_a_state_comes_without_one() {
    let (_database, db, store) = fresh().await;
    let mut task = new_task("a", 1);
    apply(&store, vec![put(&task)]).await;
    // The row as an older build rewrites it: whole, its spec gone, with
    // state fields the next state does not write.
    task.start_attempt(2).unwrap();
    task.reason = Some("stale".to_owned());
    task.usage.input_tokens = 7;
    let id = task.id.as_uuid();
    db.execute_sql(&format!(
        "UPDATE tasks SET spec = NULL, status = 'running', body = '{}' WHERE id = '{id}'",
        whole(&task).replace('\'', "''"),
    ))
    .await;
    assert_reads_back(&store, &task).await;

    // This process sent the spec already: the write carries the state only.
    task.reason = None;
    task.usage = Default::default();
    task.requeue(3).unwrap();
    apply(&store, vec![put(&task)]).await;
    let (spec, body) = columns(&db, task.id).await;
    assert_eq!(spec, "", "no spec was sent");
    assert_eq!(serde_json::from_str::<Task>(&body).unwrap(), task);
    assert_reads_back(&store, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_folded_with_a_later_state_keeps_its_spec() {
    let (_database, db, store) = fresh().await;
    let created = new_task("a", 1);
    let mut running = created.clone();
    running.start_attempt(2).unwrap();
    // One job, so one group: both rows of the task fold into one.
    apply(&store, vec![put(&created), put(&running)]).await;
    let (spec, body) = columns(&db, created.id).await;
    assert_eq!(object(&spec), object(&created.encode_spec().unwrap()));
    assert_eq!(body, running.encode_state().unwrap());
    assert_reads_back(&store, &running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_a_failed_group_carries_the_spec_again() {
    let (_database, db, store) = fresh().await;
    let task = new_task("a", 1);
    let mut doomed = new_task("a", 2);
    // PostgreSQL text cannot hold a NUL: the group fails and the task's
    // creation rolls back with it.
    doomed.agent = "a\0".to_owned();
    commit(&store, vec![put(&task), put(&doomed)])
        .await
        .unwrap_err();
    assert!(store.task(task.id).await.unwrap().is_none());

    let mut running = task.clone();
    running.start_attempt(2).unwrap();
    apply(&store, vec![put(&running)]).await;
    let (spec, _) = columns(&db, task.id).await;
    assert_eq!(object(&spec), object(&task.encode_spec().unwrap()));
    assert_reads_back(&store, &running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_queued_behind_a_creation_that_rolls_back_carries_the_spec() {
    let (_database, db, store) = fresh().await;
    let task = new_task("a", 1);
    let mut doomed = new_task("a", 2);
    doomed.agent = "a\0".to_owned();
    let mut running = task.clone();
    running.start_attempt(2).unwrap();
    // Both are queued before either commits: the task's creation (in a
    // job that fails, so it rolls back) and its next state.
    let (created, started) = tokio::join!(
        commit(&store, vec![put(&task), put(&doomed)]),
        commit(&store, vec![put(&running)]),
    );
    created.unwrap_err();
    started.unwrap();
    // The state carried the spec (no write of it had committed), so its
    // row is whole and reads back.
    let (spec, body) = columns(&db, task.id).await;
    assert_eq!(object(&spec), object(&task.encode_spec().unwrap()));
    assert_eq!(body, running.encode_state().unwrap());
    assert_reads_back(&store, &running).await;
}
