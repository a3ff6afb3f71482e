//! Two nodes each run tasks; each node's log (`/v1/events`) and live feed
//! (SSE) hold both nodes' events, in one gapless order.

use std::collections::BTreeSet;

use futures_util::StreamExt;
use serde_json::json;
use swarmd_client::SseParser;

use super::{Cluster, QUICK, create, events_after, seqs};
use crate::harness::PATIENCE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_nodes_serve_one_gapless_log_of_every_nodes_events() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);

    // Node A's live feed, opened before node B does anything.
    let response = a
        .get("/v1/events", &a.admin)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut feed = response.bytes_stream();

    let mut on_a = Vec::new();
    let mut on_b = Vec::new();
    for round in 0..4 {
        on_a.push(create(a, json!({"agent": "quick", "prompt": format!("a{round}")})).await);
        on_b.push(create(b, json!({"agent": "quick", "prompt": format!("b{round}")})).await);
    }
    for task in &on_a {
        assert_eq!(a.finished(task).await["status"], "pass");
        assert_eq!(cluster.owner(task).await, cluster.node_id(0));
    }
    for task in &on_b {
        assert_eq!(b.finished(task).await["status"], "pass");
        assert_eq!(cluster.owner(task).await, cluster.node_id(1));
    }

    // Both nodes serve the same log: seqs from 1 without a gap, every
    // task's creation and end in it, whichever node ran it.
    let log_a = events_after(a, 0).await;
    let log_b = events_after(b, 0).await;
    assert_eq!(log_a, log_b);
    let all = seqs(&log_a);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    for task in on_a.iter().chain(&on_b) {
        let kinds: Vec<&str> = log_a
            .iter()
            .filter(|e| e["event"]["task_id"] == task.as_str())
            .map(|e| e["event"]["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"task_created"), "{task}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"task_finished"), "{task}: {kinds:?}");
    }

    // A resume from any seq replays exactly the rest.
    let middle = all[all.len() / 2];
    assert_eq!(events_after(b, middle).await, log_a[middle as usize..]);

    // Node A's live feed carried node B's events too, in seq order, without
    // a gap, up to the end of the log.
    let last = *all.last().unwrap();
    let live = ids_through(&mut feed, last).await;
    let first = live[0];
    assert_eq!(live, (first..=last).collect::<Vec<_>>());
    let b_tasks: BTreeSet<&str> = on_b.iter().map(String::as_str).collect();
    let seen_from_b = log_a
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() >= first)
        .filter(|e| {
            e["event"]["task_id"]
                .as_str()
                .is_some_and(|t| b_tasks.contains(t))
        })
        .count();
    assert!(seen_from_b > 0, "node A's feed saw none of node B's events");
}

/// While nothing on node A follows the log, A's pump steps past node B's
/// events by seq, reading only the kinds A acts on; a wait on A for B's
/// task still ends, and a feed opened on A while B keeps working gets
/// every event from its first on, B's included, without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_opened_while_another_node_works_misses_nothing() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);

    // Nothing follows A's log: A learns B's task ended from the log.
    let early = create(b, json!({"agent": "quick", "prompt": "early"})).await;
    assert_eq!(a.finished(&early).await["status"], "pass");
    assert_eq!(cluster.owner(&early).await, cluster.node_id(1));

    // B keeps working while A's feed opens.
    let work = async {
        let mut tasks = Vec::new();
        for round in 0..12 {
            let task = create(b, json!({"agent": "quick", "prompt": format!("b{round}")})).await;
            assert_eq!(b.finished(&task).await["status"], "pass");
            tasks.push(task);
        }
        tasks
    };
    let open = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        a.get("/v1/events", &a.admin)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    };
    let (on_b, response) = tokio::join!(work, open);
    assert_eq!(response.status(), 200);
    let mut feed = response.bytes_stream();
    // A task of A's own after B's, so the log's end is known to both.
    let own = create(a, json!({"agent": "quick", "prompt": "a"})).await;
    assert_eq!(a.finished(&own).await["status"], "pass");

    let log = events_after(a, 0).await;
    let last = *seqs(&log).last().unwrap();
    let live = ids_through(&mut feed, last).await;
    let first = live[0];
    assert_eq!(live, (first..=last).collect::<Vec<_>>());
    // The feed carried B's last task from its creation to its end.
    let newest = on_b.last().unwrap();
    let of_newest = log
        .iter()
        .filter(|e| e["event"]["task_id"] == newest.as_str())
        .map(|e| e["seq"].as_u64().unwrap());
    for seq in of_newest {
        assert!(live.contains(&seq) || seq < first, "seq {seq} missing");
    }
}

/// The event ids node A's SSE feed sends, up to and with `last`.
async fn ids_through(
    feed: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    last: u64,
) -> Vec<u64> {
    let mut parser = SseParser::default();
    let mut live = Vec::new();
    while live.last() != Some(&last) {
        let chunk = tokio::time::timeout(PATIENCE, feed.next())
            .await
            .expect("node A's feed stalled")
            .expect("node A's feed ended")
            .unwrap();
        for event in parser.push(&chunk) {
            if let Some(id) = event.id.and_then(|id| id.parse::<u64>().ok()) {
                live.push(id);
            }
        }
    }
    live
}
