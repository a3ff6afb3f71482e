//! Two nodes on one database, through the store alone: one gapless event
//! log numbered at commit, ownership stamped on insert, a takeover of a
//! node whose lease ran out, and the fencing of its late writes and of a
//! restarted node's previous incarnation.

use std::time::Duration;

use swarmd_engine::store::conformance::{event_seqs, new_task, put};
use swarmd_engine::store::{TaskStore, WriteOp, commit};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgTaskStore};
use uuid::Uuid;

use super::postgres_only::event;

const LEASE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_past_its_lease_is_taken_over_and_fenced() {
    let database = fresh_database().await;
    let (a_id, b_id) = (Uuid::new_v4(), Uuid::new_v4());
    let a_db = PgDb::open(database.options()).await.unwrap();
    let b_db = PgDb::open(database.options()).await.unwrap();
    let a_reg = a_db
        .cluster()
        .register_node(a_id, "http://a")
        .await
        .unwrap();
    let b_reg = b_db
        .cluster()
        .register_node(b_id, "http://b")
        .await
        .unwrap();
    assert!(b_reg.epoch > a_reg.epoch);
    let (a, b) = (
        PgTaskStore::new(a_db.clone()),
        PgTaskStore::new(b_db.clone()),
    );

    // Both nodes write; the log is one gapless order, each task owned by
    // its writer.
    let on_a = new_task("a", 1);
    let on_b = new_task("b", 2);
    commit(
        &a,
        vec![put(&on_a), WriteOp::Events(vec![event(0, on_a.id)])],
    )
    .await
    .unwrap();
    commit(
        &b,
        vec![put(&on_b), WriteOp::Events(vec![event(0, on_b.id)])],
    )
    .await
    .unwrap();
    commit(
        &a,
        vec![WriteOp::Events(vec![event(0, on_a.id), event(0, on_a.id)])],
    )
    .await
    .unwrap();
    let log = event_seqs(&b, 10).await;
    assert_eq!(log, [1, 2, 3, 4]);
    let owners = a_db
        .query_text(&format!(
            "SELECT owner_node::text FROM tasks WHERE id IN ('{}', '{}') ORDER BY id",
            on_a.id.as_uuid(),
            on_b.id.as_uuid()
        ))
        .await;
    assert_eq!(owners, [a_id.to_string(), b_id.to_string()]);
    // Each node recovers only its own live tasks.
    let mine = a.load_live(0).await.unwrap();
    assert_eq!(
        mine.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        [on_a.id]
    );
    assert_eq!(mine.last_event_seq, 4);

    // A fresh heartbeat: nobody is taken over.
    assert!(a_db.cluster().heartbeat().await.unwrap());
    assert!(
        b_db.cluster()
            .take_over_expired(LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    // Node A's lease runs out (by the database's clock): B takes its task.
    a_db.execute_sql(&format!(
        "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = '{a_id}'"
    ))
    .await;
    let taken = b_db.cluster().take_over_expired(LEASE).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].node, taken[0].epoch), (a_id, a_reg.epoch));
    assert_eq!(taken[0].tasks, [on_a.id]);
    let snapshot = b_db.cluster().load_taken(&taken[0].tasks, 0).await.unwrap();
    assert_eq!(snapshot.tasks, std::slice::from_ref(&on_a));
    assert!(
        b_db.cluster()
            .take_over_expired(LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    // Node A learns it at its heartbeat, and its late writes change nothing.
    assert!(!a_db.cluster().heartbeat().await.unwrap());
    let mut late = on_a.clone();
    late.prompt = "late".to_owned();
    let refused = commit(
        &a,
        vec![put(&late), WriteOp::Events(vec![event(0, on_a.id)])],
    )
    .await
    .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    assert!(a_db.cluster().is_fenced());
    assert_eq!(b.task(on_a.id).await.unwrap().unwrap(), on_a);
    assert_eq!(b.events_after(0, 10).await.unwrap().len(), 4);
    // B writes on; the log stays gapless.
    commit(&b, vec![WriteOp::Events(vec![event(0, on_a.id)])])
        .await
        .unwrap();
    let log = event_seqs(&b, 10).await;
    assert_eq!(log, [1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_fences_its_previous_incarnation_and_keeps_its_tasks() {
    let database = fresh_database().await;
    let id = Uuid::new_v4();
    let old_db = PgDb::open(database.options()).await.unwrap();
    let old_reg = old_db
        .cluster()
        .register_node(id, "http://a")
        .await
        .unwrap();
    let old = PgTaskStore::new(old_db.clone());
    let task = new_task("a", 1);
    commit(&old, vec![put(&task)]).await.unwrap();

    let new_db = PgDb::open(database.options()).await.unwrap();
    let new_reg = new_db
        .cluster()
        .register_node(id, "http://a")
        .await
        .unwrap();
    assert!(new_reg.epoch > old_reg.epoch);
    let new = PgTaskStore::new(new_db.clone());
    assert_eq!(
        new.load_live(0).await.unwrap().tasks,
        std::slice::from_ref(&task)
    );

    let refused = commit(&old, vec![put(&task)]).await.unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    assert!(!old_db.cluster().heartbeat().await.unwrap());
    commit(&new, vec![put(&task)]).await.unwrap();
    assert!(new_db.cluster().heartbeat().await.unwrap());
}
