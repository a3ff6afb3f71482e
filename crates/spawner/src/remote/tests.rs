//! The pool queue on paused time: claims wait and take in order, a heartbeat
//! hears of a gone attempt at once, reports are fenced by pool.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::{AttemptId, TaskId};

use super::*;

fn job(agent: &str, n: u32) -> (AttemptId, RemoteJob) {
    let attempt = AttemptId::new(TaskId::new(), n);
    let job = RemoteJob {
        attempt,
        agent: agent.to_owned(),
        credential: WorkerCredential::new("swc1.x".into(), "wh-x".into(), 0),
        prompt: "p".into(),
        system: None,
        input: None,
        run: RemoteRun {
            stdin: StdinMode::Prompt,
            stream: StreamMode::Ndjson,
            timeout: None,
            max_output_bytes: 1024,
        },
        continued_from: None,
        resume_session: None,
        resume_from: None,
    };
    (attempt, job)
}

#[tokio::test(start_paused = true)]
async fn a_claim_waits_for_an_attempt_and_takes_the_oldest_first() {
    let pools = Arc::new(RemotePools::new());
    let waiting = {
        let pools = Arc::clone(&pools);
        tokio::spawn(async move { pools.claim("a", "p1", 2, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (first, one) = job("a", 1);
    let (second, two) = job("a", 1);
    let (_, other) = job("b", 1);
    let _e1 = pools.enqueue(one);
    let _e2 = pools.enqueue(two);
    let _e3 = pools.enqueue(other);
    // The three are queued before the waiting claim runs again.
    let claimed = waiting.await.unwrap();
    let ids: Vec<AttemptId> = claimed.iter().map(|c| c.job.attempt).collect();
    assert_eq!(ids, vec![first, second]);
    assert_eq!(pools.queued("a"), 0);
    assert_eq!(pools.queued("b"), 1, "another agent's attempt stays queued");
}

#[tokio::test(start_paused = true)]
async fn a_claim_with_nothing_queued_returns_empty_at_its_deadline() {
    let pools = RemotePools::new();
    let started = Instant::now();
    let claimed = pools.claim("a", "p1", 4, Duration::from_secs(5)).await;
    assert!(claimed.is_empty());
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(pools.connected_pools(), 1);
    tokio::time::sleep(POOL_SEEN_WINDOW).await;
    assert_eq!(pools.connected_pools(), 0, "a silent pool stops counting");
}

#[tokio::test(start_paused = true)]
async fn the_wait_in_the_queue_is_reported_with_the_claim() {
    let pools = RemotePools::new();
    let _ended = pools.enqueue(job("a", 1).1);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let claimed = pools.claim("a", "p1", 1, Duration::ZERO).await;
    assert_eq!(claimed[0].waited, Duration::from_millis(250));
    assert_eq!(pools.claimed_total(), 1);
    assert_eq!(pools.claim_wait().counts().iter().sum::<u64>(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_hears_of_a_removed_attempt_at_once() {
    let pools = Arc::new(RemotePools::new());
    let (id, one) = job("a", 1);
    let _ended = pools.enqueue(one);
    assert_eq!(pools.claim("a", "p1", 1, Duration::ZERO).await.len(), 1);
    let beat = {
        let pools = Arc::clone(&pools);
        tokio::spawn(async move {
            let started = Instant::now();
            let gone = pools.wait_gone("p1", &[id], Duration::from_secs(10)).await;
            (gone, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    pools.remove(id, "a");
    let (gone, waited) = beat.await.unwrap();
    assert_eq!(gone, vec![id]);
    assert_eq!(waited, Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_held_attempt_is_not_gone_and_another_pools_is() {
    let pools = RemotePools::new();
    let (id, one) = job("a", 1);
    let _ended = pools.enqueue(one);
    pools.claim("a", "p1", 1, Duration::ZERO).await;
    let started = Instant::now();
    assert!(
        pools
            .wait_gone("p1", &[id], Duration::from_secs(2))
            .await
            .is_empty()
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    // The same attempt named by a pool that does not hold it is gone for it.
    assert_eq!(pools.wait_gone("p2", &[id], Duration::ZERO).await, vec![id]);
    let (held, by) = pools.held(id).unwrap();
    assert_eq!((held.agent.as_str(), by.as_str()), ("a", "p1"));
}

#[tokio::test(start_paused = true)]
async fn only_the_holding_pool_can_report_an_end() {
    let pools = RemotePools::new();
    let (id, one) = job("a", 1);
    let ended = pools.enqueue(one);
    pools.claim("a", "p1", 1, Duration::ZERO).await;
    let end = PoolEnd::Failed("boom".into());
    assert_eq!(
        pools.report("p2", id, end.clone()),
        Err(ReportError::NotHeld)
    );
    pools.report("p1", id, end.clone()).unwrap();
    assert_eq!(ended.await.unwrap(), end);
    assert!(pools.held(id).is_none());
    assert_eq!(
        pools.report("p1", id, end),
        Err(ReportError::NotHeld),
        "once only"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_queued_attempt_is_never_claimed() {
    let pools = RemotePools::new();
    let (id, one) = job("a", 1);
    let _ended = pools.enqueue(one);
    pools.remove(id, "a");
    assert!(pools.claim("a", "p1", 1, Duration::ZERO).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn attempts_put_back_are_claimed_again_first_and_in_order() {
    let pools = RemotePools::new();
    let (first, a) = job("a", 1);
    let (second, b) = job("a", 1);
    let (third, c) = job("a", 1);
    let _heard = [pools.enqueue(a), pools.enqueue(b), pools.enqueue(c)];
    let claimed = pools.claim("a", "p1", 2, Duration::ZERO).await;
    assert_eq!(claimed.len(), 2);
    // Only what p1 still holds goes back: not p2's, not an unknown one.
    let (unknown, _) = job("a", 1);
    let others = pools.claim("a", "p2", 1, Duration::ZERO).await;
    assert_eq!(others[0].job.attempt, third);
    pools.put_back("p1", &[first, second, third, unknown]);
    assert!(pools.held(first).is_none() && pools.held(second).is_none());
    assert_eq!(
        pools.held(third).map(|(_, pool)| pool).as_deref(),
        Some("p2")
    );
    let again = pools.claim("a", "p3", 4, Duration::ZERO).await;
    let order: Vec<AttemptId> = again.iter().map(|c| c.job.attempt).collect();
    assert_eq!(order, [first, second]);
}

#[tokio::test(start_paused = true)]
async fn a_claim_dropped_unanswered_queues_its_attempts_again() {
    let pools = RemotePools::new();
    let (first, a) = job("a", 1);
    let (second, b) = job("a", 1);
    let _heard = [pools.enqueue(a), pools.enqueue(b)];
    let claimed = pools.claim("a", "p1", 2, Duration::ZERO).await;
    drop(Unanswered::new(&pools, "p1", &claimed));
    assert!(pools.held(first).is_none() && pools.held(second).is_none());
    let again = pools.claim("a", "p2", 2, Duration::ZERO).await;
    let order: Vec<AttemptId> = again.iter().map(|c| c.job.attempt).collect();
    assert_eq!(order, [first, second], "queued again, in order");
    Unanswered::new(&pools, "p2", &again).answered();
    assert!(pools.held(first).is_some_and(|(_, pool)| pool == "p2"));
}
