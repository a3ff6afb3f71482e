//! Several swarmd nodes on one PostgreSQL database (docs/operations.md,
//! Several nodes; docs/decisions.md, Cluster): this node's identity and
//! registration, its heartbeat and takeover loop (`node`), the lease
//! arithmetic (`lease`), the event pump that follows the shared log
//! (`pump`), the keyring follower that brings a rotated signing key to a
//! running node (`keys`), and where a request about a live task, an open
//! run or a node's queue goes (`route` decides from the request,
//! `forwarder` asks the database and holds the client to the peers; the
//! API surface relays the bytes). The coordination rows themselves are
//! `swarmd-postgres`'s `PgCluster`; a session's home and mail are
//! `swarmd-sessions`'.
//!
//! On `store.backend = "postgres"` a daemon is always a node, a cluster of
//! one without `[cluster]`: it registers before recovery (a new epoch, which
//! fences its previous incarnation; `claim` first refuses an id another live
//! node holds), recovers the live tasks it owns, and from then on
//! heartbeats, takes over dead peers' tasks and broadcasts every node's
//! events.

mod claim;
mod forwarder;
mod keys;
mod lease;
mod node;
mod peers;
mod pump;
pub mod route;

pub use forwarder::{FORWARDED_BY, FORWARDED_TO, Forwarder};
pub use peers::session_peers;
pub use route::{NODE as NODE_HEADER, Subject, worker_subject};

use std::path::Path;
use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_postgres::{NodeId, PgDb, Registration};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use swarmd_config::{ClusterConfig, Config};

/// The file in the state directory that keeps a generated node id.
const NODE_ID_FILE: &str = "node_id";

/// Why this node could not join.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot keep the node id in {path}: {source}")]
    NodeIdFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} does not hold a node id (a UUID); remove it to have a new one generated")]
    BadNodeId { path: String },
    #[error("cannot register this node: {0}")]
    Register(#[source] swarmd_output_store::StoreError),
    #[error(
        "node id {node} is in use by a live node at {other_url}: its heartbeat advanced while \
         this node watched it, and two nodes with one id fence each other in turn; this node \
         does not start. Give it an id of its own: {fix}"
    )]
    IdInUse {
        node: NodeId,
        other_url: String,
        fix: String,
    },
}

/// This node's settings: `[cluster]`, or its defaults.
pub fn settings(config: &Config) -> ClusterConfig {
    config.cluster.clone().unwrap_or_default()
}

/// The node's stable id: `cluster.node_id`, else the one kept in
/// `<state_dir>/node_id`, generated there on first start.
pub fn node_id(settings: &ClusterConfig, state_dir: &Path) -> Result<NodeId, ClusterError> {
    if let Some(id) = settings.node_id.as_deref().and_then(|id| id.parse().ok()) {
        return Ok(id);
    }
    let path = state_dir.join(NODE_ID_FILE);
    let shown = || path.display().to_string();
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| ClusterError::BadNodeId { path: shown() }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4();
            write_private(&path, &format!("{id}\n")).map_err(|source| {
                ClusterError::NodeIdFile {
                    path: shown(),
                    source,
                }
            })?;
            Ok(id)
        }
        Err(source) => Err(ClusterError::NodeIdFile {
            path: shown(),
            source,
        }),
    }
}

/// Creates `path` with `text`, 0600 like every file of the state directory.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// Registers this node (a new epoch) before recovery, unless another live
/// node holds its id (`claim`): when the id's row is alive with a heartbeat
/// younger than the lease and another advertise URL, the row is watched for
/// up to a lease and a tick first, and a heartbeat that advances meanwhile
/// refuses the start with `IdInUse`.
pub async fn register(
    db: &PgDb,
    node: NodeId,
    advertise_url: &str,
    config: &Config,
) -> Result<Registration, ClusterError> {
    let settings = settings(config);
    let lease = Duration::from_secs(settings.node_lease_secs);
    let cluster = db.cluster();
    let row = cluster
        .node_row(node)
        .await
        .map_err(ClusterError::Register)?;
    if let Some(row) = row.filter(|row| claim::must_watch(row, advertise_url, lease)) {
        let window = lease + lease::Lease::new(lease, tokio::time::Instant::now()).tick();
        tracing::warn!(
            %node,
            other_url = %row.advertise_url,
            heartbeat_age_ms = row.heartbeat_age.as_millis() as u64,
            watch_ms = window.as_millis() as u64,
            "this node's id is registered alive at another advertise URL; watching its \
             heartbeat before taking the id over"
        );
        match claim::watch(&row, window, || cluster.node_row(node))
            .await
            .map_err(ClusterError::Register)?
        {
            claim::Claim::Held { advertise_url } => {
                return Err(ClusterError::IdInUse {
                    node,
                    other_url: advertise_url,
                    fix: claim::fix_hint(
                        settings.node_id.is_some(),
                        &config.store.state_dir.join(NODE_ID_FILE),
                    ),
                });
            }
            claim::Claim::Free => tracing::warn!(
                %node,
                other_url = %row.advertise_url,
                "the node that held this id did not heartbeat; taking the id over"
            ),
        }
    }
    let registration = db
        .cluster()
        .register_node(node, advertise_url)
        .await
        .map_err(ClusterError::Register)?;
    tracing::info!(
        node = %registration.node,
        epoch = registration.epoch,
        advertise_url,
        adopted = registration.adopted,
        "registered as a cluster node"
    );
    Ok(registration)
}

/// Starts the heartbeat and takeover loop and the event pump, after
/// recovery, and the keyring follower when the database holds the keyring.
pub fn start(
    engine: &Engine,
    runner: &swarmd_flow_run::Runner,
    db: &PgDb,
    settings: &ClusterConfig,
    keyring_in_database: bool,
    stop: &CancellationToken,
    tasks: &TaskTracker,
) {
    let lease = Duration::from_secs(settings.node_lease_secs);
    let bound = lease::Lease::new(lease, tokio::time::Instant::now()).takeover_bound();
    tracing::info!(
        lease_secs = settings.node_lease_secs,
        takeover_within_ms = bound.as_millis() as u64,
        "cluster node started"
    );
    tasks.spawn(node::run(
        engine.clone(),
        runner.clone(),
        db.cluster(),
        lease,
        stop.clone(),
    ));
    tasks.spawn(pump::run(engine.clone(), db.clone(), stop.clone()));
    if keyring_in_database {
        tasks.spawn(keys::run(engine.clone(), db.clone(), stop.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_node_id_is_kept_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let settings = ClusterConfig::default();
        let first = node_id(&settings, dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(NODE_ID_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(node_id(&settings, dir.path()).unwrap(), first);
    }
}
