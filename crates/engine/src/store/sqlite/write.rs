//! The write side of the SQLite `TaskStore`: a batch of `WriteOp`s encoded
//! into rows on the submitting thread, and the writer job that stores them.
//!
//! All JSON encoding happens in `encode`, before the job is queued: the
//! writer thread is the one serial resource shared by every store of the
//! daemon, so its job only binds values and steps cached statements.

use rusqlite::{CachedStatement, Transaction, params};
use swarmd_output_store::StoreError;

use crate::ids::{SessionId, TaskId};
use crate::store::WriteOp;

/// One statement's worth of a batch, ready to bind.
#[derive(Debug)]
pub(super) enum Row {
    Task {
        id: [u8; 16],
        status: &'static str,
        agent: String,
        finished_ms: Option<u64>,
        body: String,
    },
    Attempt {
        task: [u8; 16],
        attempt: u32,
        body: String,
    },
    Handle {
        digest: [u8; 32],
        task: [u8; 16],
        attempt: u32,
        exp_secs: u64,
        body: String,
    },
    Key {
        key: String,
        task: [u8; 16],
    },
    Event {
        seq: u64,
        ts_ms: u64,
        task: Option<[u8; 16]>,
        body: String,
    },
    Audit {
        ts_ms: u64,
        task: [u8; 16],
        body: String,
    },
    PutSession {
        sid: [u8; 16],
        body: String,
    },
    DeleteSession {
        sid: [u8; 16],
    },
    PutPosted {
        task: [u8; 16],
        attempt: u32,
        key: Option<String>,
        digest: [u8; 32],
    },
    DeletePosted {
        task: [u8; 16],
        attempt: u32,
    },
    Run {
        id: [u8; 16],
        flow: String,
        status: &'static str,
        session: Option<[u8; 16]>,
        key: Option<String>,
        created_ms: u64,
        updated_ms: u64,
        record: String,
    },
    Flow {
        hash: String,
        name: String,
        doc: String,
    },
}

pub(super) fn task_key(id: TaskId) -> [u8; 16] {
    id.as_uuid().into_bytes()
}

pub(super) fn session_key(sid: SessionId) -> [u8; 16] {
    sid.as_uuid().into_bytes()
}

/// Encodes a batch in order; `WriteOp::Events` becomes one row per event.
pub(super) fn encode(batch: Vec<WriteOp>) -> Result<Vec<Row>, StoreError> {
    let mut rows = Vec::with_capacity(batch.len() + 4);
    for op in batch {
        match op {
            WriteOp::PutTask(task) => {
                let body = serde_json::to_string(&*task)?;
                let status = task.status().as_str();
                let task = *task;
                rows.push(Row::Task {
                    id: task_key(task.id),
                    status,
                    agent: task.agent,
                    finished_ms: task.finished_ms,
                    body,
                });
            }
            WriteOp::PutAttempt(record) => rows.push(Row::Attempt {
                task: task_key(record.task_id),
                attempt: record.attempt,
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::PutHandle { digest, record } => rows.push(Row::Handle {
                digest,
                task: task_key(record.task_id),
                attempt: record.attempt,
                exp_secs: record.exp_secs,
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::IdempotencyKey { key, task_id } => rows.push(Row::Key {
                key,
                task: task_key(task_id),
            }),
            WriteOp::Events(events) => {
                rows.reserve(events.len());
                for event in events {
                    rows.push(Row::Event {
                        seq: event.seq,
                        ts_ms: event.ts_ms,
                        task: event.event.task_id().map(task_key),
                        body: serde_json::to_string(&event)?,
                    });
                }
            }
            // The body keeps `id: 0`; reads take the id from the row.
            WriteOp::Audit(record) => rows.push(Row::Audit {
                ts_ms: record.ts_ms,
                task: task_key(record.task_id),
                body: serde_json::to_string(&record)?,
            }),
            WriteOp::PutSession(record) => rows.push(Row::PutSession {
                sid: session_key(record.sid),
                body: serde_json::to_string(&*record)?,
            }),
            WriteOp::DeleteSession(sid) => rows.push(Row::DeleteSession {
                sid: session_key(sid),
            }),
            WriteOp::PutPostedFinal {
                task_id,
                attempt,
                posted,
            } => rows.push(Row::PutPosted {
                task: task_key(task_id),
                attempt,
                key: posted.idempotency_key,
                digest: posted.body_digest,
            }),
            WriteOp::DeletePostedFinal { task_id, attempt } => rows.push(Row::DeletePosted {
                task: task_key(task_id),
                attempt,
            }),
            WriteOp::PutRun(run) => {
                let record = serde_json::to_string(&*run)?;
                let run = *run;
                rows.push(Row::Run {
                    id: run.id.as_uuid().into_bytes(),
                    flow: run.flow,
                    status: run.status.as_str(),
                    session: run.session.map(session_key),
                    key: run.idempotency_key,
                    created_ms: run.created_ms,
                    updated_ms: run.updated_ms,
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

/// The statement of each `Row` kind, indexed by `Row::statement`.
const STATEMENTS: [&str; 12] = [
    // A task's agent is fixed at creation, so the upsert leaves the `agent`
    // column (and its index) alone.
    "INSERT INTO tasks (id, status, agent, finished_ms, body) VALUES (?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (id) DO UPDATE SET status = excluded.status,
         finished_ms = excluded.finished_ms, body = excluded.body",
    "INSERT INTO attempts (task, attempt, body) VALUES (?1, ?2, ?3)
     ON CONFLICT (task, attempt) DO UPDATE SET body = excluded.body",
    "INSERT INTO handles (digest, task, attempt, exp_secs, body) VALUES (?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (task, attempt, digest) DO UPDATE SET exp_secs = excluded.exp_secs,
         body = excluded.body",
    "INSERT INTO idem_keys (key, task) VALUES (?1, ?2)
     ON CONFLICT (key) DO UPDATE SET task = excluded.task",
    // A seq already stored fails the job, and so its whole batch: the log
    // never silently replaces an event subscribers may have seen.
    "INSERT INTO events (seq, ts_ms, task, body) VALUES (?1, ?2, ?3, ?4)",
    "INSERT INTO audit (ts_ms, task, body) VALUES (?1, ?2, ?3)",
    "INSERT INTO sessions (sid, body) VALUES (?1, ?2)
     ON CONFLICT (sid) DO UPDATE SET body = excluded.body",
    "DELETE FROM sessions WHERE sid = ?1",
    "INSERT INTO posted_finals (task, attempt, key, digest) VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (task, attempt) DO UPDATE SET key = excluded.key, digest = excluded.digest",
    "DELETE FROM posted_finals WHERE task = ?1 AND attempt = ?2",
    // A key another run holds is left to it (the first writer keeps a key),
    // and a run keeps the key it got.
    "INSERT INTO flow_runs (id, flow, status, session, idem_key, created_ms, updated_ms, record)
     VALUES (?1, ?2, ?3, ?4,
         CASE WHEN EXISTS (SELECT 1 FROM flow_runs WHERE idem_key = ?5 AND id <> ?1)
             THEN NULL ELSE ?5 END,
         ?6, ?7, ?8)
     ON CONFLICT (id) DO UPDATE SET flow = excluded.flow, status = excluded.status,
         session = excluded.session, idem_key = coalesce(flow_runs.idem_key, excluded.idem_key),
         updated_ms = excluded.updated_ms, record = excluded.record",
    "INSERT INTO flow_docs (hash, name, doc) VALUES (?1, ?2, ?3) ON CONFLICT (hash) DO NOTHING",
];

impl Row {
    fn statement(&self) -> usize {
        match self {
            Row::Task { .. } => 0,
            Row::Attempt { .. } => 1,
            Row::Handle { .. } => 2,
            Row::Key { .. } => 3,
            Row::Event { .. } => 4,
            Row::Audit { .. } => 5,
            Row::PutSession { .. } => 6,
            Row::DeleteSession { .. } => 7,
            Row::PutPosted { .. } => 8,
            Row::DeletePosted { .. } => 9,
            Row::Run { .. } => 10,
            Row::Flow { .. } => 11,
        }
    }
}

/// The writer job: stores `rows` in order inside the job's savepoint.
///
/// Each statement is taken from the connection's cache once per job and
/// reused for every row of its kind.
pub(super) fn apply(tx: &Transaction<'_>, rows: Vec<Row>) -> Result<(), StoreError> {
    let mut prepared: [Option<CachedStatement<'_>>; STATEMENTS.len()] = Default::default();
    for row in rows {
        let index = row.statement();
        let stmt = match &mut prepared[index] {
            Some(stmt) => stmt,
            slot => slot.insert(tx.prepare_cached(STATEMENTS[index])?),
        };
        match row {
            Row::Task {
                id,
                status,
                agent,
                finished_ms,
                body,
            } => stmt.execute(params![id, status, agent, finished_ms, body])?,
            Row::Attempt {
                task,
                attempt,
                body,
            } => stmt.execute(params![task, attempt, body])?,
            Row::Handle {
                digest,
                task,
                attempt,
                exp_secs,
                body,
            } => stmt.execute(params![digest, task, attempt, exp_secs, body])?,
            Row::Key { key, task } => stmt.execute(params![key, task])?,
            Row::Event {
                seq,
                ts_ms,
                task,
                body,
            } => stmt.execute(params![seq, ts_ms, task, body])?,
            Row::Audit { ts_ms, task, body } => stmt.execute(params![ts_ms, task, body])?,
            Row::PutSession { sid, body } => stmt.execute(params![sid, body])?,
            Row::DeleteSession { sid } => stmt.execute(params![sid])?,
            Row::PutPosted {
                task,
                attempt,
                key,
                digest,
            } => stmt.execute(params![task, attempt, key, digest])?,
            Row::DeletePosted { task, attempt } => stmt.execute(params![task, attempt])?,
            Row::Run {
                id,
                flow,
                status,
                session,
                key,
                created_ms,
                updated_ms,
                record,
            } => stmt.execute(params![
                id, flow, status, session, key, created_ms, updated_ms, record
            ])?,
            Row::Flow { hash, name, doc } => stmt.execute(params![hash, name, doc])?,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventRecord};
    use crate::task::{Policy, Task, TaskSpec};

    #[test]
    fn encode_keeps_order_and_flattens_events() {
        let mut task = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 5);
        task.start_attempt(6).unwrap();
        let events = (1..=3)
            .map(|seq| EventRecord {
                seq,
                ts_ms: 10 + seq,
                session: None,
                event: Event::TaskQueued { task_id: task.id },
            })
            .collect();
        let sid = SessionId::new();
        let rows = encode(vec![
            WriteOp::Events(events),
            WriteOp::PutTask(Box::new(task.clone())),
            WriteOp::DeleteSession(sid),
        ])
        .unwrap();
        let kinds: Vec<usize> = rows.iter().map(Row::statement).collect();
        assert_eq!(kinds, vec![4, 4, 4, 0, 7]);
        match &rows[2] {
            Row::Event {
                seq,
                ts_ms,
                task: Some(id),
                body,
            } => {
                assert_eq!((*seq, *ts_ms, *id), (3, 13, task_key(task.id)));
                assert_eq!(serde_json::from_str::<EventRecord>(body).unwrap().seq, 3);
            }
            other => panic!("expected an event row, got {other:?}"),
        }
        match &rows[3] {
            Row::Task { status, body, .. } => {
                assert_eq!(*status, "running");
                assert_eq!(serde_json::from_str::<Task>(body).unwrap(), task);
            }
            other => panic!("expected a task row, got {other:?}"),
        }
        assert!(matches!(rows[4], Row::DeleteSession { sid: key } if key == session_key(sid)));
    }
}
