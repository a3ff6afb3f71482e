//! A node id two nodes claim (docs/decisions.md, A node id two live nodes
//! claim): a third node started with a live node's id and another
//! advertise URL watches the id's heartbeat, refuses to start naming the
//! id, the live node's URL and the fix, and the live node keeps its epoch
//! and its work; when the holder is paused past its lease the newcomer
//! takes the id over as a restart does, and the paused one is fenced.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::{Cluster, LEASE, QUICK, create, finished};
use crate::daemon::{Swarmd, process_gone};
use crate::harness::PATIENCE;

/// A node's configuration on the cluster's database with node id `id`.
fn with_id(cluster: &Cluster, id: &str) -> Swarmd {
    let root = cluster.shared().display().to_string();
    let body = format!(
        r#"
[auth]
keys_file = "{root}/keys"
admin_token_file = "{root}/admin.token"

[cluster]
node_lease_secs = {lease}
node_id = "{id}"
{QUICK}
"#,
        lease = LEASE.as_secs(),
    );
    Swarmd::with_store(&body, &cluster.store)
        .admin_token_file(&cluster.shared().join("admin.token"))
}

/// The `epoch` of node `id`'s row.
async fn epoch(cluster: &Cluster, id: &str) -> String {
    cluster
        .db
        .query_text(&format!("SELECT epoch::text FROM nodes WHERE id = '{id}'"))
        .await
        .pop()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_with_a_live_node_s_id_is_refused_and_the_live_one_keeps_running() {
    let cluster = Cluster::start(2, QUICK).await;
    let a_id = cluster.node_id(0);
    let a = &cluster.nodes[0];
    let before = epoch(&cluster, &a_id).await;

    let copy = with_id(&cluster, &a_id);
    let started = Instant::now();
    let refused = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .arg("serve")
            .arg("--config")
            .arg(copy.dir().join("swarmd.toml"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the node with a duplicate id did not stop")
    .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    // Refused once the live node's heartbeat advanced: within about a tick.
    assert!(started.elapsed() < LEASE + LEASE / 3 + Duration::from_secs(3));
    for said in [
        a_id.as_str(),
        &a.base,
        "in use by a live node",
        "node_id",
        "does not start",
    ] {
        assert!(stderr.contains(said), "`{said}` not in:\n{stderr}");
    }
    assert!(!stderr.contains("listening on"), "{stderr}");

    // A kept its incarnation and is still writing, past a few heartbeats.
    tokio::time::sleep(LEASE / 2).await;
    assert_eq!(epoch(&cluster, &a_id).await, before);
    assert!(!process_gone(a.pid()), "{}", a.log());
    let task = create(a, json!({"agent": "quick", "prompt": "still here"})).await;
    let view = finished(a, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", a.log());
    assert!(!a.log().contains("this node is fenced"), "{}", a.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_s_id_is_taken_over_and_the_holder_fenced() {
    let mut cluster = Cluster::start(2, QUICK).await;
    let a_id = cluster.node_id(0);
    let before = epoch(&cluster, &a_id).await;
    let pid = Pid::from_raw(cluster.nodes[0].pid());
    kill(pid, Signal::SIGSTOP).unwrap();

    let newcomer = with_id(&cluster, &a_id).start().await;
    assert_ne!(epoch(&cluster, &a_id).await, before);
    let task = create(&newcomer, json!({"agent": "quick", "prompt": "p"})).await;
    let view = finished(&newcomer, &task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", newcomer.log());

    kill(pid, Signal::SIGCONT).unwrap();
    let exit = cluster.nodes[0].exited().await;
    assert_eq!(exit.code(), Some(75), "{}", cluster.nodes[0].log());
    assert!(!process_gone(newcomer.pid()), "{}", newcomer.log());
}
