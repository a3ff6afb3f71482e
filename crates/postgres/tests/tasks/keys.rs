//! Idempotency key claims between two nodes, through the store alone: one
//! winner when both claim at once, a claimant's unrecorded claim waited
//! for while it lives and taken over once it is fenced or the claim is
//! 30 s old, and a released claim free again.

use std::time::{Duration, Instant};

use swarmd_engine::ids::TaskId;
use swarmd_engine::store::conformance::{new_task, put};
use swarmd_engine::store::{KeyClaim, TaskStore, WriteOp, commit};
use swarmd_postgres::testing::fresh_database;
use swarmd_postgres::{PgDb, PgTaskStore};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(2);

/// Two registered nodes on one fresh database.
pub(crate) async fn two_nodes() -> (
    swarmd_postgres::testing::TestDatabase,
    (PgDb, PgTaskStore),
    (PgDb, PgTaskStore),
) {
    let database = fresh_database().await;
    let a_db = PgDb::open(database.options()).await.unwrap();
    let b_db = PgDb::open(database.options()).await.unwrap();
    a_db.cluster()
        .register_node(Uuid::new_v4(), "http://a")
        .await
        .unwrap();
    b_db.cluster()
        .register_node(Uuid::new_v4(), "http://b")
        .await
        .unwrap();
    let (a, b) = (
        PgTaskStore::new(a_db.clone()),
        PgTaskStore::new(b_db.clone()),
    );
    (database, (a_db, a), (b_db, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_nodes_claiming_a_key_at_once_wins() {
    let (_database, (_, a), (_, b)) = two_nodes().await;
    for round in 0..20 {
        let key = format!("k-{round}");
        let (on_a, on_b) = (new_task("a", 1), new_task("b", 1));
        // Each claimant records its task once it holds the key, as the
        // engine does; the loser waits for the winner's record.
        let claim = |store: PgTaskStore, task: swarmd_engine::task::Task, key: String| async move {
            let claim = store.claim_key(&key, task.id).await.unwrap();
            if claim == KeyClaim::Claimed {
                commit(
                    &store,
                    vec![
                        put(&task),
                        WriteOp::IdempotencyKey {
                            key,
                            task_id: task.id,
                        },
                    ],
                )
                .await
                .unwrap();
            }
            (task.id, claim)
        };
        let (ra, rb) = tokio::join!(
            claim(a.clone(), on_a, key.clone()),
            claim(b.clone(), on_b, key.clone())
        );
        let winners: Vec<TaskId> = [ra, rb]
            .iter()
            .filter(|(_, claim)| *claim == KeyClaim::Claimed)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {ra:?} {rb:?}");
        let loser = if ra.1 == KeyClaim::Claimed {
            rb.1
        } else {
            ra.1
        };
        assert_eq!(loser, KeyClaim::Taken(winners[0]), "round {round}");
        assert_eq!(a.task_for_key(&key).await.unwrap(), Some(winners[0]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_claim_is_waited_for_then_taken_from_a_fenced_claimant() {
    let (_database, (a_db, a), (b_db, b)) = two_nodes().await;
    let stuck = new_task("a", 1);
    assert_eq!(a.claim_key("k", stuck.id).await.unwrap(), KeyClaim::Claimed);

    // While A lives, B waits for A's record; A records, B is told.
    let waiting = {
        let b = b.clone();
        let id = new_task("b", 1).id;
        tokio::spawn(async move { b.claim_key("k", id).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "B did not wait for A's record");
    commit(&a, vec![put(&stuck)]).await.unwrap();
    assert_eq!(waiting.await.unwrap(), KeyClaim::Taken(stuck.id));

    // A claims another key and dies before recording its task: once B has
    // taken A over, the claim is B's to take, and A's late record fails.
    let orphan = new_task("a", 2);
    assert_eq!(
        a.claim_key("k2", orphan.id).await.unwrap(),
        KeyClaim::Claimed
    );
    a_db.execute_sql("UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE epoch = (SELECT min(epoch) FROM nodes)")
        .await;
    assert_eq!(
        b_db.cluster().take_over_expired(LEASE).await.unwrap().len(),
        1
    );
    let retried = new_task("b", 2);
    let started = Instant::now();
    assert_eq!(
        b.claim_key("k2", retried.id).await.unwrap(),
        KeyClaim::Claimed
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        commit(&a, vec![put(&orphan)])
            .await
            .unwrap_err()
            .is_fenced()
    );
    commit(&b, vec![put(&retried)]).await.unwrap();
    assert_eq!(b.task_for_key("k2").await.unwrap(), Some(retried.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_claim_frees_its_key_but_a_recorded_one_stays() {
    let (_database, (_, a), (_, b)) = two_nodes().await;
    let dropped = new_task("a", 1);
    assert_eq!(
        a.claim_key("k", dropped.id).await.unwrap(),
        KeyClaim::Claimed
    );
    a.release_key("k", dropped.id).await.unwrap();
    let next = new_task("b", 1);
    assert_eq!(b.claim_key("k", next.id).await.unwrap(), KeyClaim::Claimed);
    commit(&b, vec![put(&next)]).await.unwrap();
    // A release of a recorded task's claim changes nothing.
    b.release_key("k", next.id).await.unwrap();
    assert_eq!(
        a.claim_key("k", new_task("a", 2).id).await.unwrap(),
        KeyClaim::Taken(next.id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_claim_left_by_a_live_node_is_taken_after_30_seconds() {
    let (_database, (a_db, a), (_, b)) = two_nodes().await;
    let dropped = new_task("a", 1);
    assert_eq!(
        a.claim_key("k", dropped.id).await.unwrap(),
        KeyClaim::Claimed
    );
    // A's creation was dropped before it recorded anything, and A lives on:
    // once the claim is 30 s old, another claim takes it.
    a_db.execute_sql("UPDATE idem_keys SET claimed_at = now() - interval '31 seconds'")
        .await;
    let retried = new_task("b", 1);
    assert_eq!(
        b.claim_key("k", retried.id).await.unwrap(),
        KeyClaim::Claimed
    );
    commit(&b, vec![put(&retried)]).await.unwrap();
    assert_eq!(
        a.claim_key("k", new_task("a", 2).id).await.unwrap(),
        KeyClaim::Taken(retried.id)
    );
}
