//! The `swarmd` daemon binary: its assembly from the configuration
//! (`daemon`), the state directory, systemd integration, the CLI, and
//! `run`, which serves the API (`swarmd-api`) and the MCP server
//! (`swarmd-mcp`) on a bound listener until the shutdown token fires.
//!
//! `commands::serve` builds what `run` needs (config, state, systemd
//! notifier, shutdown token, listener) and passes it in; nothing here reads
//! the process environment or installs a global subscriber. The tests in
//! `tests.rs` call `run` with a listener on `127.0.0.1:0`.

mod accept;
pub mod cli;

pub mod commands;
pub mod daemon;
pub mod shutdown;
pub mod state;
pub mod systemd;
pub mod telemetry;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::PreparedState;
use crate::systemd::{SelfCheck, Systemd};
use swarmd_config::environment::Environment;
use swarmd_config::{Config, StoreBackend};

/// What `run` needs besides the listener and the shutdown token.
#[derive(Debug)]
pub struct Startup {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// The prepared state directory, keyring and admin token digest.
    pub state: PreparedState,
    /// Where readiness goes, and the watchdog interval (`Systemd::default()`
    /// in tests: no notifications).
    pub systemd: Systemd,
    /// The daemon's environment snapshot (process agents' allow-lists and
    /// `PATH` lookups read it; nothing else does).
    pub env: Environment,
}

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("listener has no local address: {0}")]
    LocalAddr(#[source] io::Error),
    #[error(transparent)]
    Build(#[from] daemon::BuildError),
    #[error("server failed: {0}")]
    Serve(#[source] io::Error),
}

/// How long the shutdown waits for the daemon's background tasks (event
/// router, idle sweep, ops workers) once the sockets are closed.
const TASKS_GRACE: Duration = Duration::from_secs(5);
/// How long the shutdown waits for the session mail still queued on a
/// cluster node (replies, hand-overs) to be written.
const MAIL_GRACE: Duration = Duration::from_secs(5);

/// Binds the listener for `addr` (port 0 picks a free port).
///
/// # Errors
/// `Bind` with the address and the OS error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// The lines after `listening on`: where the dashboard is and how to get the
/// admin token to sign in with: `--config` when this daemon's file is not
/// the one found by default, and `--state-dir` when the token is the state
/// directory's and a client reading that file in its own environment would
/// look in another directory (the daemon's came from `$STATE_DIRECTORY`,
/// `SWARMD_STORE__STATE_DIR` or `--state-dir`).
fn start_hint(base_url: &str, config: &Config, env: &Environment) -> String {
    let found = swarmd_config::ConfigPath::search(None, env);
    let mut flags = String::new();
    if let Some(path) = config.source.as_deref()
        && found != swarmd_config::ConfigPath::IfPresent(path.to_owned())
    {
        flags.push_str(&format!(" --config {}", path.display()));
    }
    if matches!(
        state::SecretSource::for_admin_token(config, env),
        state::SecretSource::StateDir(_)
    ) && client_state_dir(config, env).as_deref() != Some(config.store.state_dir.as_path())
    {
        flags.push_str(&format!(
            " --state-dir {}",
            config.store.state_dir.display()
        ));
    }
    format!(
        "dashboard: {}/ui\nsign in with the admin token: swarmd admin-token{flags}",
        base_url.trim_end_matches('/')
    )
}

/// The state directory `swarmd admin-token --config <this file>` resolves
/// in a person's shell: the file read with only the per-user places of the
/// environment (`HOME`, `XDG_STATE_HOME`), none of a service's.
fn client_state_dir(config: &Config, env: &Environment) -> Option<std::path::PathBuf> {
    let shell = Environment::from_pairs(
        ["HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"]
            .into_iter()
            .filter_map(|name| env.get(name).map(|value| (name, value.to_owned()))),
    );
    let path = match config.source.as_deref() {
        Some(path) => swarmd_config::ConfigPath::Explicit(path.to_owned()),
        None => swarmd_config::ConfigPath::search(None, &shell),
    };
    Config::load(&path, &shell, &swarmd_config::Overrides::default())
        .ok()
        .map(|config| config.store.state_dir)
}

/// Assembles the daemon, recovers, serves on `listener` until `shutdown`
/// fires, then drains (docs/operations.md):
///
/// 1. `READY=1` only once the listener is bound and recovery is done;
/// 2. on shutdown: new tasks get 503 `draining`, systemd hears
///    `STOPPING=1`, running attempts get `server.shutdown_grace_secs` to
///    finish while the HTTP API keeps serving their workers;
/// 3. then the engine stops what is left (recovery picks it up at the next
///    start), sockets close, the HTTP server stops, the background tasks
///    end (bounded by `TASKS_GRACE`), a cluster node's queued session mail
///    is written (bounded by `MAIL_GRACE`), the store is flushed.
///
/// # Errors
/// `LocalAddr` if the listener is unusable, `Build` if the daemon cannot be
/// assembled or recovered, `Serve` if accepting fails.
pub async fn run(
    startup: Startup,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let config = startup.config;
    let base_url = config.base_url(addr);
    let built = daemon::build(
        config.clone(),
        startup.state,
        &startup.env,
        addr,
        shutdown.clone(),
    )
    .await?;
    let app = built.app;
    let engine = app.engine.clone();
    app.tasks.spawn({
        let app = app.clone();
        async move {
            let clock = app.engine.clock();
            let read = || {
                swarmd_api::history::Totals::read(
                    &app.engine,
                    app.metrics.store(),
                    app.metrics.postgres(),
                )
            };
            let history = app.metrics.history();
            history
                .sample(app.shutdown.clone(), || clock.now_ms(), read)
                .await;
        }
    });
    tracing::info!(%addr, %base_url, "listening");
    telemetry::notice(&format!("listening on http://{addr}"));
    if built.recovery.continued > 0 {
        telemetry::notice(&format!(
            "resuming {} coding attempt(s) the last stop interrupted, in their sessions and on their branches",
            built.recovery.continued
        ));
    }
    telemetry::notice(&start_hint(&base_url, &config, &startup.env));

    let http_stop = CancellationToken::new();
    let router = swarmd_api::router(app.clone(), swarmd_mcp::routes(&app));
    let limits = accept::ConnLimits::resolve(
        &config.server,
        config.limits.max_running,
        accept::raise_nofile(),
    );
    tracing::debug!(
        max = limits.max,
        per_peer = limits.per_peer,
        "connection caps"
    );
    let accepting = accept::Accepting::default();
    let serving = tokio::spawn(accept::serve(
        listener,
        router.clone(),
        limits,
        app.metrics.guards(),
        accepting.clone(),
        http_stop.clone(),
    ));
    app.tasks.spawn({
        let app = app.clone();
        async move { sweep_rates(&app).await }
    });

    let notifier = &startup.systemd.notifier;
    if let Err(error) = notifier.notify_ready() {
        tracing::warn!(%error, "cannot notify systemd of readiness");
    }
    startup.systemd.start_watchdog(
        self_check(router, accepting, engine.clone()),
        shutdown.clone(),
        &app.tasks,
    );

    shutdown.cancelled().await;
    tracing::info!("draining");
    engine.start_draining();
    if let Err(error) = notifier.notify_stopping() {
        tracing::warn!(%error, "cannot notify systemd of stopping");
    }
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let (_, running) = engine.load();
    let clustered = config.store.backend == StoreBackend::Postgres;
    telemetry::notice(&shutdown::drain_notice(
        running,
        app.sessions.connected(),
        grace,
        clustered,
    ));
    engine.shutdown(grace).await;
    if let Some(notice) = shutdown::drained_notice(engine.live_tasks(), clustered) {
        telemetry::notice(&notice);
    }
    built.cluster_stop.cancel();
    app.sessions.close_sockets();
    app.sessions.wait_sockets(Duration::from_secs(2)).await;
    http_stop.cancel();
    let served = match tokio::time::timeout(Duration::from_secs(5), serving).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(join)) => Err(io::Error::other(join)),
        Err(_) => {
            tracing::warn!("open connections did not close; dropping them");
            Ok(())
        }
    };
    app.tasks.close();
    if tokio::time::timeout(TASKS_GRACE, app.tasks.wait())
        .await
        .is_ok()
    {
        tracing::debug!("background tasks stopped");
    } else {
        tracing::warn!(
            left = app.tasks.len(),
            "background tasks did not stop in time"
        );
    }
    // Replies and hand-overs still queued for other nodes go out before
    // the database is closed: a dropped reply leaves its attempt waiting
    // out its lease.
    if !app.sessions.flush_mail(MAIL_GRACE).await {
        tracing::warn!("session mail still queued was not written in time");
    }
    if let Some(db) = built.db
        && let Err(error) = db.close()
    {
        tracing::error!(%error, "could not flush the store");
    }
    if let Some(db) = built.pg {
        db.close().await;
    }
    tracing::info!("stopped");
    served.map_err(ServeError::Serve)
}

/// How often keys of full rate buckets are forgotten.
const RATE_SWEEP: Duration = Duration::from_secs(10);

/// Forgets idle rate-limit keys until the daemon drains.
async fn sweep_rates(app: &swarmd_api::app::AppState) {
    let mut every = tokio::time::interval(RATE_SWEEP);
    loop {
        tokio::select! {
            () = app.shutdown.cancelled() => return,
            _ = every.tick() => app.guards.rates().sweep(),
        }
    }
}

/// The watchdog's self-check: the store answers a write round-trip, the
/// accept loop runs, and the router answers `/healthz` in-process.
///
/// The check does not connect through the listener: a flood of sockets
/// that fills the connection caps is refused at accept and must not read
/// as a hang and get the daemon restarted. A stalled runtime stops the
/// watchdog itself; a wedged store or router fails the check.
fn self_check(
    router: axum::Router,
    accepting: accept::Accepting,
    engine: swarmd_engine::Engine,
) -> SelfCheck {
    Arc::new(move || {
        let router = router.clone();
        let accepting = accepting.clone();
        let engine = engine.clone();
        Box::pin(async move {
            engine.healthcheck().await.is_ok() && accepting.get() && healthz(router).await
        })
    })
}

/// Whether the router answers `GET /healthz` with a success within 5 s.
async fn healthz(router: axum::Router) -> bool {
    use tower::ServiceExt;
    let request = axum::http::Request::get("/healthz")
        .header(axum::http::header::HOST, "localhost")
        .body(axum::body::Body::empty());
    let Ok(request) = request else {
        return false;
    };
    match tokio::time::timeout(Duration::from_secs(5), router.oneshot(request)).await {
        Ok(Ok(response)) => response.status().is_success(),
        Ok(Err(never)) => match never {},
        Err(_) => {
            tracing::warn!("self-check: the router did not answer /healthz in 5 s");
            false
        }
    }
}

#[cfg(test)]
mod tests;
