//! Several real `swarmd` nodes on one PostgreSQL database (a fresh one of
//! the test cluster `scripts/pg-env.sh` runs), with a short node lease so
//! takeovers are quick: every node's events reach every node's log and
//! live feed in one gapless order (`events`); a node killed with SIGKILL
//! under load is taken over within two leases and nothing acknowledged is
//! lost or run twice (`takeover`); a node paused past its lease finds its
//! late writes fenced and exits (`fencing`); a request about a live task
//! sent to a node that does not hold it is forwarded to the one that does,
//! once (`forwarding`), and an MCP tool about it calls that node's route
//! (`mcp`); one idempotency key sent to two nodes at once makes one task
//! (`idempotency`); a MainAI connected to one node is sent the frames of
//! attempts another node dispatched, and resumes on another node where it
//! left off (`sessions`, `session_moves`); one worker pool given every node runs
//! the remote attempts of each, and a dead node's retried through the
//! survivor (`pools`); logins of one role name on two nodes at once end
//! with one holder (`roles`).

mod duplicate_id;
mod events;
mod fencing;
mod flows;
mod forwarding;
mod idempotency;
mod mcp;
mod overhead;
mod pools;
mod roles;
mod session_moves;
mod sessions;
mod takeover;

use std::time::{Duration, Instant};

use serde_json::Value;
use swarmd_postgres::PgDb;
use swarmd_postgres::testing::{TestDatabase, fresh_database};

use crate::daemon::Swarmd;
use crate::harness::PATIENCE;

/// The node lease of every test: short, so a takeover takes seconds, and
/// long enough that a node starved of CPU by the rest of the suite on a
/// 2-core machine still renews it (at 2 s, a starved node fenced itself
/// and exited mid-test).
pub(crate) const LEASE: Duration = Duration::from_secs(4);

/// A process agent that passes at once with one progress note.
pub(crate) const QUICK: &str = r#"
[agents.quick]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf '{"type":"progress","stage":"one"}\n'
printf '{"type":"final","content":{"kind":"inline","value":"quick"},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"
"#;

/// Nodes sharing one database, keyring and admin token; each has its own
/// state directory.
pub(crate) struct Cluster {
    pub nodes: Vec<Swarmd>,
    /// A reading handle on the shared database (no node of its own).
    pub db: PgDb,
    /// The `[store]` lines and `[auth]` extras every node is given.
    store: String,
    auth: String,
    _shared: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes one after the other (the first creates the shared
    /// keyring and admin token), each with `agents` (`@DIR@`: the test's
    /// shared directory).
    pub(crate) async fn start(n: usize, agents: &str) -> Cluster {
        Cluster::start_with_auth(n, "", agents).await
    }

    /// Like `start`, with more `[auth]` lines.
    pub(crate) async fn start_with_auth(n: usize, auth: &str, agents: &str) -> Cluster {
        Cluster::start_nodes(auth, &vec![agents; n]).await
    }

    /// One node per entry of `agents`, each with those agents.
    pub(crate) async fn start_each(agents: &[&str]) -> Cluster {
        Cluster::start_nodes("", agents).await
    }

    async fn start_nodes(auth: &str, agents: &[&str]) -> Cluster {
        let database = fresh_database().await;
        let shared = tempfile::tempdir().unwrap();
        let store = store_table(&database);
        let db = PgDb::open(database.options()).await.unwrap();
        let mut cluster = Cluster {
            nodes: Vec::new(),
            db,
            store,
            auth: auth.to_owned(),
            _shared: shared,
        };
        for agents in agents {
            cluster.add_node(agents).await;
        }
        cluster
    }

    /// Starts one more node with `agents` on the cluster's database.
    pub(crate) async fn add_node(&mut self, agents: &str) -> &Swarmd {
        let root = self._shared.path().display().to_string();
        let body = format!(
            r#"
[auth]
keys_file = "{root}/keys"
admin_token_file = "{root}/admin.token"
{auth}

[cluster]
node_lease_secs = {lease}
{agents}
"#,
            auth = self.auth,
            lease = LEASE.as_secs(),
            agents = agents.replace("@DIR@", &root),
        );
        let node = Swarmd::with_store(&body, &self.store)
            .admin_token_file(&self._shared.path().join("admin.token"))
            .start()
            .await;
        self.nodes.push(node);
        self.nodes.last().unwrap()
    }

    /// The shared directory (`@DIR@` in the agents).
    pub(crate) fn shared(&self) -> &std::path::Path {
        self._shared.path()
    }

    /// The node id a node registered with (from its state directory).
    pub(crate) fn node_id(&self, index: usize) -> String {
        std::fs::read_to_string(self.nodes[index].dir().join("state/node_id"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The owner of `task` in the database.
    pub(crate) async fn owner(&self, task: &str) -> String {
        self.db
            .query_text(&format!(
                "SELECT owner_node::text FROM tasks WHERE id = '{}'",
                uuid(task)
            ))
            .await
            .pop()
            .unwrap_or_default()
    }

    /// Polls until no live task is owned by `node`; how long it took.
    pub(crate) async fn until_none_owned_by(&self, node: &str) -> Duration {
        let started = Instant::now();
        loop {
            let left = self
                .db
                .query_i32(&format!(
                    "SELECT count(*)::int FROM tasks
                     WHERE owner_node = '{node}' AND finished_ms IS NULL"
                ))
                .await;
            if left == [0] {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{left:?} live tasks still owned by {node}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn store_table(database: &TestDatabase) -> String {
    format!(
        "backend = \"postgres\"\nurl = \"{}\"\npassword_file = \"{}\"",
        database.url,
        database.cluster.password_file.display()
    )
}

/// The whole event log as one node serves it, from `after`.
pub(crate) async fn events_after(node: &Swarmd, after: u64) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = after;
    loop {
        let path = format!("/v1/events?after_seq={after}&limit=1000");
        let (status, body) =
            crate::harness::parts(node.get(&path, &node.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        let page = body["events"].as_array().unwrap().clone();
        if page.is_empty() {
            return events;
        }
        after = page.last().unwrap()["seq"].as_u64().unwrap();
        events.extend(page);
    }
}

/// A wire task id (`T-<32 hex>`) as the database's UUID text.
pub(crate) fn uuid(task: &str) -> &str {
    task.trim_start_matches("T-")
}

/// `task`s as a SQL list of UUIDs.
pub(crate) fn uuid_list<'a>(tasks: impl IntoIterator<Item = &'a String>) -> String {
    tasks
        .into_iter()
        .map(|t| format!("'{}'", uuid(t)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The seqs of `events`.
pub(crate) fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// Waits until `task` is terminal as `node` serves it, asking again after
/// each wait's timeout; the task's view.
pub(crate) async fn finished(node: &Swarmd, task: &str) -> Value {
    let started = Instant::now();
    loop {
        let path = format!("/v1/tasks/{task}/wait?timeout_secs=5");
        let (status, body) =
            crate::harness::parts(node.get(&path, &node.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        if matches!(
            body["status"].as_str(),
            Some("pass" | "blocked" | "failed" | "cancelled")
        ) {
            return body;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "not finished: {body}\n{}",
            node.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a task on `node`; its id.
pub(crate) async fn create(node: &Swarmd, body: Value) -> String {
    let (status, created) = node.create(body).await;
    assert_eq!(status, 201, "{created}");
    created["task_id"].as_str().unwrap().to_owned()
}

/// The `forwarded` count of `swarmd_cluster_forwarded_requests_total` on `node`.
pub(crate) async fn forwarded(node: &Swarmd) -> u64 {
    let metrics = node.metrics().await;
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("swarmd_cluster_forwarded_requests_total{outcome=\"forwarded\"} ")
        })
        .map_or(0, |n| n.trim().parse().unwrap())
}
