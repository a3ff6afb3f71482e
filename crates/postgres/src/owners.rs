//! Which node holds a live task or drives an open flow run, for a node that
//! is asked about one it does not hold (the server's `cluster::route`): by
//! the task's id, by the digest of one of its `wh-` handles
//! (`handles_digest`, schema step 5), or by the run's id.

use swarmd_engine::ids::{RunId, TaskId};
use swarmd_engine::store::HandleRecord;
use swarmd_output_store::StoreError;

use crate::PgCluster;
use crate::connect::db_error;
use crate::nodes::NodeId;

/// What names the task a request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerKey {
    Task(TaskId),
    /// The SHA-256 digest of a `wh-` handle.
    Handle([u8; 32]),
    /// An open flow run.
    Run(RunId),
    /// A node itself (a worker pool's claim names the node whose queue it
    /// means); its owner is the node.
    Node(NodeId),
}

/// The node that holds a live task (or drives an open run, or is the node
/// asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOwner {
    /// The task; `None` for a run or a node.
    pub task: Option<TaskId>,
    pub node: NodeId,
    /// Where its peers reach it (`cluster.advertise_url`).
    pub advertise_url: String,
    /// Whether its row is `alive`: a node killed moments ago still is
    /// until a survivor declares it dead.
    pub alive: bool,
}

const COLUMNS: &str = "SELECT t.id, t.owner_node, n.advertise_url, n.state = 'alive'
     FROM tasks t JOIN nodes n ON n.id = t.owner_node
     WHERE t.finished_ms IS NULL AND ";

impl PgCluster {
    /// The owner of the live task `key` names; `None` when the task is
    /// finished, unknown, or owned by no node (for a node: when no node
    /// has that id).
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn live_owner(&self, key: OwnerKey) -> Result<Option<TaskOwner>, StoreError> {
        let client = self.db.reader().await?;
        let row = match key {
            OwnerKey::Task(id) => {
                let sql = format!("{COLUMNS}t.id = $1");
                let statement = client.prepare_cached(&sql).await.map_err(db_error)?;
                client.query_opt(&statement, &[&id.as_uuid()]).await
            }
            OwnerKey::Run(id) => {
                let statement = client
                    .prepare_cached(
                        "SELECT NULL::uuid, r.owner_node, n.advertise_url, n.state = 'alive'
                         FROM flow_runs r JOIN nodes n ON n.id = r.owner_node
                         WHERE r.id = $1 AND r.status = ANY($2)",
                    )
                    .await
                    .map_err(db_error)?;
                let open = crate::runs::open_statuses();
                client.query_opt(&statement, &[&id.as_uuid(), &open]).await
            }
            OwnerKey::Node(id) => {
                let statement = client
                    .prepare_cached(
                        "SELECT NULL::uuid, n.id, n.advertise_url, n.state = 'alive'
                         FROM nodes n WHERE n.id = $1",
                    )
                    .await
                    .map_err(db_error)?;
                client.query_opt(&statement, &[&id]).await
            }
            OwnerKey::Handle(digest) => {
                let sql =
                    format!("{COLUMNS}t.id = (SELECT task FROM handles WHERE digest = $1 LIMIT 1)");
                let statement = client.prepare_cached(&sql).await.map_err(db_error)?;
                client.query_opt(&statement, &[&&digest[..]]).await
            }
        }
        .map_err(db_error)?;
        Ok(row.map(|row| TaskOwner {
            task: row.get::<_, Option<uuid::Uuid>>(0).map(TaskId::from_uuid),
            node: row.get(1),
            advertise_url: row.get(2),
            alive: row.get(3),
        }))
    }

    /// The record of the unexpired handle with `digest` (at `now_secs`),
    /// whatever its task's state: a node asked about a handle of a task it
    /// never held learns it here.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails, `StoreError::Json` when
    /// the stored record cannot be read.
    pub async fn handle_record(
        &self,
        digest: [u8; 32],
        now_secs: u64,
    ) -> Result<Option<HandleRecord>, StoreError> {
        let client = self.db.reader().await?;
        let statement = client
            .prepare_cached("SELECT body FROM handles WHERE digest = $1 AND exp_secs > $2 LIMIT 1")
            .await
            .map_err(db_error)?;
        let now = i64::try_from(now_secs).unwrap_or(i64::MAX);
        let row = client
            .query_opt(&statement, &[&&digest[..], &now])
            .await
            .map_err(db_error)?;
        match row {
            Some(row) => Ok(Some(serde_json::from_str(row.get(0))?)),
            None => Ok(None),
        }
    }
}
