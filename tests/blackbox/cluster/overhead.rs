//! What forwarding costs (docs/benchmarks.md, Cluster forwarding): one
//! worker's `POST /v1/worker/output`, one at a time, sent to the node that
//! holds its task and to the other node, which forwards it; the p50 and
//! p99 of each. Ignored by default; run with
//! `cargo test -p swarmd-server --test blackbox cluster::overhead -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Cluster, create};
use crate::daemon::Swarmd;
use crate::harness::PATIENCE;

/// Posts per path, after as many to warm up.
const POSTS: usize = 2000;

/// Leaves its handle in the shared directory and runs a minute.
const HOLDER: &str = r#"
[agents.holder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf '%s' "$SWARM_WORKER_HANDLE" > @DIR@/handle.tmp && mv @DIR@/handle.tmp @DIR@/handle
sleep 60
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name with --ignored --nocapture"]
async fn forwarding_overhead_of_a_worker_output_post() {
    let cluster = Cluster::start(2, HOLDER).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    create(a, json!({"agent": "holder", "prompt": "p"})).await;
    let handle_file = cluster.shared().join("handle");
    let started = Instant::now();
    while !handle_file.exists() {
        assert!(started.elapsed() < PATIENCE, "the attempt did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let handle = std::fs::read_to_string(&handle_file).unwrap();
    let direct = latencies(a, &handle).await;
    let forwarded = latencies(b, &handle).await;
    for (name, mut samples) in [("direct", direct), ("via the other node", forwarded)] {
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
        println!(
            "{name}: p50 {:?} p99 {:?} ({POSTS} posts)",
            at(0.50),
            at(0.99)
        );
    }
}

/// `POSTS` timed output posts to `node` after as many untimed ones.
async fn latencies(node: &Swarmd, handle: &str) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(POSTS);
    for n in 0..2 * POSTS {
        let sent = Instant::now();
        let response = node
            .post("/v1/worker/output", handle)
            .json(&json!({"type": "progress", "stage": "bench"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        if n >= POSTS {
            samples.push(sent.elapsed());
        }
    }
    samples
}
