//! Which node holds a live task (`PgDb::live_owner`), as a node asks for
//! a task it does not hold: by id and by a handle's digest, with the
//! owner's advertised URL and liveness; nothing for a finished task or an
//! unknown handle.

use swarmd_engine::store::commit;
use swarmd_engine::store::conformance::{new_task, put};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{OwnerKey, PgDb, PgTaskStore};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_of_a_live_task_is_found_by_id_and_by_handle_digest() {
    let database = fresh_database().await;
    let node = Uuid::new_v4();
    let db = PgDb::open(database.options()).await.unwrap();
    db.cluster()
        .register_node(node, "http://node-a:7070")
        .await
        .unwrap();
    let store = PgTaskStore::new(db.clone());
    let task = new_task("a", 1);
    commit(&store, vec![put(&task)]).await.unwrap();
    let digest = [7u8; 32];
    db.execute_sql(&format!(
        "INSERT INTO handles (task, attempt, digest, exp_secs, body)
         VALUES ('{}', 1, '\\x{}', 0, '{{}}')",
        task.id.as_uuid(),
        "07".repeat(32)
    ))
    .await;

    let by_id = db
        .cluster()
        .live_owner(OwnerKey::Task(task.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_id.task, Some(task.id));
    assert_eq!(by_id.node, node);
    assert_eq!(by_id.advertise_url, "http://node-a:7070");
    assert!(by_id.alive);
    let by_handle = db
        .cluster()
        .live_owner(OwnerKey::Handle(digest))
        .await
        .unwrap();
    assert_eq!(by_handle, Some(by_id));
    assert_eq!(
        db.cluster()
            .live_owner(OwnerKey::Handle([8; 32]))
            .await
            .unwrap(),
        None
    );

    // A node declared dead still names its tasks, as not alive.
    db.execute_sql(&format!(
        "UPDATE nodes SET state = 'dead' WHERE id = '{node}'"
    ))
    .await;
    let dead = db
        .cluster()
        .live_owner(OwnerKey::Task(task.id))
        .await
        .unwrap()
        .unwrap();
    assert!(!dead.alive);

    // A finished task has no owner to ask.
    db.execute_sql(&format!(
        "UPDATE tasks SET finished_ms = 1 WHERE id = '{}'",
        task.id.as_uuid()
    ))
    .await;
    assert_eq!(
        db.cluster()
            .live_owner(OwnerKey::Task(task.id))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.cluster()
            .live_owner(OwnerKey::Handle(digest))
            .await
            .unwrap(),
        None
    );
}
