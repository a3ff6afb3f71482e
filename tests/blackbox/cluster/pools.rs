//! A worker pool given one node of a cluster finds the others, at their
//! own URLs or (`--through-server`) through the node given; given a load
//! balancer, through it, naming each node, with no flag; given every
//! node (`--server` once per node), it runs the remote
//! attempts each node queues within its one `--concurrency`, an attempt
//! claimed beyond its slots waits with its lease renewed, and when a node
//! dies the retry its survivor queues reaches the same pool, whose child
//! of the dead node's attempt is stopped once that attempt's lease ran out,
//! and whose slot that attempt's unpostable Final does not keep from the
//! retry.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Cluster, create, finished, forwarded};
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

/// Creates one held remote task on node B, then one on node A, waits until
/// the pool started both, and releases them; the tasks, B's first.
async fn one_released_on_each(cluster: &Cluster, pool: &Pool) -> Vec<String> {
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let policy = json!({"max_attempts": 1, "attempt_timeout_secs": 5});
    let mut tasks = Vec::new();
    for node in [b, a] {
        let body = json!({"agent": "remote", "prompt": "hold", "policy": policy});
        tasks.push(create(node, body).await);
    }
    until_started(cluster, pool, &tasks, 2).await;
    for task in &tasks {
        std::fs::write(file(a, task, 1, "go"), "").unwrap();
    }
    tasks
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
    let tasks = one_released_on_each(&cluster, &pool).await;
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
async fn a_claim_naming_a_node_goes_there_once_its_pool_token_verified() {
    let cluster = Cluster::start(2, REMOTE).await;
    let a = &cluster.nodes[0];
    let token = mint(a, &["remote"]);
    let (status, listed) = parts(a.get("/v1/pool/nodes", &token).send().await.unwrap()).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["members"][1]["id"], cluster.node_id(1), "{listed}");
    assert_eq!(listed["members"][1]["url"], listed["nodes"][1], "{listed}");
    let claim = |bearer: &str, node: &str| {
        a.post("/v1/pool/claim", bearer)
            .header("x-swarmd-node", node)
            .json(&json!({"pool": "p", "agent": "remote", "max": 1, "wait_ms": 0}))
            .send()
    };
    // A bad token is refused here, never forwarded.
    let refused = claim("nope", &cluster.node_id(1)).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(forwarded(a).await, 0);
    // A name that is not a node id, or no node's, is refused here too.
    let (status, body) = parts(claim(&token, "node-b").await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let nobody = "0190f5a2-c3d4-7000-8000-000000000000";
    let (status, body) = parts(claim(&token, nobody).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    // Node B's name goes to node B, which answers.
    let answer = claim(&token, &cluster.node_id(1)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.headers()["x-swarmd-forwarded-to"],
        cluster.node_id(1).as_str()
    );
    assert_eq!(forwarded(a).await, 1);
    // A request that says it was forwarded already is never forwarded
    // again, whatever it names: no loop between nodes.
    let again = a
        .post("/v1/pool/claim", &token)
        .header("x-swarmd-node", cluster.node_id(1))
        .header("x-swarmd-forwarded-by", cluster.node_id(1))
        .json(&json!({"pool": "p", "agent": "remote", "max": 1, "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(again).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("owner_unavailable")),
        "{body}"
    );
    assert_eq!(forwarded(a).await, 1);
    // Node A's own name is served by A.
    let answer = claim(&token, &cluster.node_id(0)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(!answer.headers().contains_key("x-swarmd-forwarded-to"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_through_one_node_runs_every_nodes_remote_attempts() {
    let cluster = Cluster::start(2, REMOTE).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let token = mint(a, &["remote"]);
    let setup = Setup {
        args: vec!["--through-server".to_owned()],
        ..Setup::default()
    };
    let pool = Pool::start_with(a, &token, "remote", "pool-t", 2, setup).await;
    // Node B counts the pool connected although it is only ever given A.
    connected(&cluster, &pool).await;
    let tasks = one_released_on_each(&cluster, &pool).await;
    for (task, node) in tasks.iter().zip([b, a]) {
        let view = finished(node, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        assert_eq!(
            view["result"]["value"],
            json!({"pool": "pool-t", "attempt": 1})
        );
    }
    assert_eq!(cluster.owner(&tasks[0]).await, cluster.node_id(1));
    // Everything of B's attempt (its claims, heartbeats, prompt and
    // result) went through A, and the pool never used B's own URL.
    assert!(forwarded(a).await >= 3, "{}", a.metrics().await);
    assert!(!pool.log().contains(&b.base), "{}", pool.log());
    assert!(pool.log().contains(&cluster.node_id(1)), "{}", pool.log());
}

/// A load balancer in front of `backends`: each connection it accepts
/// goes to the next backend in turn. Its URL.
async fn round_robin(backends: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hosts: Vec<String> = backends
        .iter()
        .map(|b| b.trim_start_matches("http://").to_owned())
        .collect();
    tokio::spawn(async move {
        for turn in 0usize.. {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let host = hosts[turn % hosts.len()].clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(host).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_behind_a_load_balancer_runs_every_nodes_remote_attempts() {
    let cluster = Cluster::start(2, REMOTE).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let balancer = round_robin(vec![a.base.clone(), b.base.clone()]).await;
    let token = mint(a, &["remote"]);
    // The pool is given the balancer alone, with no flag: each of its
    // connections lands on either node, and since the balancer's URL is
    // neither node's, each claim and heartbeat names its node.
    let setup = Setup {
        server: Some(&balancer),
        ..Setup::default()
    };
    let pool = Pool::start_with(a, &token, "remote", "pool-lb", 2, setup).await;
    connected(&cluster, &pool).await;
    let policy = json!({"max_attempts": 1, "attempt_timeout_secs": 5});
    let mut tasks = Vec::new();
    for round in 0..3 {
        for node in [a, b] {
            let body =
                json!({"agent": "remote", "prompt": format!("hold {round}"), "policy": policy});
            tasks.push(create(node, body).await);
        }
    }
    let mut done = 0;
    while done < tasks.len() {
        let started = until_started(&cluster, &pool, &tasks, done + 1).await;
        for task in &started {
            let go = file(a, task, 1, "go");
            if !go.exists() {
                std::fs::write(go, "").unwrap();
                done += 1;
            }
        }
    }
    for (task, node) in tasks.iter().zip([a, b].into_iter().cycle()) {
        let view = finished(node, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        assert_eq!(
            view["result"]["value"],
            json!({"pool": "pool-lb", "attempt": 1})
        );
    }
    // Neither node's own URL was used, and both nodes forwarded what
    // landed on the other's queue.
    assert!(
        !pool.log().contains(&a.base) && !pool.log().contains(&b.base),
        "{}",
        pool.log()
    );
    assert!(forwarded(a).await > 0 && forwarded(b).await > 0);
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

/// Runs a task on node A that `pool` holds, kills A with -9, and checks
/// that B takes it over and its retry reaches the same pool and passes,
/// and that the first attempt's child, whose node is gone, is stopped
/// once its lease ran out unrenewed.
async fn retried_on_b_after_a_dies(cluster: &mut Cluster, pool: &Pool, name: &str) {
    let policy = json!({"max_attempts": 2, "attempt_timeout_secs": 3});
    let task = create(
        &cluster.nodes[0],
        json!({"agent": "remote", "prompt": "hold", "policy": policy}),
    )
    .await;
    let first = read_pid(&file(&cluster.nodes[0], &task, 1, "pid")).await;

    cluster.nodes[0].kill9().await;
    // Node B takes the task over and queues its retry; the pool claims it
    // from B (through a balancer, its claims naming A fail until A is
    // known dead).
    let second = read_pid(&file(&cluster.nodes[0], &task, 2, "pid")).await;
    assert!(!process_gone(second));
    std::fs::write(file(&cluster.nodes[0], &task, 2, "go"), "").unwrap();
    let view = finished(&cluster.nodes[1], &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"], json!({"pool": name, "attempt": 2}));
    eventually("the dead node's child is stopped", || process_gone(first)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_remote_attempt_is_retried_through_the_survivor_on_the_same_pool() {
    let mut cluster = Cluster::start(2, REMOTE).await;
    let pool = pool_of_both(&cluster, "pool-ab", 2).await;
    connected(&cluster, &pool).await;
    retried_on_b_after_a_dies(&mut cluster, &pool, "pool-ab").await;
    assert!(
        pool.log()
            .contains("lease ran out with no heartbeat answered"),
        "{}",
        pool.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_load_balancer_a_dead_nodes_retry_reaches_the_same_pool() {
    let mut cluster = Cluster::start(2, REMOTE).await;
    let bases = vec![cluster.nodes[0].base.clone(), cluster.nodes[1].base.clone()];
    let balancer = round_robin(bases).await;
    let token = mint(&cluster.nodes[0], &["remote"]);
    let setup = Setup {
        server: Some(&balancer),
        args: vec!["--through-server".to_owned()],
        ..Setup::default()
    };
    let pool = Pool::start_with(&cluster.nodes[0], &token, "remote", "pool-lb", 2, setup).await;
    connected(&cluster, &pool).await;
    retried_on_b_after_a_dies(&mut cluster, &pool, "pool-lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_both_nodes_given_a_dead_ones_link_moves_to_the_other() {
    let mut cluster = Cluster::start(2, REMOTE).await;
    let token = mint(&cluster.nodes[0], &["remote"]);
    // Both nodes given, each reached through the first that names it (A).
    let setup = Setup {
        args: vec![
            "--through-server".to_owned(),
            "--server".to_owned(),
            cluster.nodes[1].base.clone(),
        ],
        ..Setup::default()
    };
    let pool = Pool::start_with(&cluster.nodes[0], &token, "remote", "pool-t", 1, setup).await;
    connected(&cluster, &pool).await;
    cluster.nodes[0].kill9().await;
    // B's claims went through A; once A cannot be reached they go
    // through B, which was given too.
    let task = create(
        &cluster.nodes[1],
        json!({"agent": "remote", "prompt": "quick"}),
    )
    .await;
    let view = finished(&cluster.nodes[1], &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["pool"], "pool-t");
    assert!(
        pool.log()
            .contains("reaching the node through the next daemon given"),
        "{}",
        pool.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_left_for_a_dead_node_frees_the_pools_slot_for_the_survivors_retry() {
    let mut cluster = Cluster::start(2, REMOTE).await;
    // One slot; the attempt's lease (its timeout) far past the test.
    let pool = pool_of_both(&cluster, "pool-ab", 1).await;
    connected(&cluster, &pool).await;
    let policy = json!({"max_attempts": 2, "attempt_timeout_secs": 600});
    let body = json!({"agent": "remote", "prompt": "hold", "policy": policy});
    let task = create(&cluster.nodes[1], body).await;
    let a = &cluster.nodes[0];
    read_pid(&file(a, &task, 1, "pid")).await;

    // Node B dies with the attempt claimed; its child ends at once, and
    // its Final can go nowhere: B is gone, and A answers for B's task only
    // once it took it over, when the attempt is over.
    cluster.nodes[1].kill9().await;
    let killed = Instant::now();
    let a = &cluster.nodes[0];
    std::fs::write(file(a, &task, 1, "go"), "").unwrap();
    // A takes the task over within two node leases and queues its retry,
    // which the pool runs in the slot the first attempt's child left.
    let second = read_pid(&file(a, &task, 2, "pid")).await;
    let waited = killed.elapsed();
    assert!(
        waited < 2 * super::LEASE + Duration::from_secs(6),
        "the retry started {waited:?} after the kill\n{}",
        pool.log()
    );
    assert!(!process_gone(second));
    std::fs::write(file(a, &task, 2, "go"), "").unwrap();
    let view = finished(a, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(
        view["result"]["value"],
        json!({"pool": "pool-ab", "attempt": 2})
    );
    assert!(
        pool.log()
            .contains("still posting after the child exited: its slot is free"),
        "{}",
        pool.log()
    );
}
