//! The rows a write stores, and how a group commit folds the rows of many
//! jobs into one multi-row statement per table.
//!
//! Every row is an upsert that replaces the whole row, a plain insert, or
//! a delete by key. Folding keeps the group's effect equal to running its
//! rows one by one in queue order: an upsert replaces an earlier pending
//! upsert of the same key in place, a delete withdraws the pending upsert
//! of its key, and a group's deletes run before its upserts (so a row put
//! after a delete in the same group stands). Inserts are never folded: a
//! duplicate key fails the statement, and so the group, which the writer
//! then retries job by job so that only the guilty job fails. A task's
//! folded row keeps the first spec the group's rows of it carried: its
//! creation and a later state of it fold into one row with both.

use std::collections::HashMap;
use std::hash::Hash;

mod columns;
mod statements;

pub(crate) use statements::{LAST_OUTPUT_SEQ, Statements};

/// Stored integers are signed; no stamp or count reaches `i64::MAX`.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

use futures_util::future::try_join_all;
use swarmd_engine::task::Task;
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::notice;

/// The JSON keys of a task's state, bound to `TASKS` (`$11`).
const STATE_FIELDS: &[&str] = Task::STATE_FIELDS;

/// One row to store.
#[derive(Debug)]
pub(crate) enum Row {
    /// A task: its state (`body`) always, its spec until a write of this
    /// process that carried it committed (`specs`); a stored spec is never
    /// replaced.
    Task {
        id: Uuid,
        status: &'static str,
        agent: String,
        finished_ms: Option<i64>,
        session: Option<Uuid>,
        parent: Option<Uuid>,
        continued_from: Option<Uuid>,
        spec: Option<String>,
        body: String,
    },
    Attempt {
        task: Uuid,
        attempt: i64,
        body: String,
    },
    Handle {
        task: Uuid,
        attempt: i64,
        digest: [u8; 32],
        exp_secs: i64,
        body: String,
    },
    Key {
        key: String,
        task: Uuid,
    },
    /// Numbered at commit (`EVENTS`).
    Event {
        ts_ms: i64,
        task: Option<Uuid>,
        kind: &'static str,
        body: String,
    },
    Audit {
        ts_ms: i64,
        task: Uuid,
        body: String,
    },
    PutSession {
        sid: Uuid,
        body: String,
    },
    DeleteSession {
        sid: Uuid,
    },
    PutPosted {
        task: Uuid,
        attempt: i64,
        key: Option<String>,
        digest: [u8; 32],
    },
    DeletePosted {
        task: Uuid,
        attempt: i64,
    },
    Output(OutputRow),
    /// A flow run; `key` is left to a run of the group that wrote it first.
    Run {
        id: Uuid,
        flow: String,
        status: &'static str,
        session: Option<Uuid>,
        key: Option<String>,
        created_ms: i64,
        updated_ms: i64,
        record: String,
    },
    /// A flow document, stored unless its hash is.
    Flow {
        hash: String,
        name: String,
        doc: String,
    },
}

/// One output record's row.
#[derive(Debug)]
pub(crate) struct OutputRow {
    pub(crate) task: Uuid,
    pub(crate) attempt: i64,
    pub(crate) seq: i64,
    pub(crate) ts_ms: i64,
    pub(crate) producer: String,
    pub(crate) is_final: bool,
    pub(crate) event: String,
}

/// Keyed upserts: the last row per key, in first-seen key order.
struct Upserts<'a, K> {
    index: HashMap<K, usize>,
    rows: Vec<Option<&'a Row>>,
}

impl<K> Default for Upserts<'_, K> {
    fn default() -> Self {
        Upserts {
            index: HashMap::new(),
            rows: Vec::new(),
        }
    }
}

impl<'a, K: Hash + Eq> Upserts<'a, K> {
    fn put(&mut self, key: K, row: &'a Row) {
        match self.index.get(&key) {
            Some(&at) => self.rows[at] = Some(row),
            None => {
                self.index.insert(key, self.rows.len());
                self.rows.push(Some(row));
            }
        }
    }

    fn remove(&mut self, key: &K) {
        if let Some(at) = self.index.remove(key) {
            self.rows[at] = None;
        }
    }

    fn rows(&self) -> impl Iterator<Item = &'a Row> + '_ {
        self.rows.iter().flatten().copied()
    }
}

/// The rows of one group commit, folded per table.
#[derive(Default)]
pub(crate) struct Group<'a> {
    tasks: Upserts<'a, Uuid>,
    /// The first spec the group's rows of each task carried.
    task_specs: HashMap<Uuid, &'a str>,
    attempts: Upserts<'a, (Uuid, i64)>,
    handles: Upserts<'a, (Uuid, i64, [u8; 32])>,
    keys: Upserts<'a, &'a str>,
    sessions: Upserts<'a, Uuid>,
    deleted_sessions: Vec<Uuid>,
    posted: Upserts<'a, (Uuid, i64)>,
    deleted_posted: Vec<(Uuid, i64)>,
    events: Vec<&'a Row>,
    audit: Vec<&'a Row>,
    outputs: Vec<&'a OutputRow>,
    runs: Upserts<'a, Uuid>,
    /// The first document of each hash.
    flows: Upserts<'a, &'a str>,
}

impl<'a> Group<'a> {
    pub(crate) fn add(&mut self, row: &'a Row) {
        match row {
            Row::Task { id, spec, .. } => {
                if let Some(spec) = spec {
                    self.task_specs.entry(*id).or_insert(spec.as_str());
                }
                self.tasks.put(*id, row);
            }
            Row::Attempt { task, attempt, .. } => self.attempts.put((*task, *attempt), row),
            Row::Handle {
                task,
                attempt,
                digest,
                ..
            } => self.handles.put((*task, *attempt, *digest), row),
            Row::Key { key, .. } => self.keys.put(key.as_str(), row),
            Row::Event { .. } => self.events.push(row),
            Row::Audit { .. } => self.audit.push(row),
            Row::PutSession { sid, .. } => self.sessions.put(*sid, row),
            Row::DeleteSession { sid } => {
                self.sessions.remove(sid);
                self.deleted_sessions.push(*sid);
            }
            Row::PutPosted { task, attempt, .. } => self.posted.put((*task, *attempt), row),
            Row::DeletePosted { task, attempt } => {
                self.posted.remove(&(*task, *attempt));
                self.deleted_posted.push((*task, *attempt));
            }
            Row::Output(output) => self.add_output(output),
            Row::Run { id, .. } => self.runs.put(*id, row),
            Row::Flow { hash, .. } => {
                if !self.flows.index.contains_key(hash.as_str()) {
                    self.flows.put(hash.as_str(), row);
                }
            }
        }
    }

    pub(crate) fn add_output(&mut self, output: &'a OutputRow) {
        self.outputs.push(output);
    }

    /// How many events the group stores.
    pub(crate) fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Commits the group as one transaction: `BEGIN`, the node's fence (in
    /// a cluster), one statement per non-empty table (deletes first), the
    /// events numbered at commit, and `COMMIT`, all sent pipelined on the
    /// connection before any answer is awaited, so a group costs one round
    /// trip plus the server's WAL flush. A statement that fails aborts the
    /// transaction, which turns its `COMMIT` into a rollback; the caller
    /// sees the statement's error. Returns the first event seq (0 when the
    /// group has no events).
    pub(crate) async fn commit(
        &self,
        tx: &Client,
        statements: &Statements,
        fence: Option<(Uuid, i64)>,
    ) -> Result<i64, tokio_postgres::Error> {
        let c = columns::Columns::of(self);
        let (node, epoch) = fence.unwrap_or_default();
        let owner = fence.map(|(node, _)| node);
        let none: Vec<&(dyn ToSql + Sync)> = Vec::new();
        let mut sends = vec![tx.execute_raw(&statements.begin, none.clone())];
        if fence.is_some() {
            sends.push(tx.execute_raw(
                &statements.fence,
                vec![&node as &(dyn ToSql + Sync), &epoch],
            ));
        }
        macro_rules! send {
            ($statement:expr, $($column:expr),+ $(,)?) => {
                sends.push(tx.execute_raw(
                    &$statement,
                    vec![$(&$column as &(dyn ToSql + Sync)),+],
                ))
            };
        }
        if !c.deleted_sessions.is_empty() {
            send!(statements.delete_sessions, c.deleted_sessions);
        }
        if !c.deleted_posted.0.is_empty() {
            send!(
                statements.delete_posted,
                c.deleted_posted.0,
                c.deleted_posted.1
            );
        }
        if !c.tasks.0.is_empty() {
            let t = &c.tasks;
            send!(
                statements.tasks,
                t.0,
                t.1,
                t.2,
                t.3,
                t.4,
                t.5,
                t.6,
                t.7,
                t.8,
                owner,
                STATE_FIELDS
            );
        }
        if !c.attempts.0.is_empty() {
            let a = &c.attempts;
            send!(statements.attempts, a.0, a.1, a.2);
        }
        if !c.handles.0.is_empty() {
            let h = &c.handles;
            send!(statements.handles, h.0, h.1, h.2, h.3, h.4);
        }
        if !c.keys.0.is_empty() {
            send!(statements.keys, c.keys.0, c.keys.1);
        }
        if !c.sessions.0.is_empty() {
            send!(statements.put_sessions, c.sessions.0, c.sessions.1, owner);
        }
        if !c.posted.0.is_empty() {
            let p = &c.posted;
            send!(statements.put_posted, p.0, p.1, p.2, p.3);
        }
        if !c.audit.0.is_empty() {
            let a = &c.audit;
            send!(statements.audit, a.0, a.1, a.2);
        }
        if !c.outputs.0.is_empty() {
            let o = &c.outputs;
            send!(statements.outputs, o.0, o.1, o.2, o.3, o.4, o.5, o.6);
        }
        if !c.runs.0.is_empty() {
            let r = &c.runs;
            send!(
                statements.runs,
                r.0,
                r.1,
                r.2,
                r.3,
                r.4,
                r.5,
                r.6,
                r.7,
                owner
            );
        }
        if !c.flows.0.is_empty() {
            let f = &c.flows;
            send!(statements.flows, f.0, f.1, f.2);
        }
        let e = &c.events;
        let events = async {
            if e.0.is_empty() {
                return Ok(0);
            }
            let notice = match fence {
                Some((node, _)) => notice::payload(&node.to_string(), &e.2, &e.3),
                // Outside a cluster nothing listens: no bodies to carry.
                None => String::from("-"),
            };
            let params: [&(dyn ToSql + Sync); 5] = [&e.0, &e.1, &e.2, &notice, &e.3];
            let row = tx.query_one(&statements.events, &params).await?;
            Ok(row.get::<_, i64>(0))
        };
        let commit = tx.execute_raw(&statements.commit, none);
        // Polled in this order, so sent in this order.
        let (sent, first, committed) = futures_util::join!(try_join_all(sends), events, commit);
        sent?;
        let first = first?;
        committed?;
        Ok(first)
    }
}
