//! `PgTaskStore`: the engine's `TaskStore` on PostgreSQL.
//!
//! `submit` encodes its batch into rows on the caller's thread and queues
//! exactly one writer job for it, so a batch commits atomically, batches
//! commit in submission order, and `done` runs on the writer task right
//! after the commit that holds its batch, in submission order. Event seqs
//! are given at commit from `event_head` (`numbers_events`), whose row lock
//! orders the groups of every node sharing the database, so a seq is
//! visible only once every lower one is: a subscriber resuming after seq N
//! (`events_after`) can never miss an event that commits later with a
//! lower seq, and a group that rolls back takes no seq. Reads run on pooled connections; `prune` runs there too, in
//! bounded transactions of its own.
//!
//! A task's row holds its spec (`spec`, the fields fixed at creation,
//! written once) and its state (`body`, rewritten at each change). A write
//! carries the spec until a write of this process that carried it has
//! committed (`specs`), and only the state after.

use std::collections::BTreeMap;

use async_trait::async_trait;
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::{EventRecord, Logged};
use swarmd_engine::ids::{RunId, TaskId};
use swarmd_engine::run::{FlowDoc, RunFilter, RunRecord, RunSummary};
use swarmd_engine::store::{
    Done, KeyClaim, LiveSnapshot, NumberedDone, PostedFinal, TaskFilter, TaskListing, TaskStore,
    WriteOp,
};
use swarmd_engine::task::{AttemptRecord, Task, TaskStatus};
use swarmd_output_store::StoreError;

use crate::PgDb;
use crate::keys;
use crate::live;
use crate::rows::{Row, int};
use crate::runs;
use crate::specs::SpecsSent;
use crate::tasks_read as read;
use crate::writer::Op;

/// A `TaskStore` on the shared PostgreSQL handle. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PgTaskStore {
    db: PgDb,
}

impl PgTaskStore {
    /// The store over `db` (whose schema `PgDb::open` migrated).
    pub fn new(db: PgDb) -> PgTaskStore {
        PgTaskStore { db }
    }

    /// The shared database handle.
    pub fn db(&self) -> &PgDb {
        &self.db
    }
}

/// Encodes a batch in order; `WriteOp::Events` becomes one row per event.
/// A task's row carries its spec when `specs` says it must; a batch that
/// cannot be encoded empties `specs`, since its rows are never sent.
fn encode(batch: Vec<WriteOp>, specs: &SpecsSent) -> Result<Vec<Row>, StoreError> {
    let rows = encode_rows(batch, specs);
    if rows.is_err() {
        specs.forget_all();
    }
    rows
}

fn encode_rows(batch: Vec<WriteOp>, specs: &SpecsSent) -> Result<Vec<Row>, StoreError> {
    let mut rows = Vec::with_capacity(batch.len() + 4);
    for op in batch {
        match op {
            WriteOp::PutTask(task) => {
                let body = task.encode_state()?;
                let status = task.status();
                let spec = specs
                    .needs_spec(task.id.as_uuid(), status.is_terminal())
                    .then(|| task.encode_spec())
                    .transpose()?;
                let status = status.as_str();
                let task = *task;
                rows.push(Row::Task {
                    id: task.id.as_uuid(),
                    status,
                    agent: task.agent,
                    finished_ms: task.finished_ms.map(int),
                    session: task.session.map(|sid| sid.as_uuid()),
                    parent: task.parent.map(|id| id.as_uuid()),
                    continued_from: task.continued_from.map(|id| id.as_uuid()),
                    spec,
                    body,
                });
            }
            WriteOp::PutAttempt(record) => rows.push(Row::Attempt {
                task: record.task_id.as_uuid(),
                attempt: i64::from(record.attempt),
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::PutHandle { digest, record } => rows.push(Row::Handle {
                task: record.task_id.as_uuid(),
                attempt: i64::from(record.attempt),
                digest,
                exp_secs: int(record.exp_secs),
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::IdempotencyKey { key, task_id } => rows.push(Row::Key {
                key,
                task: task_id.as_uuid(),
            }),
            WriteOp::Events(events) => {
                rows.reserve(events.len());
                for event in events {
                    // The seq is given at commit (`rows::EVENTS`).
                    rows.push(Row::Event {
                        ts_ms: int(event.ts_ms),
                        task: event.event.task_id().map(|id| id.as_uuid()),
                        kind: event.event.kind(),
                        body: serde_json::to_string(&event)?,
                    });
                }
            }
            // The body keeps `id: 0`; reads take the id from the row.
            WriteOp::Audit(record) => rows.push(Row::Audit {
                ts_ms: int(record.ts_ms),
                task: record.task_id.as_uuid(),
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::PutSession(record) => rows.push(Row::PutSession {
                sid: record.sid.as_uuid(),
                body: serde_json::to_string(&*record)?,
            }),
            WriteOp::DeleteSession(sid) => rows.push(Row::DeleteSession { sid: sid.as_uuid() }),
            WriteOp::PutPostedFinal {
                task_id,
                attempt,
                posted,
            } => rows.push(Row::PutPosted {
                task: task_id.as_uuid(),
                attempt: i64::from(attempt),
                key: posted.idempotency_key,
                digest: posted.body_digest,
            }),
            WriteOp::DeletePostedFinal { task_id, attempt } => rows.push(Row::DeletePosted {
                task: task_id.as_uuid(),
                attempt: i64::from(attempt),
            }),
            WriteOp::PutRun(run) => {
                let record = serde_json::to_string(&*run)?;
                let run = *run;
                rows.push(Row::Run {
                    id: run.id.as_uuid(),
                    flow: run.flow,
                    status: run.status.as_str(),
                    session: run.session.map(|sid| sid.as_uuid()),
                    key: run.idempotency_key,
                    created_ms: int(run.created_ms),
                    updated_ms: int(run.updated_ms),
                    record,
                });
            }
            WriteOp::PutFlow(doc) => {
                let text = serde_json::to_string(&doc.doc)?;
                let doc = *doc;
                rows.push(Row::Flow {
                    hash: doc.hash,
                    name: doc.name,
                    doc: text,
                });
            }
        }
    }
    Ok(rows)
}

#[async_trait]
impl TaskStore for PgTaskStore {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        self.submit_numbered(batch, Box::new(move |outcome| done(outcome.map(drop))));
    }

    fn numbers_events(&self) -> bool {
        true
    }

    fn submit_numbered(&self, batch: Vec<WriteOp>, done: NumberedDone) {
        match encode(batch, self.db.specs()) {
            Ok(rows) => self.db.submit(Op::Rows(rows), done),
            // The error still travels through the writer queue so that
            // `done` runs in submission order.
            Err(error) => {
                let error = std::sync::Mutex::new(Some(error));
                self.db.submit(
                    Op::Ping,
                    Box::new(move |_| {
                        let error = error.lock().ok().and_then(|mut e| e.take());
                        done(Err(error.unwrap_or(StoreError::Closed)));
                    }),
                );
            }
        }
    }

    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        read::task(&self.db, id).await
    }

    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        read::attempts(&self.db, id).await
    }

    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError> {
        read::list_page(&self.db, filter, max_bytes).await
    }

    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError> {
        read::count_by_agent(&self.db, status, window).await
    }

    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        read::task_for_key(&self.db, key).await
    }

    async fn claim_key(&self, key: &str, task: TaskId) -> Result<KeyClaim, StoreError> {
        keys::claim(&self.db, key, task).await
    }

    async fn release_key(&self, key: &str, task: TaskId) -> Result<(), StoreError> {
        keys::release(&self.db, key, task).await
    }

    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError> {
        read::posted_final(&self.db, task, attempt).await
    }

    async fn events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        read::events_after(&self.db, after_seq, limit).await
    }

    async fn log_after(
        &self,
        after_seq: u64,
        limit: usize,
        whole: Option<&[&str]>,
    ) -> Result<Vec<Logged>, StoreError> {
        read::log_after(&self.db, after_seq, limit, whole).await
    }

    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        read::audit(&self.db, task, limit).await
    }

    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
        // A node of a cluster recovers the tasks it owns; the others are
        // its peers' (or taken over when a peer dies).
        let scope = match self.db.fence().node() {
            Some((node, _)) => live::Scope::Owner(node),
            None => live::Scope::All,
        };
        live::load_live(&self.db, now_secs, scope).await
    }

    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        runs::run(&self.db, id).await
    }

    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError> {
        runs::run_for_key(&self.db, key).await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        runs::list_runs(&self.db, filter).await
    }

    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        runs::open_runs(&self.db).await
    }

    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        runs::flow_doc(&self.db, hash).await
    }

    async fn prune(&self, finished_before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        let gone = read::prune(&self.db, finished_before_ms).await?;
        runs::prune(&self.db, finished_before_ms).await?;
        Ok(gone)
    }

    async fn healthcheck(&self) -> Result<(), StoreError> {
        self.db.healthcheck().await
    }
}
