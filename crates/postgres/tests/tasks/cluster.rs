//! Two nodes on one database, through the store alone: one gapless event
//! log numbered at commit, ownership stamped on insert, a takeover of a
//! node whose lease ran out, the fencing of its late writes and of a
//! restarted node's previous incarnation, and a group's notification
//! carrying its seqs and acted-on events to the other node's listener.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarmd_engine::event::{Event, EventRecord, Logged};
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::conformance::{event_seqs, new_task, put};
use swarmd_engine::store::{TaskStore, WriteOp, commit};
use swarmd_engine::task::{TaskResult, TaskStatus};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{EventWake, OfferEntries, PgDb, PgTaskStore};
use uuid::Uuid;

use super::keys::two_nodes;
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

/// What node B's listener saw: groups offered to it, and wake-ups.
struct Heard {
    offered: Arc<Mutex<Vec<Vec<Logged>>>>,
    wake: EventWake,
}

async fn listen(db: &PgDb, accept: bool) -> Heard {
    let offered: Arc<Mutex<Vec<Vec<Logged>>>> = Arc::default();
    let sink = Arc::clone(&offered);
    let offer: OfferEntries = Arc::new(move |entries| {
        sink.lock().unwrap().push(entries);
        accept
    });
    let wake = db.cluster().listen_events(offer).await.unwrap();
    Heard { offered, wake }
}

impl Heard {
    /// The groups offered so far, after waiting up to 5 s for `n`.
    async fn groups(&self, n: usize) -> Vec<Vec<Logged>> {
        for _ in 0..500 {
            if self.offered.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.offered.lock().unwrap().clone()
    }

    /// How many groups were offered so far.
    fn count(&self) -> usize {
        self.offered.lock().unwrap().len()
    }

    /// Whether a wake-up comes within 300 ms.
    async fn woken(&mut self) -> bool {
        tokio::time::timeout(Duration::from_millis(300), self.wake.recv())
            .await
            .is_ok()
    }
}

fn finished(task_id: TaskId, result: &str) -> EventRecord {
    EventRecord {
        seq: 0,
        ts_ms: 9,
        session: None,
        event: Event::TaskFinished {
            task_id,
            attempt: 1,
            status: TaskStatus::Pass,
            result: Some(TaskResult {
                value: serde_json::json!(result),
                ok: true,
            }),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_group_reaches_a_listener_with_its_seqs_and_acted_on_events() {
    let (_database, (_, a), (b_db, b)) = two_nodes().await;
    let mut heard = listen(&b_db, true).await;

    // A's group: a queued event stepped past, the finish whole, each at
    // the seq the log gives it; no wake-up, so no read of the log.
    let task = new_task("a", 1);
    let done = finished(task.id, "ok");
    commit(
        &a,
        vec![
            put(&task),
            WriteOp::Events(vec![event(0, task.id), done.clone()]),
        ],
    )
    .await
    .unwrap();
    let groups = heard.groups(1).await;
    let logged = b
        .log_after(0, 10, Some(&Event::ACTED_ON[..]))
        .await
        .unwrap();
    assert_eq!(groups, std::slice::from_ref(&logged));
    assert_eq!(logged[0], Logged::Seq(1));
    assert_eq!(logged[1], Logged::Whole(EventRecord { seq: 2, ..done }));
    assert!(!heard.woken().await, "a group given whole wakes nothing");

    // B's own group is its bus's already: neither offered nor a wake-up.
    commit(&b, vec![WriteOp::Events(vec![event(0, task.id)])])
        .await
        .unwrap();
    assert!(!heard.woken().await);
    assert_eq!(heard.count(), 1);

    // Acted-on bodies past the payload's limit: a wake-up to read the log.
    let large = finished(task.id, &"x".repeat(9_000));
    commit(&a, vec![WriteOp::Events(vec![large])])
        .await
        .unwrap();
    assert!(
        heard.woken().await,
        "a group too large to carry wakes the pump"
    );
    assert_eq!(heard.count(), 1);

    // A bus that refuses the group (something follows the log) gets the
    // wake-up instead.
    let mut refusing = listen(&b_db, false).await;
    commit(&a, vec![WriteOp::Events(vec![event(0, task.id)])])
        .await
        .unwrap();
    assert!(refusing.woken().await);
    assert_eq!(refusing.groups(1).await, [vec![Logged::Seq(5)]]);
}
