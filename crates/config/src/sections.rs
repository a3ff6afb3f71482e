//! The plain sections of the configuration file (docs/configuration.md), with their
//! defaults. Agents live in `agent`, the agents directory in `agents_dir`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
pub use swarmd_engine::task::RetryOn;

const MIB: u64 = 1024 * 1024;

/// `[server]`: the HTTP and WebSocket listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the listener binds, `IP:PORT` (an IP, not a host name); port 0
    /// picks a free port, logged at startup.
    pub bind: SocketAddr,
    /// Public base URL given to workers and MainAIs, `http://host:port` without
    /// a trailing slash. Unset: derived from the bound address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Seconds running attempts get to finish after SIGTERM/SIGINT before
    /// their workers are stopped and left to recovery.
    pub shutdown_grace_secs: u64,
    /// HTTP connections open at once, over all peers; clamped at start to
    /// the descriptor limit less a reserve for children and the store.
    pub max_connections: u64,
    /// HTTP connections open at once from one peer address.
    pub max_connections_per_peer: u64,
    /// Seconds a connection has to send a request's headers, counted from
    /// its start or its previous response (so an idle keep-alive connection
    /// closes after it).
    pub header_timeout_secs: u64,
    /// Seconds a request's body may take to arrive, in total (408 after).
    pub body_timeout_secs: u64,
    /// Host names requests may carry in `Host` besides IP literals,
    /// `localhost` and the hosts of `base_url` and `cluster.advertise_url`
    /// (a reverse proxy's public name, say). Guards against DNS rebinding.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose browser pages may call the
    /// API besides the daemon's own; any other `Origin` is refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 7700)),
            base_url: None,
            shutdown_grace_secs: 30,
            max_connections: 4096,
            max_connections_per_peer: 512,
            header_timeout_secs: 30,
            body_timeout_secs: 60,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// Where durable state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreBackend {
    /// SQLite in `<state_dir>/swarmd.db` (WAL mode): survives restarts.
    #[default]
    Sqlite,
    /// In memory: everything is lost at exit (tests, `--ephemeral`).
    Memory,
    /// PostgreSQL at `store.url`: tasks, attempts, handles, events, audit,
    /// sessions, outputs, spilled values, the keyring and the admin token
    /// in the database, shared by every node on it.
    Postgres,
}

/// A PostgreSQL connection string (URL or key=value). It may carry a
/// password, so it is shown and serialized with any password redacted.
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct PgUrl(pub String);

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&swarmd_postgres::redact_url(&self.0))
    }
}

impl Serialize for PgUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&swarmd_postgres::redact_url(&self.0))
    }
}

/// SQLite `PRAGMA synchronous` for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    /// An acknowledged append survives power loss.
    #[default]
    Full,
    /// An acknowledged append survives a crash of swarmd but not of the machine.
    Normal,
}

impl From<Synchronous> for swarmd_output_store::Synchronous {
    fn from(mode: Synchronous) -> Self {
        match mode {
            Synchronous::Full => Self::Full,
            Synchronous::Normal => Self::Normal,
        }
    }
}

/// `[store]`: the output, task and event store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite` (default), `postgres` or `memory`.
    pub backend: StoreBackend,
    /// With `postgres`: the database, as a libpq-style URL
    /// (`postgres://swarmd@db.internal:5432/swarmd`) or key=value string.
    /// Keep the password out of it: see `password_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<PgUrl>,
    /// With `postgres`: a file holding the login password (trailing
    /// newlines ignored). Default: `$CREDENTIALS_DIRECTORY/swarmd-pg-password`
    /// when that file exists (systemd's `LoadCredential=`), else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// With `postgres`: read connections in the pool (the writer has one
    /// more of its own).
    pub pg_pool: u32,
    /// The state directory (docs/operations.md, State directory). Default: the first path of
    /// `$STATE_DIRECTORY` (set by systemd's `StateDirectory=`), else
    /// `$XDG_STATE_HOME/swarmd`, else `$HOME/.local/state/swarmd`, else
    /// `./swarmd-state`.
    pub state_dir: PathBuf,
    /// SQLite durability: `full` (default) or `normal`.
    pub synchronous: Synchronous,
    /// The memory backend keeps this many terminal tasks (the newest) and
    /// forgets older ones with their outputs; SQLite keeps them for
    /// `retention.days`.
    pub memory_keep_finished: u64,
}

/// The state directory used when neither the config nor the environment
/// (systemd, XDG, HOME) names one.
pub const DEFAULT_STATE_DIR: &str = "./swarmd-state";

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Sqlite,
            url: None,
            password_file: None,
            pg_pool: swarmd_postgres::DEFAULT_POOL_SIZE as u32,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            synchronous: Synchronous::Full,
            memory_keep_finished: swarmd_engine::store::DEFAULT_KEEP_FINISHED as u64,
        }
    }
}

/// `[auth]`: credentials and their lifetimes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Allow `POST /v1/operators` without the admin token from loopback clients.
    pub loopback_login: bool,
    /// Lifetime of a worker token and its handle, in seconds.
    pub worker_token_ttl_secs: u64,
    /// Upper bound on any capability token's lifetime (`exp - iat`), in seconds.
    pub max_token_ttl_secs: u64,
    /// An operator session expires this many seconds after its last activity.
    pub session_idle_secs: u64,
    /// A login may take over a role whose holder has had no socket and no
    /// activity for this many seconds; the holder ends and its undelivered
    /// `spawn` frames move to the new session.
    pub role_takeover_secs: u64,
    /// Keyring file to use instead of `<state_dir>/keys.json` (created 0600 if
    /// missing). A systemd credential `swarmd-keys` wins over both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_file: Option<PathBuf>,
    /// Admin token file to use instead of `<state_dir>/admin.token` (created
    /// 0600 if missing). A systemd credential `swarmd-admin-token` wins over both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            loopback_login: false,
            worker_token_ttl_secs: 1800,
            max_token_ttl_secs: 86_400,
            session_idle_secs: 86_400,
            role_takeover_secs: 30,
            keys_file: None,
            admin_token_file: None,
        }
    }
}

/// `[limits]`: global bounds. Sizes are integers, in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Attempts running at once, over all agents.
    pub max_running: u32,
    /// Largest accepted HTTP request body, in bytes (413 above).
    pub max_body_bytes: u64,
    /// Inline output values larger than this many bytes are spilled to
    /// `<state_dir>/blobs/` and stored as a file reference.
    pub inline_max_bytes: u64,
    /// Deepest allowed chain of sub-tasks (a task spawned by a worker has its
    /// parent's depth + 1).
    pub max_spawn_depth: u32,
    /// Bytes of output one attempt may store, whatever runs it (records plus
    /// spilled blobs); a write past it is refused (413 over HTTP, a failed
    /// attempt for a process or Lua agent).
    pub max_output_bytes_per_attempt: u64,
    /// Writes (HTTP requests other than GET, HEAD and OPTIONS, and a
    /// session's `spawn_task` and `cancel_task` frames) one credential may
    /// make per second, sustained; 0 turns the limit off. Past it: 429
    /// `rate_limited` with `Retry-After`.
    pub write_rate_per_sec: u32,
    /// Writes one credential may make in a burst above the sustained rate.
    pub write_burst: u32,
    /// Logins (`POST /v1/operators`) one peer address may make per minute;
    /// 0 turns the limit off.
    pub login_rate_per_min: u32,
    /// Live streams (`text/event-stream` of `/v1/events` and of a task's
    /// output) one caller may hold open at once.
    pub streams_per_caller: u32,
    /// Live streams open at once, over all callers.
    pub max_streams: u32,
    /// Operator sessions (logins) held at once; a login past it is refused.
    pub max_operator_sessions: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_running: 1024,
            max_body_bytes: 8 * MIB,
            inline_max_bytes: 256 * 1024,
            max_spawn_depth: 4,
            max_output_bytes_per_attempt: 64 * MIB,
            write_rate_per_sec: 20_000,
            write_burst: 40_000,
            login_rate_per_min: 60,
            streams_per_caller: 64,
            max_streams: 1024,
            max_operator_sessions: 10_000,
        }
    }
}

/// `[defaults]`: the task policy used where a task does not set its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultsConfig {
    /// Attempts per task, the first included.
    pub max_attempts: u32,
    /// Outcomes that start another attempt while attempts remain.
    pub retry_on: Vec<RetryOn>,
    /// An attempt's lease in seconds; any worker request on it extends it.
    pub attempt_timeout_secs: u64,
    /// Seconds after which a running attempt emits `long_hold_warn` (and again
    /// at each further multiple).
    pub long_hold_warn_secs: u64,
    /// A task's token budget across its attempts (input plus output); none
    /// when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// A task's cost budget in US dollars across its attempts; none when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl Default for DefaultsConfig {
    fn default() -> Self {
        DefaultsConfig {
            max_attempts: 1,
            retry_on: vec![RetryOn::Failed],
            attempt_timeout_secs: 1800,
            long_hold_warn_secs: 600,
            max_tokens: None,
            max_cost_usd: None,
        }
    }
}

/// `[ws]`: MainAI WebSocket sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WsConfig {
    /// Seconds between server pings; a connection silent for three intervals is dropped.
    pub ping_secs: u64,
    /// Frames parked per session while it has no socket.
    pub park_max: u32,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            ping_secs: 20,
            park_max: 10_000,
        }
    }
}

/// `[mcp]`: the MCP server (docs/mcp.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Milliseconds between `notifications/progress` of a waiting tool call.
    pub progress_ms: u64,
    /// Seconds an MCP request by a session counts it as connected.
    pub presence_secs: u64,
    /// MCP sessions (of the initialize-era revisions) the operator
    /// sessions hold at once, all together.
    pub max_sessions: u64,
    /// MCP sessions one credential (the admin token, one operator session)
    /// holds at once; the admin's count only against this share.
    pub max_sessions_per_credential: u64,
    /// Whether `tools/list` carries the upstream `mse_*` tool names as
    /// aliases (off: they are unknown tools).
    pub upstream_aliases: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            progress_ms: 5_000,
            presence_secs: 60,
            max_sessions: 256,
            max_sessions_per_credential: 32,
            upstream_aliases: false,
        }
    }
}

/// `[senior]`: who answers escalations (docs/tasks.md, Senior).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeniorConfig {
    /// An agent whose result answers the question (spawned as a sub-task).
    /// Unset: a session holding the role name `senior`, else the owning MainAI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Seconds to wait for an answer before the verdict stands.
    pub timeout_secs: u64,
}

impl Default for SeniorConfig {
    fn default() -> Self {
        SeniorConfig {
            agent: None,
            timeout_secs: 600,
        }
    }
}

/// `[lua]`: limits for every Lua run, agents and middleware alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LuaConfig {
    /// Memory limit per run, in MiB.
    pub memory_limit_mb: u64,
    /// Instruction budget per run (enforced by a hook).
    pub instruction_limit: u64,
    /// Wall-clock limit per run, in seconds.
    pub timeout_secs: u64,
    /// `[lua.middleware.NAME]`: middleware usable as layer `lua:NAME`.
    pub middleware: BTreeMap<String, LuaMiddleware>,
}

impl Default for LuaConfig {
    fn default() -> Self {
        LuaConfig {
            memory_limit_mb: 32,
            instruction_limit: 100_000_000,
            timeout_secs: 30,
            middleware: BTreeMap::new(),
        }
    }
}

/// `[lua.middleware.NAME]`: one Lua middleware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LuaMiddleware {
    /// The script defining `before(ctx)` and/or `after(ctx, result)`.
    pub script: PathBuf,
}

/// `[cluster]`: this node among several on one PostgreSQL database
/// (docs/configuration.md, `[cluster]`; docs/operations.md, Several nodes).
/// Only with `store.backend = "postgres"`; without the section such a
/// daemon is a cluster of one with these defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The node's stable id (a UUID); unset: generated once and kept in
    /// `<state_dir>/node_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The URL other nodes and clients reach this node at; unset: the
    /// daemon's base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_url: Option<String>,
    /// Seconds without a heartbeat after which the other nodes take this
    /// node's tasks over; it heartbeats every third of it.
    pub node_lease_secs: u64,
}

/// Default of `cluster.node_lease_secs`.
pub const DEFAULT_NODE_LEASE_SECS: u64 = 10;

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: None,
            advertise_url: None,
            node_lease_secs: DEFAULT_NODE_LEASE_SECS,
        }
    }
}

/// `[retention]`: pruning of finished work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Terminal tasks older than this many days are pruned with their output.
    pub days: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { days: 30 }
    }
}

/// `[spawner]`: settings shared by the process spawner's workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpawnerConfig {
    /// Seconds between SIGTERM and SIGKILL when a process group is stopped.
    pub kill_grace_secs: u64,
    /// Run each process agent under `swarmd supervise`, which kills the
    /// agent's process group if the daemon dies. Costs about 2 ms of CPU per
    /// spawn; where systemd already stops the service's whole cgroup
    /// (`KillMode=mixed`, the shipped unit) it may be turned off.
    pub supervise: bool,
    /// How long a task whose operator attempt has no session to take it
    /// waits for one (kept queued) when its policy sets no
    /// `queue_timeout_secs`.
    pub session_wait_secs: u64,
}

impl Default for SpawnerConfig {
    fn default() -> Self {
        SpawnerConfig {
            kill_grace_secs: 5,
            supervise: true,
            session_wait_secs: 600,
        }
    }
}
