//! A worker pool given one node of a cluster finds the others; given every
//! node (`--server` once per node), it runs the remote
//! attempts each node queues within its one `--concurrency`, an attempt
//! claimed beyond its slots waits with its lease renewed, and when a node
//! dies the retry its survivor queues reaches the same pool, whose child
//! of the dead node's attempt is stopped once that attempt's lease ran out.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Cluster, create, finished};
use crate::daemon::{eventually, process_gone, read_pid};
use crate::harness::{PATIENCE, parts};
use crate::pools::{Pool, Setup, file, mint};

/// A remote agent on every node.
const REMOTE: &str = r#"
[agents.remote]
kind = "remote"
stream = "ndjson"
"#;

/// Starts a pool of `remote` on both nodes, its files in node A's directory.
async fn pool_of_both(cluster: &Cluster, name: &str, concurrency: u32) -> Pool {
    let token = mint(&cluster.nodes[0], &["remote"]);
    let setup = Setup {
        args: vec!["--server".to_owned(), cluster.nodes[1].base.clone()],
        ..Setup::default()
    };
    Pool::start_with(
        &cluster.nodes[0],
        &token,
        "remote",
        name,
        concurrency,
        setup,
    )
    .await
}

/// Waits until every node counts the pool connected: its claims are in
/// flight on each.
async fn connected(cluster: &Cluster, pool: &Pool) {
    for node in &cluster.nodes {
        let until = Instant::now() + PATIENCE;
        while !node.metrics().await.contains("swarmd_pools_connected 1") {
            assert!(Instant::now() < until, "{}", pool.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Which of `tasks`' first attempts have started a child.
fn started(cluster: &Cluster, tasks: &[String]) -> Vec<String> {
    tasks
        .iter()
        .filter(|t| file(&cluster.nodes[0], t, 1, "pid").exists())
        .cloned()
        .collect()
}

/// Waits until `n` of `tasks` have started a child; those.
async fn until_started(cluster: &Cluster, pool: &Pool, tasks: &[String], n: usize) -> Vec<String> {
    let until = Instant::now() + PATIENCE;
    loop {
        let started = started(cluster, tasks);
        if started.len() >= n {
            return started;
        }
        assert!(Instant::now() < until, "{}", pool.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_given_one_node_claims_every_nodes_remote_attempts() {
    let cluster = Cluster::start(2, REMOTE).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    // Node B lists both nodes for a pool's token, and a bare GET of it
    // without one is refused.
    let token = mint(a, &["remote"]);
    let (status, listed) = parts(b.get("/v1/pool/nodes", &token).send().await.unwrap()).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["nodes"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    let refused = b.get("/v1/pool/nodes", "nope").send().await.unwrap();
    assert_eq!(refused.status(), 401);

    // The pool is given node A alone, and learns node B from it.
    let pool = Pool::start_with(a, &token, "remote", "pool-a", 2, Setup::default()).await;
    connected(&cluster, &pool).await;
    let policy = json!({"max_attempts": 1, "attempt_timeout_secs": 5});
    let mut tasks = Vec::new();
    for node in [b, a] {
        let body = json!({"agent": "remote", "prompt": "hold", "policy": policy});
        tasks.push(create(node, body).await);
    }
    until_started(&cluster, &pool, &tasks, 2).await;
    for task in &tasks {
        std::fs::write(file(a, task, 1, "go"), "").unwrap();
    }
    for (task, (index, node)) in tasks.iter().zip([(1, b), (0, a)]) {
        assert_eq!(cluster.owner(task).await, cluster.node_id(index));
        let view = finished(node, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        assert_eq!(
            view["result"]["value"],
            json!({"pool": "pool-a", "attempt": 1})
        );
    }
    assert!(
        pool.log()
            .contains("claiming from a node of the cluster too"),
        "{}",
        pool.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_after_the_pool_started_is_claimed_from() {
    let mut cluster = Cluster::start(1, REMOTE).await;
    let token = mint(&cluster.nodes[0], &["remote"]);
    let setup = Setup {
        args: vec!["--rediscover-secs".to_owned(), "1".to_owned()],
        ..Setup::default()
    };
    let pool = Pool::start_with(&cluster.nodes[0], &token, "remote", "pool-a", 1, setup).await;
    // The pool claims from A (it asked A for nodes before that) before B
    // joins.
    connected(&cluster, &pool).await;
    let b = cluster.add_node(REMOTE).await;
    let task = create(b, json!({"agent": "remote", "prompt": "hold"})).await;
    let a = &cluster.nodes[0];
    let started = Instant::now();
    while !file(a, &task, 1, "pid").exists() {
        assert!(started.elapsed() < PATIENCE, "{}", pool.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(file(a, &task, 1, "go"), "").unwrap();
    let view = finished(&cluster.nodes[1], &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(cluster.owner(&task).await, cluster.node_id(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_node_without_the_agent_is_left_out_and_the_pool_goes_on() {
    // Node B runs no remote agent: it refuses the pool's claims (404).
    let cluster = Cluster::start_each(&[REMOTE, super::QUICK]).await;
    let a = &cluster.nodes[0];
    let token = mint(a, &["remote"]);
    let pool = Pool::start_with(a, &token, "remote", "pool-a", 1, Setup::default()).await;
    let body = json!({"agent": "remote", "prompt": "hold"});
    let task = create(a, body).await;
    let started = Instant::now();
    while !file(a, &task, 1, "pid").exists() {
        assert!(started.elapsed() < PATIENCE, "{}", pool.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(file(a, &task, 1, "go"), "").unwrap();
    let view = finished(a, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    // Node B's refusal comes when its answer does, which a loaded
    // machine may delay past the task's end.
    eventually("node B's refusal in the pool's log", || {
        pool.log()
            .contains("refused the pool; not claiming from it")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pool_runs_every_nodes_remote_attempts_within_its_slots() {
    let cluster = Cluster::start(2, REMOTE).await;
    let pool = pool_of_both(&cluster, "pool-ab", 1).await;
    connected(&cluster, &pool).await;
    // One task on each node, with a lease short enough that an attempt
    // left unrenewed would fail: both are handed to the pool's claims in
    // flight, and it has one slot.
    let policy = json!({"max_attempts": 1, "attempt_timeout_secs": 3});
    let mut tasks = Vec::new();
    for node in &cluster.nodes {
        let body = json!({"agent": "remote", "prompt": "hold", "policy": policy});
        tasks.push(create(node, body).await);
    }
    let first = until_started(&cluster, &pool, &tasks, 1).await;
    // Past a whole lease, still one child: the pool runs no more than its
    // slots, and the attempt it holds beyond them keeps its lease.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(started(&cluster, &tasks), first, "{}", pool.log());
    std::fs::write(file(&cluster.nodes[0], &first[0], 1, "go"), "").unwrap();
    let both = until_started(&cluster, &pool, &tasks, 2).await;
    let second = both.iter().find(|t| **t != first[0]).unwrap();
    std::fs::write(file(&cluster.nodes[0], second, 1, "go"), "").unwrap();
    for (task, node) in tasks.iter().zip(&cluster.nodes) {
        let view = finished(node, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        assert_eq!(
            view["result"]["value"],
            json!({"pool": "pool-ab", "attempt": 1})
        );
    }
    for node in &cluster.nodes {
        let metrics = node.metrics().await;
        assert!(
            metrics.contains("swarmd_remote_attempts_claimed_total 1"),
            "each node handed out its own: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_remote_attempt_is_retried_through_the_survivor_on_the_same_pool() {
    let mut cluster = Cluster::start(2, REMOTE).await;
    let pool = pool_of_both(&cluster, "pool-ab", 2).await;
    connected(&cluster, &pool).await;
    let policy = json!({"max_attempts": 2, "attempt_timeout_secs": 3});
    let task = create(
        &cluster.nodes[0],
        json!({"agent": "remote", "prompt": "hold", "policy": policy}),
    )
    .await;
    let first = read_pid(&file(&cluster.nodes[0], &task, 1, "pid")).await;

    cluster.nodes[0].kill9().await;
    // Node B takes the task over and queues its retry; the pool claims it
    // from B.
    let second = read_pid(&file(&cluster.nodes[0], &task, 2, "pid")).await;
    assert!(!process_gone(second));
    std::fs::write(file(&cluster.nodes[0], &task, 2, "go"), "").unwrap();
    let view = finished(&cluster.nodes[1], &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(
        view["result"]["value"],
        json!({"pool": "pool-ab", "attempt": 2})
    );
    // The first attempt's child, whose node is gone, is stopped once its
    // lease ran out unrenewed.
    eventually("the dead node's child is stopped", || process_gone(first)).await;
    assert!(
        pool.log()
            .contains("lease ran out with no heartbeat answered"),
        "{}",
        pool.log()
    );
}
