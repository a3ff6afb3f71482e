//! `GET /v1/agents`: each configured agent's kind and concurrency, its tasks
//! running and queued now, and its outcomes and durations over its most
//! recent tasks (docs/protocol.md, Agents), for the dashboard's agents view.
//!
//! Everything is read from the task store, bounded: one list of running and
//! one of queued tasks (at most `WINDOW` each, counted by agent), then one
//! list of each agent's newest `WINDOW` tasks. So the numbers survive a
//! restart, and a count at `WINDOW` means "at least".

use std::collections::HashMap;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use swarmd_engine::gate::Verb;
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::{Task, TaskStatus};

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::Json;

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
    /// Tasks read per list; a count equal to it means at least that many.
    window: usize,
    truncated: bool,
}

#[derive(Debug, Serialize)]
struct AgentView {
    name: String,
    kind: &'static str,
    /// Attempts at once; `None` is unlimited.
    concurrency: Option<u32>,
    enabled: bool,
    running: usize,
    queued: usize,
    /// Over the agent's newest `window` tasks that are finished.
    recent: Recent,
}

#[derive(Debug, Default, Serialize)]
struct Recent {
    finished: usize,
    pass: usize,
    blocked: usize,
    failed: usize,
    cancelled: usize,
    /// From creation to finish, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_ms: Option<u64>,
}

impl Recent {
    fn of(tasks: &[Task]) -> Recent {
        let mut recent = Recent::default();
        let mut durations = Vec::new();
        for task in tasks {
            let slot = match task.status() {
                TaskStatus::Pass => &mut recent.pass,
                TaskStatus::Blocked => &mut recent.blocked,
                TaskStatus::Failed => &mut recent.failed,
                TaskStatus::Cancelled => &mut recent.cancelled,
                TaskStatus::Queued | TaskStatus::Running => continue,
            };
            *slot += 1;
            recent.finished += 1;
            if let Some(end) = task.finished_ms {
                durations.push(end.saturating_sub(task.created_ms));
            }
        }
        durations.sort_unstable();
        recent.p50_ms = quantile(&durations, 50);
        recent.p99_ms = quantile(&durations, 99);
        recent
    }
}

/// The nearest-rank `pct`th percentile of sorted values.
fn quantile(sorted: &[u64], pct: usize) -> Option<u64> {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

async fn agents(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AgentsPage>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let by_agent = |tasks: Vec<Task>| {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for task in tasks {
            *counts.entry(task.agent).or_default() += 1;
        }
        counts
    };
    let list = |status: Option<TaskStatus>, agent: Option<String>| TaskFilter {
        status,
        agent,
        limit: WINDOW,
        ..TaskFilter::default()
    };
    let engine = &state.engine;
    let running = by_agent(
        engine
            .list_tasks(&list(Some(TaskStatus::Running), None))
            .await?,
    );
    let queued = by_agent(
        engine
            .list_tasks(&list(Some(TaskStatus::Queued), None))
            .await?,
    );
    let mut agents = Vec::new();
    for (name, agent) in state.config.agents.iter().take(MAX_AGENTS) {
        let newest = engine.list_tasks(&list(None, Some(name.clone()))).await?;
        agents.push(AgentView {
            name: name.clone(),
            kind: agent.kind.name(),
            concurrency: agent.concurrency,
            enabled: agent.enabled,
            running: running.get(name).copied().unwrap_or(0),
            queued: queued.get(name).copied().unwrap_or(0),
            recent: Recent::of(&newest),
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
    use super::quantile;

    #[test]
    fn nearest_rank_quantiles() {
        assert_eq!(quantile(&[], 50), None);
        assert_eq!(quantile(&[7], 99), Some(7));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&hundred, 50), Some(50));
        assert_eq!(quantile(&hundred, 99), Some(99));
        assert_eq!(quantile(&[1, 2, 3], 50), Some(2));
        assert_eq!(quantile(&[1, 2, 3], 99), Some(3));
    }
}
