//! A MainAI's session across nodes: its role name is taken on every node;
//! connected to node A, it is sent the `spawn`, `cancel`, `hook_before`
//! and `hook_after` frames of attempts node B runs, in the order B sent
//! them, its replies on A decide B's attempts, and every `task_done`
//! reaches it. Delivered mail leaves the mailbox. Only its home expires
//! it; a delete on another node ends it on its home. Moves are in
//! `session_moves`.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Cluster, QUICK};
use crate::daemon::{Incoming, Login, Swarmd, Ws};
use crate::harness::{PATIENCE, parts};

/// A delegated task of `agent quick` owned by `login`, created on `node`.
pub(super) async fn delegated(node: &Swarmd, login: &Login, prompt: &str) -> String {
    node.create_as(
        &login.token,
        json!({"agent": "quick", "prompt": prompt, "layers": ["operator_delegate"]}),
    )
    .await
}

/// The SubAgent's result, posted with its handle to `node`.
pub(super) async fn post_result(node: &Swarmd, spawn: &Value, value: Value) {
    let task = spawn["task_id"].as_str().unwrap();
    let handle = spawn["worker_handle"].as_str().unwrap();
    let (status, body) = parts(
        node.http
            .post(node.url(&format!("/v1/worker/result?task_id={task}")))
            .bearer_auth(handle)
            .json(&json!({"value": value, "ok": true}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// Frames until `enough` holds of all of them; all of them, in order.
pub(super) async fn frames_until(ws: &mut Ws, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut frames = Vec::new();
    while !enough(&frames) {
        frames.push(ws.recv().await);
    }
    frames
}

pub(super) fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

pub(super) fn task_ids(frames: &[&Value]) -> BTreeSet<String> {
    frames
        .iter()
        .map(|f| f["task_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until the mailbox is empty: everything delivered was deleted.
pub(super) async fn until_mailbox_empty(cluster: &Cluster) {
    let started = Instant::now();
    loop {
        let left = cluster
            .db
            .query_i32("SELECT count(*)::int FROM session_mail")
            .await;
        if left == [0] {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "{left:?} mail rows left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node a session is homed on, as the database says.
pub(super) async fn home(cluster: &Cluster, login: &Login) -> String {
    let sid = login.sid.trim_start_matches("S-");
    cluster
        .db
        .query_text(&format!(
            "SELECT home_node::text FROM sessions WHERE sid = '{sid}'"
        ))
        .await
        .pop()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_ai_on_node_a_gets_the_spawn_frames_of_attempts_node_b_dispatched() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = a.connect(&main_ai).await;

    // Its role name is taken on node B too.
    let (status, refused) = parts(
        b.post("/v1/operators", &b.admin)
            .json(&json!({"roles": ["main-ai"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "role_taken");

    // Node B knows the session by its token and its sid.
    let (status, seen) = parts(
        b.get(&format!("/v1/operators/{}", main_ai.sid), &main_ai.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["sid"], main_ai.sid.as_str());

    // Three delegated tasks made on node B, which owns and dispatches them.
    let mut tasks = Vec::new();
    for n in 0..3 {
        tasks.push(delegated(b, &main_ai, &format!("p{n}")).await);
    }
    for task in &tasks {
        assert_eq!(cluster.owner(task).await, cluster.node_id(1));
    }

    // Their spawn frames reach the socket on node A.
    let frames = frames_until(&mut ws, |f| of_type(f, "spawn").len() == 3).await;
    let spawns: HashMap<String, Value> = of_type(&frames, "spawn")
        .into_iter()
        .map(|f| (f["task_id"].as_str().unwrap().to_owned(), f.clone()))
        .collect();
    assert_eq!(
        spawns.keys().cloned().collect::<BTreeSet<_>>(),
        tasks.iter().cloned().collect::<BTreeSet<_>>()
    );

    // The first SubAgent posts its result to node B; the second is
    // answered by the MainAI's spawn_ack on node A; the third is
    // cancelled on node B, and its cancel frame reaches node A.
    post_result(b, &spawns[&tasks[0]], json!("posted")).await;
    ws.send(
        json!({"type": "spawn_ack", "req_id": spawns[&tasks[1]]["req_id"],
                   "value": {"acked": 1}, "ok": true}),
    )
    .await;
    let (status, body) = parts(
        b.post(&format!("/v1/tasks/{}/cancel", tasks[2]), &b.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(status < 300, "{status} {body}");

    let frames = frames_until(&mut ws, |f| {
        of_type(f, "task_done").len() == 3 && !of_type(f, "cancel").is_empty()
    })
    .await;
    let cancel = of_type(&frames, "cancel")[0];
    assert_eq!(cancel["req_id"], spawns[&tasks[2]]["req_id"], "{cancel}");
    assert_eq!(
        task_ids(&of_type(&frames, "task_done")),
        tasks.iter().cloned().collect()
    );
    let first = super::finished(b, &tasks[0]).await;
    assert_eq!(
        (&first["status"], &first["result"]["value"]),
        (&json!("pass"), &json!("posted"))
    );
    let second = super::finished(b, &tasks[1]).await;
    assert_eq!(
        (&second["status"], &second["result"]["value"]),
        (&json!("pass"), &json!({"acked": 1})),
        "{second}"
    );
    assert_eq!(super::finished(b, &tasks[2]).await["status"], "cancelled");

    // Delivered mail leaves the mailbox; the session stayed homed on A.
    until_mailbox_empty(&cluster).await;
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_home_node_expires_a_session_and_a_delete_anywhere_ends_it() {
    let cluster = Cluster::start_with_auth(2, "session_idle_secs = 60", QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = a.connect(&main_ai).await;
    // A session with no socket, homed on node A, used only on node B.
    let busy = a.login(json!({"roles": ["busy"]})).await;
    let status = |node: &'static str, login: &Login| {
        let node = if node == "a" { a } else { b };
        let request = node.get(&format!("/v1/operators/{}", login.sid), &login.token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let on_b = |bearer: &str| {
        let request = b.get(&format!("/v1/operators/{}", main_ai.sid), bearer);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(on_b(&main_ai.token).await, 200, "node B finds it");

    // Past the idle time (and node B's sweep at a quarter of it), the
    // session, whose socket is on node A, is still alive on both nodes.
    // Reading the socket all along answers the server's pings. The other
    // one, active on node B all along, is kept alive by its home too.
    let until = Instant::now() + Duration::from_secs(80);
    while Instant::now() < until {
        match ws.next_within(Duration::from_secs(1)).await {
            Incoming::Nothing | Incoming::Frame(_) => {}
            closed => panic!("node A's socket closed: {closed:?}"),
        }
        assert_eq!(status("b", &busy).await, 200, "used on node B");
    }
    assert_eq!(on_b(&main_ai.token).await, 200, "node B did not expire it");
    assert_eq!(home(&cluster, &main_ai).await, cluster.node_id(0));
    assert_eq!(
        status("a", &busy).await,
        200,
        "its home heard of its activity on node B"
    );
    assert_eq!(home(&cluster, &busy).await, cluster.node_id(0));

    // Deleted on node B, it ends on node A, its home: the socket closes
    // with 4001 and the record is gone.
    let status = b
        .http
        .delete(b.url(&format!("/v1/operators/{}", main_ai.sid)))
        .bearer_auth(&main_ai.token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    match ws.next_within(PATIENCE).await {
        Incoming::Closed(Some(close)) => assert_eq!(u16::from(close.code), 4001, "{close:?}"),
        other => panic!("node A's socket did not close with 4001: {other:?}"),
    }
    let started = Instant::now();
    while !home(&cluster, &main_ai).await.is_empty() {
        assert!(started.elapsed() < PATIENCE, "the record is still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(on_b(&main_ai.token).await, 401);
    assert_eq!(on_b(&a.admin).await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_from_another_node_arrive_in_the_order_it_sent_them() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"roles": ["main-ai"]})).await;

    // With no socket on node A, node B's spawns wait in the mailbox (their
    // rows stay until a socket takes them).
    let mut tasks = Vec::new();
    for n in 0..4 {
        tasks.push(delegated(b, &main_ai, &format!("p{n}")).await);
    }
    let started = Instant::now();
    loop {
        let spawns = cluster
            .db
            .query_i32("SELECT count(*)::int FROM session_mail WHERE kind = 'spawn'")
            .await;
        if spawns == [4] {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "{spawns:?} spawns relayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Cancelled on node B, each cancel follows its spawn: node A withdraws
    // the parked spawn, and the socket gets the cancels and no spawn (a
    // cancel read before its spawn would leave the spawn to go out).
    for task in &tasks {
        let status = b
            .post(&format!("/v1/tasks/{task}/cancel"), &b.admin)
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "{status}");
        assert_eq!(super::finished(b, task).await["status"], "cancelled");
    }
    until_mailbox_empty(&cluster).await;
    let mut ws = a.connect(&main_ai).await;
    let frames = frames_until(&mut ws, |f| of_type(f, "task_done").len() == tasks.len()).await;
    let mut frames = frames;
    while let Incoming::Frame(frame) = ws.next_within(Duration::from_millis(500)).await {
        frames.push(frame);
    }
    assert_eq!(of_type(&frames, "cancel").len(), tasks.len(), "{frames:#?}");
    assert!(of_type(&frames, "spawn").is_empty(), "{frames:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_of_attempts_another_node_runs_reach_the_main_ai_and_its_answer_decides() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let main_ai = a.login(json!({"kind": "main_ai"})).await;
    let mut ws = a.connect(&main_ai).await;
    let hooked = |prompt: &str| json!({"agent": "quick", "prompt": prompt, "layers": ["main_ai"]});

    // Refused on node A, node B's attempt fails with the reason.
    let refused = b.create_as(&main_ai.token, hooked("no")).await;
    let hook = ws.recv_type("hook_before").await;
    assert_eq!(hook["task_id"], refused.as_str());
    ws.send(
        json!({"type": "hook_ack", "req_id": hook["req_id"], "ok": false,
                   "reason": "not on a Friday"}),
    )
    .await;
    let view = super::finished(b, &refused).await;
    assert_eq!(view["status"], "failed", "{view}");
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not on a Friday"), "{view}");

    // Approved, node B runs it, and its hook_after reaches node A.
    let approved = b.create_as(&main_ai.token, hooked("yes")).await;
    let hook = ws.recv_type("hook_before").await;
    assert_eq!(hook["task_id"], approved.as_str());
    ws.send(json!({"type": "hook_ack", "req_id": hook["req_id"], "ok": true}))
        .await;
    let frames = frames_until(&mut ws, |f| {
        f.iter()
            .any(|f| f["type"] == "hook_after" && f["task_id"] == approved.as_str())
            && f.iter()
                .any(|f| f["type"] == "task_done" && f["task_id"] == approved.as_str())
    })
    .await;
    let after = frames.iter().find(|f| f["type"] == "hook_after").unwrap();
    assert_eq!(after["task_id"], approved.as_str(), "{after}");
    assert_eq!(super::finished(b, &approved).await["status"], "pass");
    until_mailbox_empty(&cluster).await;
}

/// `doubtful` finishes blocked with a reason and escalates to the senior.
const DOUBTFUL: &str = r#"
[agents.doubtful]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '{\"reason\":\"tests fail\",\"failing\":3}'; exit 1"]
stdin = "none"
layers = ["senior_escalation"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_senior_on_node_a_answers_the_escalation_of_an_attempt_node_b_runs() {
    let cluster = Cluster::start(2, DOUBTFUL).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let senior = a
        .login(json!({"roles": ["senior"], "kind": "automate"}))
        .await;
    let mut ws = a.connect(&senior).await;

    // Node B learns of the login on its own, and escalates to it. Its
    // admin list shows only the sessions B holds in memory; a lookup by sid
    // or by the senior's token would make B copy the session from the
    // database on the spot.
    let started = Instant::now();
    loop {
        let (status, list) = parts(b.get("/v1/operators", &b.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{list}");
        let known = list.as_array().unwrap().iter().any(|s| {
            s["sid"] == senior.sid.as_str()
                && s["roles"].as_array().unwrap().contains(&json!("senior"))
        });
        if known {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "node B never learned of the senior's login: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, created) = b
        .create(json!({"agent": "doubtful", "prompt": "is it done?"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let ask = ws.recv_type("ask").await;
    assert_eq!(ask["task_id"], task.as_str(), "{ask}");
    assert_eq!(ask["question"]["reason"], "tests fail", "{ask}");
    ws.send(json!({"type": "answer", "req_id": ask["req_id"], "value": "accept: flaky"}))
        .await;
    let view = super::finished(b, &task).await;
    assert_eq!(view["status"], "pass", "{view}");
    assert_eq!(view["result"]["value"]["senior_answer"], "accept: flaky");
    until_mailbox_empty(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_on_another_node_takes_over_a_stale_holders_role() {
    let cluster = Cluster::start_with_auth(2, "role_takeover_secs = 1", QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let old = a.login(json!({"roles": ["main-ai"]})).await;

    // No socket and no activity past the takeover time: node A ends it
    // when node B's login asks, and B's login gets the role.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let new = b.login(json!({"roles": ["main-ai"]})).await;
    assert_ne!(new.sid, old.sid);
    let status = a
        .get(&format!("/v1/operators/{}", old.sid), &a.admin)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404, "the stale holder ended on its home");

    // A live holder keeps it.
    let _ws = b.connect(&new).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, refused) = parts(
        a.post("/v1/operators", &a.admin)
            .json(&json!({"roles": ["main-ai"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
}
