//! The shared state every HTTP handler and WebSocket session sees: built once
//! by the composition root and passed in, never global; with the admin
//! token's digest it holds and the session settings read from the
//! configuration.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use swarmd_engine::Engine;
use swarmd_engine::auth::{SessionSecret, digests_equal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http::guard::Guards;
use crate::metrics::Metrics;
use swarmd_config::Config;
use swarmd_sessions::SessionRegistry;
use swarmd_sessions::SessionSettings;
use swarmd_sessions::dialect::UpstreamAttempts;

/// A cheap-to-clone handle on the daemon's state (axum `State`).
#[derive(Debug, Clone)]
pub struct AppState(Arc<AppInner>);

#[derive(Debug)]
pub struct AppInner {
    pub engine: Engine,
    pub sessions: Arc<SessionRegistry>,
    pub config: Arc<Config>,
    pub admin: AdminTokenDigest,
    /// The address the listener is bound to (the real port when `bind` asked for 0).
    pub bound: std::net::SocketAddr,
    /// The URL SubAgents use to reach this daemon (docs/protocol.md, The spawn directive).
    pub base_url: String,
    pub started: Instant,
    /// Fired when the daemon starts draining.
    pub shutdown: CancellationToken,
    /// The daemon's own background tasks (event router, idle sweep, each
    /// connection's ops worker): `run` closes it and waits for them before
    /// the store is flushed.
    pub tasks: TaskTracker,
    /// HTTP-side metrics; `GET /metrics` adds the engine's at scrape time.
    pub metrics: Metrics,
    /// The checks every request passes before its handler: `Host`,
    /// `Origin`, rates, the body's deadline.
    pub guards: Guards,
    /// The attempts whose `spawn` went to an upstream-dialect session
    /// (docs/protocol.md, Upstream clients): their `submit` answers `204`.
    pub upstream_attempts: UpstreamAttempts,
    /// Remote agents' attempts, queued for and held by worker pools
    /// (docs/protocol.md, Worker pools).
    pub remote: Arc<swarmd_spawner::remote::RemotePools>,
    /// Flow runs (docs/flows.md): the flows offered and the runs in flight.
    pub runner: swarmd_flow_run::Runner,
    /// On PostgreSQL: forwards a request about a live task another node
    /// holds to that node (docs/decisions.md, Cluster).
    pub cluster: Option<swarmd_cluster::Forwarder>,
    /// Git on the branches coding tasks leave (`http::branches`), run with
    /// the daemon's `PATH` and `HOME`.
    pub branches: swarmd_git::worktree::branches::Branches,
}

impl AppState {
    pub fn new(inner: AppInner) -> Self {
        AppState(Arc::new(inner))
    }
}

impl Deref for AppState {
    type Target = AppInner;

    fn deref(&self) -> &AppInner {
        &self.0
    }
}

/// SHA-256 of the admin token. `Debug` shows nothing of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AdminTokenDigest([u8; 32]);

impl AdminTokenDigest {
    /// The digest of `secret`.
    pub fn of(secret: &SessionSecret) -> AdminTokenDigest {
        AdminTokenDigest(secret.digest())
    }

    /// A digest stored elsewhere (the database's `admin_token.digest`).
    pub fn from_bytes(digest: [u8; 32]) -> AdminTokenDigest {
        AdminTokenDigest(digest)
    }

    /// The raw digest, for a constant-time comparison elsewhere.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether `presented` is the admin token (constant time).
    pub fn matches(&self, presented: &SessionSecret) -> bool {
        digests_equal(&presented.digest(), &self.0)
    }
}

impl fmt::Debug for AdminTokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminTokenDigest(<redacted>)")
    }
}

/// What the session registry reads from the configuration: `ws.park_max`,
/// `auth.session_idle_secs`, `auth.role_takeover_secs` and
/// `limits.max_operator_sessions`.
pub fn session_settings(config: &Config) -> SessionSettings {
    SessionSettings {
        park_max: usize::try_from(config.ws.park_max).unwrap_or(usize::MAX),
        idle: std::time::Duration::from_secs(config.auth.session_idle_secs),
        takeover: std::time::Duration::from_secs(config.auth.role_takeover_secs),
        max_sessions: usize::try_from(config.limits.max_operator_sessions).unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sessions crate's test settings are the default configuration's,
    /// so its tests run what a default daemon runs.
    #[test]
    fn the_default_session_settings_are_the_sessions_tests_defaults() {
        assert_eq!(
            session_settings(&Config::default()),
            swarmd_sessions::testing::default_settings()
        );
    }
}
