//! `GET /v1/agents`: each configured agent's kind, concurrency and source
//! (the file or environment it was defined in), its tasks
//! running and queued now, and its outcomes and durations since the daemon
//! started (docs/protocol.md, Agents), for the dashboard's agents view.
//!
//! Running and queued are counted in the task store, bounded: the newest
//! `WINDOW` running and the newest `WINDOW` queued tasks, counted by agent
//! with only their agent read (a count at `WINDOW` means "at least"). Outcomes and durations
//! are the engine's own counters (`EngineStats::agents`), kept as tasks
//! finish: exact since start, and zero again after a restart.

use std::path::Path;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use swarmd_engine::gate::Verb;
use swarmd_engine::metrics::AgentCounters;
use swarmd_engine::task::TaskStatus;

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::Json;
use crate::http::extract::NoQuery;
use swarmd_config::AgentOrigin;

/// Tasks read per list: the cap of every count here.
const WINDOW: usize = 1000;
/// Agents described per answer (by name); more set `truncated`.
const MAX_AGENTS: usize = 100;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/agents", get(agents))
}

#[derive(Debug, Serialize)]
struct AgentsPage {
    agents: Vec<AgentView>,
    /// Tasks read per list of running and of queued tasks; a count equal to
    /// it means at least that many.
    window: usize,
    truncated: bool,
}

#[derive(Debug, Serialize)]
struct AgentView {
    name: String,
    kind: &'static str,
    /// What the agent does (`description`), when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Attempts at once; `None` is unlimited.
    concurrency: Option<u32>,
    enabled: bool,
    /// Where the agent was defined: the agent file's path, the
    /// configuration file's path, or `environment`.
    source: String,
    /// `agent_file`, `config_file` or `environment`.
    source_kind: &'static str,
    running: usize,
    queued: usize,
    /// Its tasks finished since the daemon started.
    since_start: SinceStart,
}

#[derive(Debug, Default, Serialize)]
struct SinceStart {
    finished: u64,
    pass: u64,
    blocked: u64,
    failed: u64,
    cancelled: u64,
    /// From creation to finish: the upper bound, in milliseconds, of the
    /// histogram bucket (`TASK_BUCKETS`) that holds the quantile; absent
    /// when nothing finished or when it is past the last bound (an hour).
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_le_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_le_ms: Option<u64>,
}

impl SinceStart {
    fn of(counters: Option<&AgentCounters>) -> SinceStart {
        let Some(counters) = counters else {
            return SinceStart::default();
        };
        let [pass, blocked, failed, cancelled] = counters.by_status();
        let counts = counters.durations.counts();
        let bounds = counters.durations.bounds();
        SinceStart {
            finished: pass + blocked + failed + cancelled,
            pass,
            blocked,
            failed,
            cancelled,
            p50_le_ms: bucket_bound_ms(bounds, &counts, 50),
            p99_le_ms: bucket_bound_ms(bounds, &counts, 99),
        }
    }
}

/// Where an agent was defined, as `source` shows it.
fn source_of(origin: &AgentOrigin, config_file: Option<&Path>) -> String {
    match (origin, config_file) {
        (AgentOrigin::AgentFile(path), _) => path.display().to_string(),
        (AgentOrigin::ConfigFile, Some(path)) => path.display().to_string(),
        (AgentOrigin::ConfigFile, None) | (AgentOrigin::Env, _) => "environment".to_owned(),
    }
}

/// The upper bound (ms) of the bucket holding the nearest-rank `pct`th
/// percentile of per-bucket `counts` (+Inf last, which has no bound).
fn bucket_bound_ms(bounds: &[f64], counts: &[u64], pct: u64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    let rank = (total * pct).div_ceil(100).max(1);
    let mut seen = 0;
    for (i, count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank && total > 0 {
            return bounds.get(i).map(|secs| (secs * 1000.0).round() as u64);
        }
    }
    None
}

async fn agents(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
) -> Result<Json<AgentsPage>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let engine = &state.engine;
    let running = engine.count_by_agent(TaskStatus::Running, WINDOW).await?;
    let queued = engine.count_by_agent(TaskStatus::Queued, WINDOW).await?;
    let mut agents = Vec::new();
    for (name, agent) in state.config.agents.iter().take(MAX_AGENTS) {
        agents.push(AgentView {
            name: name.clone(),
            kind: agent.kind.name(),
            description: agent.description.clone(),
            concurrency: agent.concurrency,
            enabled: agent.enabled,
            source: source_of(&agent.origin, state.config.source.as_deref()),
            source_kind: agent.origin.kind(),
            running: running.get(name).copied().unwrap_or(0),
            queued: queued.get(name).copied().unwrap_or(0),
            since_start: SinceStart::of(engine.stats().agents.get(name).as_deref()),
        });
    }
    Ok(Json(AgentsPage {
        agents,
        window: WINDOW,
        truncated: state.config.agents.len() > MAX_AGENTS,
    }))
}

#[cfg(test)]
mod tests {
    use super::bucket_bound_ms;

    #[test]
    fn quantiles_are_the_bound_of_their_bucket() {
        let bounds = [0.001, 0.01, 0.1];
        assert_eq!(bucket_bound_ms(&bounds, &[0, 0, 0, 0], 50), None);
        assert_eq!(bucket_bound_ms(&bounds, &[0, 1, 0, 0], 99), Some(10));
        // 98 fast, 2 slow: p50 and p99 fast; with 3 slow the p99 is slow.
        assert_eq!(bucket_bound_ms(&bounds, &[98, 0, 2, 0], 50), Some(1));
        assert_eq!(bucket_bound_ms(&bounds, &[98, 0, 2, 0], 99), Some(100));
        assert_eq!(bucket_bound_ms(&bounds, &[99, 0, 1, 0], 99), Some(1));
        // Past the last bound: no bound to give.
        assert_eq!(bucket_bound_ms(&bounds, &[0, 0, 0, 5], 50), None);
    }
}
