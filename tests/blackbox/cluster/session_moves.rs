//! A MainAI's session moving between nodes: reconnecting to node B moves
//! it there, B delivers what A had parked and A's socket closes with 4000;
//! replies sent on B after the move reach the nodes that wait for them;
//! a `task_done` parked on a node that died reaches the session on
//! another, routed again from the log from the watermark the dead node
//! stored, even once the other node's copy of the session has routed past
//! it; a reconnect to B and straight back to A keeps A's new socket open.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::sessions::{
    delegated, frames_until, home, of_type, post_result, task_ids, until_mailbox_empty,
};
use super::{Cluster, QUICK};
use crate::daemon::Incoming;
use crate::harness::{PATIENCE, parts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reconnecting_to_another_node_resumes_where_it_left_off() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;

    // With no socket, node A parks the spawns of the tasks it dispatches.
    let parked = [
        delegated(a, &main_ai, "one").await,
        delegated(a, &main_ai, "two").await,
    ];
    let started = Instant::now();
    loop {
        let (_, summary) = parts(
            a.get(&format!("/v1/operators/{}", main_ai.sid), &a.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        if summary["parked"] == 2 {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "{summary}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Connecting to node B moves the session there; B delivers them.
    let mut ws_b = b.connect(&main_ai).await;
    let frames = frames_until(&mut ws_b, |f| of_type(f, "spawn").len() == 2).await;
    let spawns = of_type(&frames, "spawn");
    assert_eq!(task_ids(&spawns), parked.iter().cloned().collect());
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(1));

    // The MainAI answers one on node B, which completes it on node A (its
    // owner); the other's SubAgent posts to node A.
    let (acked, posted) = if spawns[0]["task_id"] == parked[0].as_str() {
        (spawns[0], spawns[1])
    } else {
        (spawns[1], spawns[0])
    };
    ws_b.send(json!({"type": "spawn_ack", "req_id": acked["req_id"],
                     "value": "acked on B", "ok": true}))
        .await;
    post_result(a, posted, json!("posted to A")).await;
    let frames = frames_until(&mut ws_b, |f| of_type(f, "task_done").len() == 2).await;
    assert_eq!(
        task_ids(&of_type(&frames, "task_done")),
        parked.iter().cloned().collect()
    );
    assert_eq!(
        super::finished(a, &parked[0]).await["result"]["value"],
        "acked on B"
    );
    assert_eq!(
        super::finished(a, &parked[1]).await["result"]["value"],
        "posted to A"
    );

    // A task node A dispatches now goes to the session on node B.
    let later = delegated(a, &main_ai, "three").await;
    let spawn = ws_b.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], later.as_str());
    post_result(a, &spawn, json!("three")).await;
    assert_eq!(ws_b.done(&later).await["status"], "pass");

    // Connecting to node A again moves it back: B's socket closes with 4000.
    let _ws_a = a.connect(&main_ai).await;
    let started = Instant::now();
    loop {
        match ws_b.next_within(PATIENCE).await {
            Incoming::Closed(Some(close)) => {
                assert_eq!(u16::from(close.code), 4000, "{close:?}");
                break;
            }
            Incoming::Frame(_) => {}
            other => panic!("node B's socket did not close with 4000: {other:?}"),
        }
        assert!(started.elapsed() < PATIENCE);
    }
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));
    until_mailbox_empty(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_done_parked_on_a_node_that_died_reaches_the_session_on_another() {
    let mut cluster = Cluster::start(2, QUICK).await;
    let main_ai = cluster.nodes[0].login(json!({"roles": ["main-ai"]})).await;

    // With no socket, node A parks the task_done of a task of the session.
    let task = cluster.nodes[0]
        .create_as(&main_ai.token, json!({"agent": "quick", "prompt": "p"}))
        .await;
    assert_eq!(
        super::finished(&cluster.nodes[0], &task).await["status"],
        "pass"
    );
    let started = Instant::now();
    loop {
        let (_, summary) = parts(
            cluster.nodes[0]
                .get(&format!("/v1/operators/{}", main_ai.sid), &main_ai.token)
                .send()
                .await
                .unwrap(),
        )
        .await;
        if summary["parked"] == 1 {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "{summary}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Node A dies with it in memory; the session connects to node B,
    // which routes its events after its watermark again.
    cluster.nodes[0].kill9().await;
    let mut ws = cluster.nodes[1].connect(&main_ai).await;
    let done = ws.done(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_sent_after_a_move_reaches_the_node_that_waits_for_it() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;

    // Node A delivers the spawns of its own attempt and of one node B
    // relayed; the MainAI has not answered either when it moves to B.
    let mut ws_a = a.connect(&main_ai).await;
    let on_a = delegated(a, &main_ai, "mine").await;
    let on_b = delegated(b, &main_ai, "relayed").await;
    let frames = frames_until(&mut ws_a, |f| of_type(f, "spawn").len() == 2).await;
    let spawns: HashMap<String, Value> = of_type(&frames, "spawn")
        .into_iter()
        .map(|f| (f["task_id"].as_str().unwrap().to_owned(), f.clone()))
        .collect();
    let mut ws_b = b.connect(&main_ai).await;
    assert!(matches!(
        ws_a.next_within(PATIENCE).await,
        Incoming::Closed(Some(_))
    ));

    // Its replies on node B reach both waiting nodes.
    for (task, value) in [(&on_a, "from B for A"), (&on_b, "from B for B")] {
        ws_b.send(
            json!({"type": "spawn_ack", "req_id": spawns[task]["req_id"],
                         "value": value, "ok": true}),
        )
        .await;
    }
    let a_view = super::finished(a, &on_a).await;
    assert_eq!(a_view["result"]["value"], "from B for A", "{a_view}");
    let b_view = super::finished(b, &on_b).await;
    assert_eq!(b_view["result"]["value"], "from B for B", "{b_view}");
    let frames = frames_until(&mut ws_b, |f| of_type(f, "task_done").len() >= 2).await;
    assert_eq!(
        task_ids(&of_type(&frames, "task_done")),
        [on_a.clone(), on_b.clone()].into_iter().collect()
    );
    until_mailbox_empty(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_back_on_its_first_node_at_once_keeps_its_new_socket() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    for round in 0..5 {
        let main_ai = a
            .login(json!({"roles": [format!("main-ai-{round}")]}))
            .await;
        let ws_a = a.connect(&main_ai).await;
        // To node B and straight back to A, well within the mail pump's
        // 250 ms: B's word to A that the session moved to B is still on
        // its way when A takes it back.
        let ws_b = b.connect(&main_ai).await;
        drop(ws_a);
        let mut back = a.connect(&main_ai).await;
        drop(ws_b);
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            match back.next_within(Duration::from_millis(100)).await {
                Incoming::Nothing | Incoming::Frame(_) => {}
                closed => panic!("round {round}: A's new socket closed: {closed:?}"),
            }
        }
        assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));
        // Node A serves it: a task it dispatches reaches this socket.
        let task = delegated(a, &main_ai, "back").await;
        let spawn = back.recv_type("spawn").await;
        assert_eq!(spawn["task_id"], task.as_str());
    }
}

/// How long node B takes to move the `task_done` watermarks it keeps at
/// least twice (`sessions::delivery`, a one-second checkpoint). No request
/// shows a node's watermarks, so the test waits that long.
const TWO_CHECKPOINTS: Duration = Duration::from_millis(2500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_done_lost_with_its_home_is_routed_again_from_the_watermark_the_home_stored() {
    let mut cluster = Cluster::start(2, QUICK).await;
    let main_ai = cluster.nodes[0].login(json!({"roles": ["main-ai"]})).await;
    // Node B holds a copy of the session (found by its token).
    let (status, seen) = parts(
        cluster.nodes[1]
            .get(&format!("/v1/operators/{}", main_ai.sid), &main_ai.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{seen}");

    // With no socket, node A parks the task_done of a task of the session.
    let task = cluster.nodes[0]
        .create_as(&main_ai.token, json!({"agent": "quick", "prompt": "p"}))
        .await;
    assert_eq!(
        super::finished(&cluster.nodes[0], &task).await["status"],
        "pass"
    );
    // Node B has the task's `task_finished` in its log and routes past it
    // (to nobody: the session is homed on A), then checkpoints twice.
    let started = Instant::now();
    while !super::events_after(&cluster.nodes[1], 0)
        .await
        .iter()
        .any(|e| e["event"]["kind"] == "task_finished" && e["event"]["task_id"] == task.as_str())
    {
        assert!(
            started.elapsed() < PATIENCE,
            "node B never saw the task end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(TWO_CHECKPOINTS).await;

    // Node A dies with the frame in memory. The session moves to node B,
    // which must route its events again from the watermark A stored, not
    // from where B's own copy had got to.
    cluster.nodes[0].kill9().await;
    let mut ws = cluster.nodes[1].connect(&main_ai).await;
    let done = ws.done(&task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(1));
}

/// A plain GET of the socket's route on node B (no upgrade: a probe or a
/// mistaken client) answers 400 and leaves the session where its socket
/// lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_without_an_upgrade_does_not_move_the_session() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = a.connect(&main_ai).await;
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));

    let path = format!("/v1/operators/{}/ws", main_ai.sid);
    let (status, body) = parts(b.get(&path, &main_ai.token).send().await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));

    // A's socket still carries the session: a spawn A dispatches reaches it.
    let task = delegated(a, &main_ai, "still here").await;
    let frames = frames_until(&mut ws, |f| of_type(f, "spawn").len() == 1).await;
    assert_eq!(of_type(&frames, "spawn")[0]["task_id"], task.as_str());
}
