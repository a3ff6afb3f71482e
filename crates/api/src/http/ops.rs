//! Operations routes (docs/operations.md, Observing): `/healthz` (alive), `/readyz` (store
//! writable and not draining), `/metrics` (Prometheus text) and `/v1/status`.
//! `/v1/metrics/history` serves the overview's samples of the last minutes.
//! `/v1/healthz` is `/healthz` where the upstream `mse` client probes before
//! it reconnects its socket (docs/protocol.md, Upstream clients).

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::{Value, json};
use swarmd_engine::ErrorCode;
use swarmd_engine::gate::Verb;
use swarmd_engine::usage::UsageTotals;

use crate::app::AppState;
use crate::history::HistoryPage;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::Json;
use crate::http::extract::NoQuery;
use crate::metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;

/// A readiness probe that takes longer than this counts as not ready.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/metrics/history", get(history))
}

/// The overview's samples of the last minutes (docs/protocol.md, Metrics
/// history).
async fn history(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
) -> Result<Json<HistoryPage>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    Ok(Json(state.metrics.history().page()))
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.engine.is_draining() {
        return Err(ApiError::coded(
            ErrorCode::Draining,
            "the daemon is draining",
        ));
    }
    match tokio::time::timeout(READY_TIMEOUT, state.engine.healthcheck()).await {
        Ok(Ok(())) => Ok(Json(json!({ "status": "ready" }))),
        Ok(Err(error)) => {
            tracing::warn!(%error, "readiness check failed");
            Err(ApiError::coded(
                ErrorCode::NotReady,
                "the store is not writable",
            ))
        }
        Err(_) => {
            tracing::warn!("readiness check timed out");
            Err(ApiError::coded(
                ErrorCode::NotReady,
                "the store did not answer in time",
            ))
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state
        .metrics
        .render(&state.engine, state.sessions.connected())
        .map_err(|e| ApiError::internal(&e))?;
    Ok(([(CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response())
}

/// `GET /v1/status`.
#[derive(Debug, Serialize)]
struct Status {
    version: &'static str,
    uptime_secs: u64,
    bind: String,
    base_url: String,
    store: StoreStatus,
    draining: bool,
    /// The seq of the last durable event: list tasks after reading it, then
    /// follow `/v1/events` from it, and nothing is missed or seen twice.
    event_seq: u64,
    /// Who the credential is (the dashboard shows cancel only where allowed).
    caller: CallerStatus,
    counts: Counts,
    /// Tokens and cost workers reported since start, by agent.
    usage: std::collections::BTreeMap<String, UsageTotals>,
    /// On a cluster (the PostgreSQL store): this node and every live one.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterStatus>,
}

#[derive(Debug, Serialize)]
struct ClusterStatus {
    node_id: String,
    /// Each live node's id and the URL its peers reach it at.
    nodes: Vec<swarmd_client::wire::NodeMember>,
}

#[derive(Debug, Serialize)]
struct CallerStatus {
    role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    sid: Option<String>,
}

#[derive(Debug, Serialize)]
struct StoreStatus {
    backend: String,
    state_dir: String,
}

#[derive(Debug, Serialize)]
struct Counts {
    queued: usize,
    running: usize,
    live_tasks: usize,
    sessions: usize,
    sessions_connected: usize,
    tasks_created: u64,
    tasks_finished: Value,
}

async fn status(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
) -> Result<Json<Status>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let (queued, running) = state.engine.load();
    let stats = state.engine.stats();
    let finished: serde_json::Map<String, Value> = stats
        .tasks_finished()
        .into_iter()
        .map(|(status, count)| (status.as_str().to_owned(), Value::from(count)))
        .collect();
    let cluster = match &state.cluster {
        Some(forwarder) => {
            let alive = forwarder
                .alive_nodes()
                .await
                .map_err(|error| ApiError::internal(&error))?;
            Some(ClusterStatus {
                node_id: forwarder.node().to_string(),
                nodes: alive
                    .into_iter()
                    .map(|(id, url)| swarmd_client::wire::NodeMember {
                        id: id.to_string(),
                        url,
                    })
                    .collect(),
            })
        }
        None => None,
    };
    let backend = serde_json::to_value(state.config.store.backend)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok(Json(Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_secs: state.started.elapsed().as_secs(),
        bind: state.bound.to_string(),
        base_url: state.base_url.clone(),
        store: StoreStatus {
            backend,
            state_dir: state.config.store.state_dir.display().to_string(),
        },
        draining: state.engine.is_draining(),
        event_seq: state.engine.last_event_seq(),
        caller: CallerStatus {
            role: caller.role().to_string(),
            sid: caller.session().map(|s| s.sid.to_string()),
        },
        counts: Counts {
            queued,
            running,
            live_tasks: state.engine.live_tasks(),
            sessions: state.sessions.list().len(),
            sessions_connected: state.sessions.connected(),
            tasks_created: stats
                .tasks_created
                .load(std::sync::atomic::Ordering::Relaxed),
            tasks_finished: Value::Object(finished),
        },
        usage: stats.usage.by_agent(),
        cluster,
    }))
}
