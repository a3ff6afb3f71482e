//! The writer's statements: one per folded table operation, the fence,
//! and the events numbered at commit, prepared once per connection.

use futures_util::future::try_join_all;
use tokio_postgres::Statement;

/// The writer's prepared statements, one per folded table operation.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(super) begin: Statement,
    pub(super) commit: Statement,
    pub(super) tasks: Statement,
    pub(super) attempts: Statement,
    pub(super) handles: Statement,
    pub(super) keys: Statement,
    pub(super) events: Statement,
    pub(super) audit: Statement,
    pub(super) put_sessions: Statement,
    pub(super) delete_sessions: Statement,
    pub(super) put_posted: Statement,
    pub(super) delete_posted: Statement,
    pub(super) outputs: Statement,
    pub(super) runs: Statement,
    pub(super) flows: Statement,
    pub(super) fence: Statement,
    pub(crate) last_output_seq: Statement,
}

/// A task's row holds its spec (`spec`, `$8`) and its state (`body`,
/// `$9`). A new task is owned by the writing node (`$10`, NULL outside a
/// cluster); an update keeps the owner (a takeover moves it).
///
/// Every row stays readable whatever the order of writes: a stored spec
/// is kept (a spec sent again changes nothing); a row without a spec (one
/// an older build wrote whole) that gets a state without one stays whole,
/// its state fields (`$11`, `Task::STATE_FIELDS`) replaced. A row is
/// never inserted without a spec because every write carries it until one
/// that did has committed (`specs`). The statement holds no subquery on
/// `tasks`: its plan is cached per connection, and one made while the
/// table was empty would scan the whole table at every group.
const TASKS: &str = "
INSERT INTO tasks (id, status, agent, finished_ms, session, parent, continued_from, spec, body,
                   owner_node)
SELECT t.*, $10::uuid
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::uuid[], $6::uuid[],
            $7::uuid[], $8::text[], $9::text[])
    AS t (id, status, agent, finished_ms, session, parent, continued_from, spec, body)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, finished_ms = excluded.finished_ms,
    session = excluded.session, spec = COALESCE(tasks.spec, excluded.spec),
    body = CASE WHEN tasks.spec IS NULL AND excluded.spec IS NULL
                THEN ((tasks.body::jsonb - $11::text[]) || excluded.body::jsonb)::text
                ELSE excluded.body END";
const ATTEMPTS: &str = "
INSERT INTO attempts (task, attempt, body)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[])
ON CONFLICT (task, attempt) DO UPDATE SET body = excluded.body";
const HANDLES: &str = "
INSERT INTO handles (task, attempt, digest, exp_secs, body)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bytea[], $4::bigint[], $5::text[])
ON CONFLICT (task, attempt, digest) DO UPDATE SET exp_secs = excluded.exp_secs,
    body = excluded.body";
const KEYS: &str = "
INSERT INTO idem_keys (key, task) SELECT * FROM unnest($1::text[], $2::uuid[])
ON CONFLICT (key) DO UPDATE SET task = excluded.task";
/// Numbers the group's events at commit: takes `event_head`'s row lock
/// (held until `COMMIT`, so groups of every node commit in seq order),
/// stores the events after the head in queue order, tells the other
/// nodes' listeners (`NOTIFY` is delivered at commit, and only then; the
/// payload is the group's first seq before the writer's part, `$4`, see
/// `notice`) and returns the group's first seq. Sent last before
/// `COMMIT`, so the lock is held for as short as possible.
const EVENTS: &str = "
WITH head AS (
    UPDATE event_head SET seq = seq + cardinality($1::bigint[]) RETURNING seq
), stored AS (
    INSERT INTO events (seq, ts_ms, task, body, kind)
    SELECT head.seq - cardinality($1::bigint[]) + e.n, e.ts_ms, e.task, e.body, e.kind
    FROM head, unnest($1::bigint[], $2::uuid[], $3::text[], $5::text[])
        WITH ORDINALITY AS e (ts_ms, task, body, kind, n)
)
SELECT seq - cardinality($1::bigint[]) + 1,
    pg_notify('swarmd_events', (seq - cardinality($1::bigint[]) + 1)::text || ' ' || $4::text)
FROM head";
/// Shares the node's row while the group runs, or raises `SW410`.
const FENCE: &str = "SELECT swarmd_fence($1, $2)";
/// Identity values are drawn in the order the rows are inserted: queue order.
const AUDIT: &str = "
INSERT INTO audit (ts_ms, task, body)
SELECT ts_ms, task, body FROM unnest($1::bigint[], $2::uuid[], $3::text[])
    WITH ORDINALITY AS row (ts_ms, task, body, n) ORDER BY n";
/// A new session is homed on the writing node (`$3`); an update keeps its
/// home (a move sets it).
const PUT_SESSIONS: &str = "
INSERT INTO sessions (sid, body, home_node) SELECT *, $3::uuid FROM unnest($1::uuid[], $2::text[])
ON CONFLICT (sid) DO UPDATE SET body = excluded.body";
const DELETE_SESSIONS: &str = "DELETE FROM sessions WHERE sid = ANY($1::uuid[])";
const PUT_POSTED: &str = "
INSERT INTO posted_finals (task, attempt, key, digest)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::bytea[])
ON CONFLICT (task, attempt) DO UPDATE SET key = excluded.key, digest = excluded.digest";
const DELETE_POSTED: &str = "
DELETE FROM posted_finals p USING unnest($1::uuid[], $2::bigint[]) AS gone (task, attempt)
WHERE p.task = gone.task AND p.attempt = gone.attempt";
/// A seq already taken fails the statement (the primary key).
const OUTPUTS: &str = "
INSERT INTO outputs (task, attempt, seq, ts_ms, producer, is_final, event)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
                     $6::boolean[], $7::text[])";
/// A key another run holds is left to it (the first writer keeps a key),
/// and a run keeps the key it got. The writing node (`$9`, NULL outside a
/// cluster) drives the run: only the node that owns a run writes it, and a
/// fenced node writes nothing, so the last writer is the owner.
const RUNS: &str = "
INSERT INTO flow_runs (id, flow, status, session, idem_key, created_ms, updated_ms, record,
                       owner_node)
SELECT r.id, r.flow, r.status, r.session,
       CASE WHEN EXISTS (SELECT 1 FROM flow_runs f WHERE f.idem_key = r.key AND f.id <> r.id)
            THEN NULL ELSE r.key END,
       r.created_ms, r.updated_ms, r.record::jsonb, $9::uuid
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::text[], $6::bigint[],
            $7::bigint[], $8::text[])
    AS r (id, flow, status, session, key, created_ms, updated_ms, record)
ON CONFLICT (id) DO UPDATE SET flow = excluded.flow, status = excluded.status,
    session = excluded.session, idem_key = COALESCE(flow_runs.idem_key, excluded.idem_key),
    updated_ms = excluded.updated_ms, record = excluded.record,
    owner_node = COALESCE(excluded.owner_node, flow_runs.owner_node)";
/// Content-addressed: a stored document stays as it is.
const FLOWS: &str = "
INSERT INTO flow_docs (hash, name, doc)
SELECT f.hash, f.name, f.doc::jsonb FROM unnest($1::text[], $2::text[], $3::text[])
    AS f (hash, name, doc)
ON CONFLICT (hash) DO NOTHING";
pub(crate) const LAST_OUTPUT_SEQ: &str =
    "SELECT seq FROM outputs WHERE task = $1 AND attempt = $2 ORDER BY seq DESC LIMIT 1";

impl Statements {
    /// Prepares every statement on the writer's connection.
    pub(crate) async fn prepare(
        client: &tokio_postgres::Client,
    ) -> Result<Statements, tokio_postgres::Error> {
        let all = try_join_all(
            [
                "BEGIN",
                "COMMIT",
                TASKS,
                ATTEMPTS,
                HANDLES,
                KEYS,
                EVENTS,
                AUDIT,
                PUT_SESSIONS,
                DELETE_SESSIONS,
                PUT_POSTED,
                DELETE_POSTED,
                OUTPUTS,
                RUNS,
                FLOWS,
                FENCE,
                LAST_OUTPUT_SEQ,
            ]
            .map(|sql| client.prepare(sql)),
        )
        .await?;
        let mut all = all.into_iter();
        let mut next = || all.next().expect("one statement per query");
        Ok(Statements {
            begin: next(),
            commit: next(),
            tasks: next(),
            attempts: next(),
            handles: next(),
            keys: next(),
            events: next(),
            audit: next(),
            put_sessions: next(),
            delete_sessions: next(),
            put_posted: next(),
            delete_posted: next(),
            outputs: next(),
            runs: next(),
            flows: next(),
            fence: next(),
            last_output_seq: next(),
        })
    }
}
