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
use crate::task::{Task, TaskStatus};

/// What a task row's write holds besides the state.
#[derive(Debug)]
pub(super) enum TaskWhole {
    /// A task just created: its row is new, spec and all.
    New { agent: String, spec: String },
    /// A later state of a task whose row holds its spec: only the state is
    /// written, and the task is kept to write whole should the row hold no
    /// spec (none yet, or one of a file from before specs were apart).
    Known(Box<Task>),
}

/// One statement's worth of a batch, ready to bind.
#[derive(Debug)]
pub(super) enum Row {
    /// A task's row: its state always, its spec as `whole` says.
    Task {
        id: [u8; 16],
        status: &'static str,
        finished_ms: Option<u64>,
        state: String,
        whole: TaskWhole,
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
                let (spec, state) = task.parts();
                let state = serde_json::to_string(&state)?;
                let is_new = task.status() == TaskStatus::Queued && task.attempt == 0;
                let spec = is_new.then(|| serde_json::to_string(&spec)).transpose()?;
                let (id, status, finished_ms) =
                    (task_key(task.id), task.status().as_str(), task.finished_ms);
                let whole = match spec {
                    Some(spec) => TaskWhole::New {
                        agent: task.agent,
                        spec,
                    },
                    None => TaskWhole::Known(task),
                };
                rows.push(Row::Task {
                    id,
                    status,
                    finished_ms,
                    state,
                    whole,
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
const STATEMENTS: [&str; 13] = [
    // A task's agent is fixed at creation, so the upsert leaves the `agent`
    // column (and its index) alone. `body` holds the state, `spec` the rest.
    "INSERT INTO tasks (id, status, agent, finished_ms, spec, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (id) DO UPDATE SET status = excluded.status,
         finished_ms = excluded.finished_ms, spec = excluded.spec, body = excluded.body",
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
    // A row without a spec is left to the whole write (`TaskWhole::Known`).
    "UPDATE tasks SET status = ?2, finished_ms = ?3, body = ?4 WHERE id = ?1 AND spec IS NOT NULL",
];

/// `STATEMENTS`' whole write of a task.
const PUT_TASK: usize = 0;

/// `STATEMENTS`' write of a task's state alone.
const PUT_TASK_STATE: usize = 12;

impl Row {
    fn statement(&self) -> usize {
        match self {
            Row::Task {
                whole: TaskWhole::New { .. },
                ..
            } => PUT_TASK,
            Row::Task {
                whole: TaskWhole::Known(_),
                ..
            } => PUT_TASK_STATE,
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
        let stmt = cached(&mut prepared, tx, index)?;
        match row {
            Row::Task {
                id,
                status,
                finished_ms,
                state,
                whole: TaskWhole::New { agent, spec },
            } => stmt.execute(params![id, status, agent, finished_ms, spec, state])?,
            Row::Task {
                id,
                status,
                finished_ms,
                state,
                whole: TaskWhole::Known(task),
            } => {
                let mut changed = stmt.execute(params![id, status, finished_ms, state])?;
                if changed == 0 {
                    let spec = serde_json::to_string(&task.parts().0)?;
                    let put = cached(&mut prepared, tx, PUT_TASK)?;
                    changed =
                        put.execute(params![id, status, task.agent, finished_ms, spec, state])?;
                }
                changed
            }
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

/// Statement `index` of `STATEMENTS`, taken from the connection's cache
/// at its first use in a job.
fn cached<'tx, 'slot>(
    prepared: &'slot mut [Option<CachedStatement<'tx>>; STATEMENTS.len()],
    tx: &'tx Transaction<'_>,
    index: usize,
) -> Result<&'slot mut CachedStatement<'tx>, StoreError> {
    Ok(match &mut prepared[index] {
        Some(stmt) => stmt,
        slot => slot.insert(tx.prepare_cached(STATEMENTS[index])?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventRecord};
    use serde_json::Value;

    use crate::task::{Policy, TaskSpec};

    #[test]
    fn a_new_task_is_encoded_with_its_spec() {
        let task = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 5);
        let rows = encode(vec![WriteOp::PutTask(Box::new(task))]).unwrap();
        assert!(matches!(
            &rows[..],
            [Row::Task {
                whole: TaskWhole::New { .. },
                ..
            }]
        ));
        assert_eq!(rows[0].statement(), PUT_TASK);
    }

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
        assert_eq!(kinds, vec![4, 4, 4, PUT_TASK_STATE, 7]);
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
            Row::Task {
                status,
                state,
                whole: TaskWhole::Known(whole),
                ..
            } => {
                assert_eq!(*status, "running");
                assert_eq!(**whole, task);
                let spec = serde_json::to_value(task.parts().0).unwrap();
                let state = serde_json::from_str(state).unwrap();
                let (Value::Object(spec), Value::Object(state)) = (spec, state) else {
                    panic!("the parts are objects");
                };
                assert_eq!(Task::from_parts(spec, state).unwrap(), task);
            }
            other => panic!("expected a task row, got {other:?}"),
        }
        assert!(matches!(rows[4], Row::DeleteSession { sid: key } if key == session_key(sid)));
    }
}
