//! The cluster's rows: a node registers (a new epoch), heartbeats, takes
//! over the live tasks of a node whose lease ran out, and leaves; and the
//! `LISTEN` connection that gives a node's bus the other nodes' groups
//! (or wakes its event pump to read them).
//!
//! Every lease comparison uses the database's `now()`, never a node's
//! clock. A node's epoch comes from the `node_epochs` sequence, so a
//! restarted node fences its own previous incarnation: that one's groups
//! call `swarmd_fence` with the old epoch and fail.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::event::Logged;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::LiveSnapshot;
use swarmd_output_store::StoreError;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

use crate::connect::{self, db_error};
use crate::live::{self, Scope};
use crate::notice::{self, Notice};
use crate::{PgCluster, PgDb};

pub use swarmd_types::cluster::NodeId;

/// This node's incarnation, once registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    pub node: NodeId,
    pub epoch: i64,
    /// Live tasks nobody owned (written before the cluster schema) that
    /// this node adopted at registration.
    pub adopted: u64,
}

/// A node's row as a node about to register under the same id reads it
/// (`PgCluster::node_row`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub epoch: i64,
    pub advertise_url: String,
    /// The row is `alive` (not `left` or `dead`).
    pub alive: bool,
    /// Its last heartbeat in microseconds since 1970 by the database's
    /// clock: compared between two reads of the row, never with a node's
    /// clock.
    pub heartbeat_us: i64,
    /// How old that heartbeat is, by the database's clock.
    pub heartbeat_age: Duration,
}

/// A dead node's live tasks, now this node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    pub node: NodeId,
    pub epoch: i64,
    pub tasks: Vec<TaskId>,
    /// How many open flow runs moved with the node's tasks.
    pub runs: u64,
    /// The node had left cleanly (stopped with tasks it did not finish),
    /// rather than stopped heartbeating.
    pub left: bool,
}

/// Takes another node's committed group, read from its notification: its
/// seqs in order, the acted-on events whole. Returns false when the node
/// needs the log whole (something follows it), so the pump reads it.
pub type OfferEntries = Arc<dyn Fn(Vec<Logged>) -> bool + Send + Sync>;

/// Wakes the event pump whenever a node may have committed events it was
/// not given.
#[derive(Debug)]
pub struct EventWake {
    woken: mpsc::Receiver<()>,
    /// Keeps the listening connection open.
    _client: tokio_postgres::Client,
}

impl EventWake {
    /// The next wake-up; `None` once the listening connection is lost.
    pub async fn recv(&mut self) -> Option<()> {
        self.woken.recv().await
    }
}

/// The `NOTIFY` channel the writer signals in every group with events.
const EVENTS_CHANNEL: &str = "swarmd_events";

fn secs(lease: Duration) -> f64 {
    lease.as_secs_f64()
}

impl PgDb {
    /// The writer's view of this node (set by `register_node`).
    pub(crate) fn fence(&self) -> &crate::writer::Fence {
        &self.inner.fence
    }
}

impl PgCluster {
    /// Registers this node with a new epoch (fencing its previous
    /// incarnation, whose tasks it keeps and recovers), marks it alive,
    /// and adopts live tasks nobody owns. From then on every write group
    /// checks the node is still alive with this epoch. Call once, before
    /// the engine's recovery.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the database refuses.
    pub async fn register_node(
        &self,
        node: NodeId,
        advertise_url: &str,
    ) -> Result<Registration, StoreError> {
        let mut client = self.db.reader().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let epoch: i64 = tx
            .query_one(
                "INSERT INTO nodes (id, epoch, advertise_url, state, started_at, heartbeat_at)
                 VALUES ($1, nextval('node_epochs'), $2, 'alive', now(), now())
                 ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch,
                     advertise_url = excluded.advertise_url, state = 'alive',
                     started_at = now(), heartbeat_at = now()
                 RETURNING epoch",
                &[&node, &advertise_url],
            )
            .await
            .map_err(db_error)?
            .get(0);
        let adopted = tx
            .execute(
                "UPDATE tasks SET owner_node = $1 WHERE owner_node IS NULL AND finished_ms IS NULL",
                &[&node],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        self.db.fence().set(node, epoch);
        Ok(Registration {
            node,
            epoch,
            adopted,
        })
    }

    /// Every node that is alive now, this one included, with where peers
    /// reach it (`advertise_url`), in the order the nodes registered.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the database cannot be read.
    pub async fn alive_nodes(&self) -> Result<Vec<(NodeId, String)>, StoreError> {
        let client = self.db.reader().await?;
        let rows = client
            .query(
                "SELECT id, advertise_url FROM nodes WHERE state = 'alive' ORDER BY epoch",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// The row of node `node`, if it ever registered. Reads only: a node
    /// reads its own id's row before `register_node`, to tell a live node
    /// holding the id from its own previous incarnation.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the database cannot be read.
    pub async fn node_row(&self, node: NodeId) -> Result<Option<NodeRow>, StoreError> {
        let client = self.db.reader().await?;
        let row = client
            .query_opt(
                "SELECT epoch, advertise_url, state = 'alive',
                        (extract(epoch FROM heartbeat_at) * 1000000)::bigint,
                        GREATEST(extract(epoch FROM now() - heartbeat_at), 0)::float8
                 FROM nodes WHERE id = $1",
                &[&node],
            )
            .await
            .map_err(db_error)?;
        Ok(row.map(|row| NodeRow {
            epoch: row.get(0),
            advertise_url: row.get(1),
            alive: row.get(2),
            heartbeat_us: row.get(3),
            heartbeat_age: Duration::from_secs_f64(row.get::<_, f64>(4)),
        }))
    }

    /// Renews this node's lease. `Ok(false)` when its row is no longer
    /// alive with its epoch: the node was declared dead (or restarted
    /// elsewhere) and must stop at once.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the database cannot be reached.
    pub async fn heartbeat(&self) -> Result<bool, StoreError> {
        let Some((node, epoch)) = self.db.fence().node() else {
            return Ok(true);
        };
        let client = self.db.reader().await?;
        let renewed = client
            .execute(
                "UPDATE nodes SET heartbeat_at = now()
                 WHERE id = $1 AND epoch = $2 AND state = 'alive'",
                &[&node, &epoch],
            )
            .await
            .map_err(db_error)?;
        Ok(renewed == 1)
    }

    /// Whether a write group found this node fenced (or `mark_fenced` was
    /// called): every later write fails with `StoreError::Fenced`.
    pub fn is_fenced(&self) -> bool {
        self.db.fence().is_fenced()
    }

    /// Refuses every later write with `StoreError::Fenced`, without asking
    /// the database.
    pub fn mark_fenced(&self) {
        self.db.fence().mark_fenced();
    }

    /// Takes over every node whose lease ran out (`heartbeat_at` older
    /// than `lease` by the database's clock) or that left with live tasks:
    /// for each, in one transaction that first checks this node is alive,
    /// marks it dead (only if it still is what was read) and moves its
    /// live tasks and open flow runs to this node. Returns what was taken, one entry per node.
    ///
    /// # Errors
    ///
    /// `StoreError::Fenced` when this node itself is no longer alive;
    /// `StoreError::Database` otherwise.
    pub async fn take_over_expired(&self, lease: Duration) -> Result<Vec<Takeover>, StoreError> {
        let Some((me, my_epoch)) = self.db.fence().node() else {
            return Ok(Vec::new());
        };
        let mut client = self.db.reader().await?;
        let candidates: Vec<(Uuid, i64, bool)> = client
            .query(
                "SELECT n.id, n.epoch, n.state = 'left' FROM nodes n
                 WHERE n.id <> $1 AND (
                     (n.state = 'alive' AND n.heartbeat_at < now() - make_interval(secs => $2))
                     OR (n.state <> 'alive' AND (EXISTS (SELECT 1 FROM tasks t
                         WHERE t.owner_node = n.id AND t.finished_ms IS NULL)
                         OR EXISTS (SELECT 1 FROM flow_runs r
                         WHERE r.owner_node = n.id AND r.status = ANY($3)))))
                 ORDER BY n.id",
                &[&me, &secs(lease), &crate::runs::open_statuses()],
            )
            .await
            .map_err(db_error)?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        let mut taken = Vec::new();
        for (node, epoch, left) in candidates {
            let tx = client.transaction().await.map_err(db_error)?;
            // A dead node paused inside a write group holds its row: give
            // up for this round rather than hold this node's own row (and
            // so its heartbeat) behind it.
            tx.batch_execute(&format!(
                "SET LOCAL lock_timeout = {}",
                (lease / 3).as_millis().max(100)
            ))
            .await
            .map_err(db_error)?;
            tx.execute("SELECT swarmd_fence($1, $2)", &[&me, &my_epoch])
                .await
                .map_err(db_error)?;
            // Waits for the dead node's write group in flight (it shares
            // the row), so the tasks below are read after it.
            let claimed = tx
                .execute(
                    "UPDATE nodes SET state = 'dead' WHERE id = $1 AND epoch = $2 AND (
                         state <> 'alive' OR heartbeat_at < now() - make_interval(secs => $3))",
                    &[&node, &epoch, &secs(lease)],
                )
                .await
                .map_err(db_error)?;
            if claimed == 0 {
                // It heartbeat or restarted meanwhile.
                tx.rollback().await.map_err(db_error)?;
                continue;
            }
            let tasks = tx
                .query(
                    "UPDATE tasks SET owner_node = $1
                     WHERE owner_node = $2 AND finished_ms IS NULL RETURNING id",
                    &[&me, &node],
                )
                .await
                .map_err(db_error)?
                .iter()
                .map(|row| TaskId::from_uuid(row.get(0)))
                .collect();
            let open = crate::runs::open_statuses();
            let runs = tx
                .execute(
                    "UPDATE flow_runs SET owner_node = $1
                     WHERE owner_node = $2 AND status = ANY($3)",
                    &[&me, &node, &open],
                )
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            taken.push(Takeover {
                node,
                epoch,
                tasks,
                runs,
                left,
            });
        }
        Ok(taken)
    }

    /// The live state of `tasks` (just taken over), for the engine to
    /// adopt: the tasks, their latest attempts and their unexpired handles.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the read fails.
    pub async fn load_taken(
        &self,
        tasks: &[TaskId],
        now_secs: u64,
    ) -> Result<LiveSnapshot, StoreError> {
        let ids = tasks.iter().map(|id| id.as_uuid()).collect();
        live::load_live(&self.db, now_secs, Scope::Tasks(ids)).await
    }

    /// Marks this node as left (a clean shutdown): the others take its
    /// live tasks over at their next check, without waiting for the lease.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the database refuses.
    pub async fn leave(&self) -> Result<(), StoreError> {
        let Some((node, epoch)) = self.db.fence().node() else {
            return Ok(());
        };
        let client = self.db.reader().await?;
        client
            .execute(
                "UPDATE nodes SET state = 'left' WHERE id = $1 AND epoch = $2 AND state = 'alive'",
                &[&node, &epoch],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// A connection of its own that `LISTEN`s to the writers' event
    /// channel. Another node's group whose notification carries its seqs
    /// and acted-on events (`notice`) goes to `offer`; the receiver gets a
    /// wake-up (coalesced) for one that does not, or that `offer` refuses,
    /// and closes when the connection is lost. A notification sent while
    /// nobody listened is lost, so the pump polls too.
    ///
    /// # Errors
    ///
    /// `StoreError::Database` when the connection or the `LISTEN` fails.
    pub async fn listen_events(&self, offer: OfferEntries) -> Result<EventWake, StoreError> {
        let own = self
            .db
            .fence()
            .node()
            .map(|(node, _)| node.to_string())
            .unwrap_or_default();
        self.listen(EVENTS_CHANNEL, Some((own, offer))).await
    }

    /// A connection of its own that `LISTEN`s to `channel`. With `events`
    /// (this node's id and where other nodes' groups go), a notification
    /// is read as `notice` says; without, each is a wake-up.
    pub(crate) async fn listen(
        &self,
        channel: &str,
        events: Option<(String, OfferEntries)>,
    ) -> Result<EventWake, StoreError> {
        let (client, mut connection) = connect::connect(&self.db.inner.config).await?;
        let (wake, woken) = mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                match message {
                    Some(Ok(AsyncMessage::Notification(note))) => {
                        let woken = match &events {
                            None => true,
                            Some((own, offer)) => match notice::read(note.payload(), own) {
                                // This node's own commits reach its bus directly.
                                Notice::Own => false,
                                Notice::Entries(entries) => !offer(entries),
                                Notice::Wake => true,
                            },
                        };
                        if woken {
                            // A full channel already holds a wake-up.
                            let _ = wake.try_send(());
                            if wake.is_closed() {
                                return;
                            }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        tracing::warn!(%error, "postgres listener connection lost");
                        return;
                    }
                    None => return,
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .map_err(db_error)?;
        Ok(EventWake {
            woken,
            _client: client,
        })
    }
}
