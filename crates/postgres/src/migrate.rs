//! The schema and its versioned migrations, applied at open under a
//! PostgreSQL advisory lock.
//!
//! `schema_version` holds one row per migration applied. A node takes
//! `pg_advisory_lock(MIGRATION_LOCK)` (session-level, so it blocks other
//! nodes until released), reads the highest version, applies each missing
//! step in its own transaction together with its `schema_version` row, and
//! releases the lock. Nodes starting together on an empty database
//! therefore apply every step exactly once; the others wait and find the
//! schema done. A database whose version is newer than this build's is
//! refused rather than misread.

use swarmd_output_store::StoreError;
use tokio_postgres::Client;

use crate::connect::db_error;

/// The schema this build writes.
pub const SCHEMA_VERSION: i32 = STEPS.len() as i32;

/// The advisory lock key of migrations: "swarmd" in ASCII, so another
/// application's locks are unlikely to collide.
const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"\0\0swarmd");

/// Step `n` (1-based) brings the schema from version `n - 1` to `n`.
///
/// Ids are UUIDs (v7 for tasks, so `ORDER BY id` is creation order);
/// bodies are the records' JSON as text, as in SQLite, so both backends
/// decode the same bytes. The columns a listing filters on (`session`,
/// `parent`, `continued_from`) are columns with partial indexes instead of
/// JSON paths. Events are keyed by the seq the writer commits them under;
/// audit ids come from an identity column the single writer draws in
/// commit order. Outputs carry `is_final` so `last_final` is one index walk.
///
/// Step 2 is the cluster's (`CLUSTER`). Step 3 holds what a node kept on
/// its disk before, so that every node shares it: the signing keyring (`signing_keys`: at most one `current`
/// key, the others verify-only, newest first by `id`), the admin token
/// (`admin_token`, one row: the secret, for `swarmd admin-token`, and its
/// SHA-256, the only column a node reads) and spilled output values
/// (`blobs`, content-addressed; `claimed_at` comes from the database's
/// clock, so every node's sweep agrees on a blob's age). Step 4 claims
/// idempotency keys across nodes (`KEY_CLAIMS`). Step 5 indexes handles by
/// digest, so a node routes a `wh-` handle it does not hold to the node
/// that does (`owners`). Step 6 carries sessions across nodes
/// (`SESSION_MAIL`). Step 7 stores flow runs and pinned flow documents
/// (`FLOW_RUNS`). Step 8 gives each event its kind as a column
/// (`EVENT_KINDS`). Step 9 gives a task's spec a column of its own
/// (`TASK_SPECS`).
const STEPS: [&str; 9] = [
    "
CREATE TABLE tasks (
    id             uuid   PRIMARY KEY,
    status         text   NOT NULL,
    agent          text   NOT NULL,
    finished_ms    bigint,
    session        uuid,
    parent         uuid,
    continued_from uuid,
    body           text   NOT NULL
);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_agent ON tasks (agent, id);
CREATE INDEX tasks_finished ON tasks (finished_ms) WHERE finished_ms IS NOT NULL;
CREATE INDEX tasks_session ON tasks (session, id) WHERE session IS NOT NULL;
CREATE INDEX tasks_parent ON tasks (parent, id) WHERE parent IS NOT NULL;
CREATE INDEX tasks_continued_from ON tasks (continued_from, id) WHERE continued_from IS NOT NULL;

CREATE TABLE attempts (
    task    uuid   NOT NULL,
    attempt bigint NOT NULL,
    body    text   NOT NULL,
    PRIMARY KEY (task, attempt)
);

CREATE TABLE handles (
    task     uuid   NOT NULL,
    attempt  bigint NOT NULL,
    digest   bytea  NOT NULL,
    exp_secs bigint NOT NULL,
    body     text   NOT NULL,
    PRIMARY KEY (task, attempt, digest)
);

CREATE TABLE idem_keys (
    key  text PRIMARY KEY,
    task uuid NOT NULL
);
CREATE INDEX idem_keys_task ON idem_keys (task);

CREATE TABLE events (
    seq   bigint PRIMARY KEY,
    ts_ms bigint NOT NULL,
    task  uuid,
    body  text   NOT NULL
);

CREATE TABLE audit (
    id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts_ms bigint NOT NULL,
    task  uuid   NOT NULL,
    body  text   NOT NULL
);
CREATE INDEX audit_task ON audit (task, id);

CREATE TABLE posted_finals (
    task    uuid   NOT NULL,
    attempt bigint NOT NULL,
    key     text,
    digest  bytea  NOT NULL,
    PRIMARY KEY (task, attempt)
);

CREATE TABLE sessions (
    sid  uuid PRIMARY KEY,
    body text NOT NULL
);

CREATE TABLE task_store_meta (
    name  text   PRIMARY KEY,
    value bigint NOT NULL
);

CREATE TABLE outputs (
    task     uuid    NOT NULL,
    attempt  bigint  NOT NULL,
    seq      bigint  NOT NULL,
    ts_ms    bigint  NOT NULL,
    producer text    NOT NULL,
    is_final boolean NOT NULL,
    event    text    NOT NULL,
    PRIMARY KEY (task, attempt, seq)
);
CREATE INDEX outputs_finals ON outputs (task, attempt, seq) WHERE is_final;
",
    CLUSTER,
    "
CREATE TABLE signing_keys (
    id         bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    kid        text        PRIMARY KEY,
    secret     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    current    boolean     NOT NULL
);
CREATE UNIQUE INDEX signing_keys_current ON signing_keys (current) WHERE current;

CREATE TABLE admin_token (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    secret     text        NOT NULL,
    digest     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE blobs (
    sha256     text        PRIMARY KEY,
    bytes      bytea       NOT NULL,
    size       bigint      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX blobs_claimed ON blobs (claimed_at);
",
    KEY_CLAIMS,
    "CREATE INDEX handles_digest ON handles (digest);",
    SESSION_MAIL,
    FLOW_RUNS,
    EVENT_KINDS,
    TASK_SPECS,
];

/// Step 9: a task's spec (the fields fixed at creation) in `spec`, written
/// once, and its state in `body`, rewritten at each change (docs/decisions.md,
/// PostgreSQL store). Rows stored before it keep the whole task in `body`
/// and no spec; the writer's upsert keeps them whole until a write brings
/// the spec (`rows::statements::TASKS`).
const TASK_SPECS: &str = "ALTER TABLE tasks ADD COLUMN spec text;";

/// Step 8: an event's `kind` beside its body, so a node's event pump reads
/// only the seqs of the events nothing on it needs (docs/decisions.md,
/// Cluster). Events logged before it have none and are read whole.
const EVENT_KINDS: &str = "ALTER TABLE events ADD COLUMN kind text;";

/// Step 7: flow runs (docs/flows.md). A run's record is JSON beside the
/// columns listings filter on; `owner_node` is the node that drives it
/// (the last to write it; a takeover moves a dead node's open runs); `idem_key` is unique where set (the first
/// run to write a key keeps it). Flow documents are keyed by their content
/// hash and never change.
const FLOW_RUNS: &str = "
CREATE TABLE flow_runs (
    id         uuid   PRIMARY KEY,
    flow       text   NOT NULL,
    status     text   NOT NULL,
    session    uuid,
    idem_key   text   UNIQUE,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    record     jsonb  NOT NULL,
    owner_node uuid
);
CREATE INDEX flow_runs_status ON flow_runs (status, id);
CREATE INDEX flow_runs_owner ON flow_runs (owner_node, status);

CREATE TABLE flow_docs (
    hash text  PRIMARY KEY,
    name text  NOT NULL,
    doc  jsonb NOT NULL
);
";

/// Step 4: an idempotency key is claimed before its task is recorded
/// (`keys`), by a node incarnation at a time, so a claim whose claimant
/// died, or gave up, before recording its task can be taken over.
const KEY_CLAIMS: &str = "
ALTER TABLE idem_keys ADD COLUMN node uuid, ADD COLUMN epoch bigint,
    ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT now();
";

/// Step 6: operator sessions across nodes (docs/decisions.md, Cluster).
///
/// `sessions.home_node` is the node that holds a session's socket (or its
/// MCP pops) and alone expires it; the writer stamps it on insert, a move
/// updates it. `session_mail` carries what one node sends a session homed
/// on another (`to_node` NULL: read by whichever node is the session's home
/// then) and the replies to the node waiting for them (`to_node`), read in
/// `id` order; a row goes once its frame was sent or its reply handed over.
/// Rows go with their session.
const SESSION_MAIL: &str = "
ALTER TABLE sessions ADD COLUMN home_node uuid;
CREATE INDEX sessions_home ON sessions (home_node);
CREATE INDEX sessions_digest ON sessions (((body::jsonb) ->> 'token_digest'));

CREATE TABLE session_mail (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sid        uuid        NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
    to_node    uuid,
    reply_to   uuid,
    kind       text        NOT NULL,
    req_id     text,
    body       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_mail_sid ON session_mail (sid, id);
CREATE INDEX session_mail_to ON session_mail (to_node, id) WHERE to_node IS NOT NULL;
";

/// Step 2: several nodes on one database (docs/decisions.md, Cluster).
///
/// `event_head` is the one row every write group that carries events
/// updates last before `COMMIT`: its row lock orders the groups of all
/// nodes, so seqs are gapless and commit order is seq order. `nodes` holds
/// each node's incarnation (`epoch`, from `node_epochs`), lease
/// (`heartbeat_at`, compared with the database's `now()` only) and state;
/// `tasks.owner_node` is the node that holds a live task in memory.
/// `swarmd_fence` is the first statement of every write group of a node:
/// it share-locks the node's row while the node is alive with its epoch
/// and raises SQLSTATE `SW410` otherwise, so a takeover (which updates the
/// row) and a late group serialize.
const CLUSTER: &str = "
CREATE TABLE event_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint  NOT NULL
);
INSERT INTO event_head (seq)
SELECT GREATEST(COALESCE((SELECT MAX(seq) FROM events), 0),
                COALESCE((SELECT value FROM task_store_meta WHERE name = 'pruned_event_seq'), 0));

CREATE SEQUENCE node_epochs;
CREATE TABLE nodes (
    id            uuid        PRIMARY KEY,
    epoch         bigint      NOT NULL,
    advertise_url text        NOT NULL,
    state         text        NOT NULL,
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL
);

ALTER TABLE tasks ADD COLUMN owner_node uuid;
CREATE INDEX tasks_owner_live ON tasks (owner_node) WHERE finished_ms IS NULL;

CREATE FUNCTION swarmd_fence(node uuid, node_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM nodes WHERE id = node AND epoch = node_epoch AND state = 'alive' FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'swarmd node % (epoch %) is fenced', node, node_epoch
            USING ERRCODE = 'SW410';
    END IF;
END $$;
";

/// Applies the missing steps under the advisory lock.
pub(crate) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_error)?;
    let outcome = apply_missing(client).await;
    // Released whatever happened; closing the connection would release it too.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_error);
    outcome.and(unlocked.map(drop))
}

async fn apply_missing(client: &mut Client) -> Result<(), StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version    integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(db_error)?;
    let found: i32 = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
        .await
        .map_err(db_error)?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::Schema(format!(
            "the database has swarmd schema version {found}, newer than version \
             {SCHEMA_VERSION} that this swarmd understands; refusing to use it"
        )));
    }
    for (index, step) in STEPS.iter().enumerate().skip(found as usize) {
        let version = index as i32 + 1;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.batch_execute(step).await.map_err(db_error)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        tracing::info!(version, "postgres schema migrated");
    }
    Ok(())
}
