//! The shared state every HTTP handler and WebSocket session sees: built once
//! by the composition root and passed in, never global.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use swarmd_engine::Engine;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http::guard::Guards;
use crate::metrics::Metrics;
use crate::state::AdminTokenDigest;
use swarmd_config::Config;
use swarmd_sessions::SessionRegistry;
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
    pub(crate) cluster: Option<crate::cluster::Forwarder>,
    /// Git on the branches coding tasks leave (`http::branches`), run with
    /// the daemon's `PATH` and `HOME`.
    pub branches: swarmd_spawner::worktree::branches::Branches,
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
