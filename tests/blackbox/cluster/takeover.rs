//! A node killed with SIGKILL while its tasks run: a survivor owns them
//! within two node leases, retries the interrupted attempts, and every
//! acknowledged task ends with its result and outputs; no attempt is
//! started twice, attempt numbers run from 1 without a gap. A node that
//! stops (SIGTERM) with tasks it did not finish hands them on the same
//! way, and the survivor's log says the node stopped, not that it died.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Cluster, LEASE, QUICK, create, events_after, finished, uuid_list};

/// Sleeps through its first attempt (long enough to be killed), passes on
/// the next.
const SLOW_ONCE: &str = r#"
[agents.slow_once]
kind = "process"
program = "/bin/sh"
args = ["-c", """
if [ "$SWARM_ATTEMPT" = 1 ]; then /bin/sleep 30; fi
printf '{"type":"progress","stage":"retried"}\n'
printf '{"type":"final","content":{"kind":"inline","value":"second try"},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_taken_over_within_two_leases_and_loses_nothing() {
    let mut cluster = Cluster::start(2, &format!("{QUICK}{SLOW_ONCE}")).await;
    let dead = cluster.node_id(0);
    let survivor = cluster.node_id(1);

    // Node A runs slow attempts (in flight at the kill) and has finished
    // quick ones; node B runs its own.
    let policy = json!({"max_attempts": 3});
    let mut slow = Vec::new();
    let mut quick = Vec::new();
    for n in 0..6 {
        let a = &cluster.nodes[0];
        slow.push(
            create(
                a,
                json!({"agent": "slow_once", "prompt": format!("s{n}"), "policy": policy}),
            )
            .await,
        );
        quick.push(create(a, json!({"agent": "quick", "prompt": format!("q{n}")})).await);
    }
    let mine = create(&cluster.nodes[1], json!({"agent": "quick", "prompt": "b"})).await;
    for task in &quick {
        assert_eq!(cluster.nodes[0].finished(task).await["status"], "pass");
    }
    // Every slow task's first attempt has started on node A.
    let started = std::time::Instant::now();
    loop {
        let running = cluster
            .db
            .query_i32(&format!(
                "SELECT count(*)::int FROM attempts WHERE attempt = 1 AND task IN ({})",
                uuid_list(&slow)
            ))
            .await;
        if running == [slow.len() as i32] {
            break;
        }
        assert!(started.elapsed() < crate::harness::PATIENCE, "{running:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    cluster.nodes[0].kill9().await;
    let took = cluster.until_none_owned_by(&dead).await;
    assert!(
        took <= 2 * LEASE,
        "the survivor took {took:?} to own the dead node's tasks (lease {LEASE:?})\n{}",
        cluster.nodes[1].log()
    );
    for task in &slow {
        assert_eq!(cluster.owner(task).await, survivor);
    }

    // The survivor finishes everything: the interrupted attempts are
    // retried per policy, the finished tasks kept their results.
    let b = &cluster.nodes[1];
    for task in &slow {
        let view = finished(b, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", b.log());
        assert_eq!(view["result"]["value"], "second try", "{view}");
        assert_eq!(view["attempt"], 2, "{view}");
        let kinds: Vec<String> = b
            .output(task)
            .await
            .iter()
            .map(|r| r["event"]["type"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(kinds, ["progress", "final"], "{task}");
    }
    for task in quick.iter().chain([&mine]) {
        let view = finished(b, task).await;
        assert_eq!(view["status"], "pass", "{view}");
        assert_eq!(view["result"]["value"], "quick", "{view}");
        assert_eq!(view["attempt"], 1, "{view}");
    }

    // The log: every attempt started once, numbered from 1 without a gap;
    // the first attempts of the slow tasks failed as interrupted; every
    // task finished once.
    let log = events_after(b, 0).await;
    let mut started: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut finished: BTreeMap<String, usize> = BTreeMap::new();
    for event in &log {
        let e = &event["event"];
        let task = e["task_id"].as_str().unwrap_or_default().to_owned();
        match e["kind"].as_str().unwrap() {
            "attempt_started" => started
                .entry(task)
                .or_default()
                .push(e["attempt"].as_u64().unwrap()),
            "task_finished" => *finished.entry(task).or_default() += 1,
            "attempt_finished" if slow.contains(&task) && e["attempt"] == 1 => {
                assert_eq!(e["reason"], "interrupted", "{e}");
            }
            _ => {}
        }
    }
    for task in &slow {
        assert_eq!(started[task], [1, 2], "{task}");
    }
    for task in quick.iter().chain([&mine]) {
        assert_eq!(started[task], [1], "{task}");
    }
    for task in slow.iter().chain(&quick).chain([&mine]) {
        assert_eq!(finished.get(task), Some(&1), "{task}");
    }
    let stored = cluster
        .db
        .query_i32(&format!(
            "SELECT count(*)::int FROM attempts WHERE task IN ({})",
            uuid_list(&slow)
        ))
        .await;
    assert_eq!(stored, [2 * slow.len() as i32]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_hands_its_unfinished_tasks_on_and_is_not_called_dead() {
    let mut cluster = Cluster::start(2, &format!("{QUICK}{SLOW_ONCE}")).await;
    let stopped = cluster.node_id(0);
    let policy = json!({"max_attempts": 3});
    let mut slow = Vec::new();
    for n in 0..2 {
        let body = json!({"agent": "slow_once", "prompt": format!("s{n}"), "policy": policy});
        slow.push(create(&cluster.nodes[0], body).await);
    }
    let started = std::time::Instant::now();
    while cluster
        .db
        .query_i32(&format!(
            "SELECT count(*)::int FROM attempts WHERE attempt = 1 AND task IN ({})",
            uuid_list(&slow)
        ))
        .await
        != [slow.len() as i32]
    {
        assert!(started.elapsed() < crate::harness::PATIENCE);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Either node lists both live nodes, itself marked by its id.
    let b = &cluster.nodes[1];
    let (status, body) =
        crate::harness::parts(b.get("/v1/status", &b.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cluster"]["node_id"], cluster.node_id(1), "{body}");
    let mut ids: Vec<&str> = body["cluster"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut both = [cluster.node_id(0), cluster.node_id(1)];
    both.sort_unstable();
    assert_eq!(ids, both, "{body}");

    // Its attempts outlive the shutdown grace: it stops with them unfinished,
    // and says a peer takes them over.
    cluster.nodes[0].sigterm();
    assert!(cluster.nodes[0].exited().await.success());
    let said = cluster.nodes[0].log();
    assert!(
        said.contains("stopped: 2 unfinished tasks are taken over by another node of the cluster"),
        "{said}"
    );
    cluster.until_none_owned_by(&stopped).await;
    let b = &cluster.nodes[1];
    for task in &slow {
        let view = finished(b, task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", b.log());
        assert_eq!(view["attempt"], 2, "{view}");
    }
    let log = b.log();
    assert!(
        log.lines().any(
            |l| l.contains("took over the unfinished tasks of a node that stopped")
                && l.contains(&stopped)
        ),
        "{log}"
    );
    assert!(!log.contains("of a dead node"), "{log}");
}
