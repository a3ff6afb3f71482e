//! Pool routes (docs/protocol.md, Worker pools): a worker pool on another machine claims the
//! attempts of its remote agents by long-poll, and heartbeats the ones it
//! runs; on a cluster it asks any node where every live node is
//! (`/v1/pool/nodes`), since each node queues the attempts it dispatches;
//! a pool that reaches it through one URL names the node it means in
//! `x-swarmd-node`, and `cluster::forward` takes the request there.
//! All take a `worker_pool` token bound to the agents; everything an
//! attempt writes goes through the worker routes with the attempt's own
//! handle, never through these.
//!
//! A claim and a heartbeat renew each attempt's lease with that attempt's
//! credential, through the engine's own worker heartbeat, so a superseded or
//! decided attempt is refused exactly as its SubAgent would be, and it is
//! reported `gone`.

use std::collections::HashSet;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::AttemptId;
use swarmd_spawner::process::{stdin_name, stream_name};
use swarmd_spawner::remote::{Claimed, PoolEnd, Unanswered};

use crate::app::AppState;
use crate::http::auth::PoolCaller;
use crate::http::error::ApiError;
use crate::http::extract::RawBody;
use crate::http::worker::parse_json;
use swarmd_client::wire::{
    self, AttemptRef, ClaimAnswer, ClaimRequest, ClaimedAttempt, HeartbeatAnswer, HeartbeatRequest,
    MAX_CLAIM, MAX_HELD, MAX_REASON, MAX_WAIT_MS, NodeMember, NodesAnswer,
};

/// The pool routes, to be merged into the API router.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/pool/claim", post(claim))
        .route("/v1/pool/heartbeat", post(heartbeat))
        .route("/v1/pool/nodes", get(nodes))
}

/// Where a pool reaches every live node of this daemon's cluster (their
/// `cluster.advertise_url`s, this node's included); empty outside one.
async fn nodes(
    State(state): State<AppState>,
    caller: PoolCaller,
) -> Result<Json<NodesAnswer>, ApiError> {
    let Some(first) = caller.agents.first() else {
        return Err(ApiError::forbidden());
    };
    caller.check(&state, Verb::ClaimAttempts, first)?;
    let alive = match &state.cluster {
        Some(cluster) => cluster
            .alive_nodes()
            .await
            .map_err(|error| ApiError::internal(&error))?,
        None => Vec::new(),
    };
    let members: Vec<NodeMember> = alive
        .into_iter()
        .map(|(id, url)| NodeMember {
            id: id.to_string(),
            url,
        })
        .collect();
    let nodes = members.iter().map(|m| m.url.clone()).collect();
    Ok(Json(NodesAnswer { nodes, members }))
}

fn check_pool(pool: &str) -> Result<(), ApiError> {
    if wire::valid_pool_id(pool) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "pool must be 1 to {} ASCII letters, digits, '-' or '_'",
            wire::MAX_POOL_ID
        )))
    }
}

fn check_wait(wait_ms: u64) -> Result<Duration, ApiError> {
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms must be at most {MAX_WAIT_MS}"
        )));
    }
    Ok(Duration::from_millis(wait_ms))
}

async fn claim(
    State(state): State<AppState>,
    caller: PoolCaller,
    RawBody(body): RawBody,
) -> Result<Json<ClaimAnswer>, ApiError> {
    let request: ClaimRequest = parse_json(&body)?;
    caller.check(&state, Verb::ClaimAttempts, &request.agent)?;
    check_pool(&request.pool)?;
    if request.max == 0 || request.max > MAX_CLAIM {
        return Err(ApiError::bad_request(format!(
            "max must be 1 to {MAX_CLAIM}"
        )));
    }
    let wait = check_wait(request.wait_ms)?;
    let is_remote = state
        .config
        .agents
        .get(&request.agent)
        .is_some_and(|a| a.kind.name() == "remote");
    if !is_remote {
        return Err(ApiError::not_found(format!(
            "remote agent {}",
            request.agent
        )));
    }
    let max = request.max as usize;
    let claimed = tokio::select! {
        claimed = state.remote.claim(&request.agent, &request.pool, max, wait) => claimed,
        () = state.shutdown.cancelled() => Vec::new(),
    };
    // Until the answer is made, a request that goes away (the pool's
    // client timed out, a forwarding node died) puts its attempts back.
    let unanswered = Unanswered::new(&state.remote, &request.pool, &claimed);
    let mut attempts = Vec::with_capacity(claimed.len());
    for one in claimed {
        if let Some(attempt) = renewed(&state, one).await {
            attempts.push(attempt);
        }
    }
    unanswered.answered();
    Ok(Json(ClaimAnswer { attempts }))
}

/// The claimed attempt as the pool gets it, its lease renewed; `None` when
/// it was superseded or decided meanwhile (its worker takes it out of the
/// pool's hands).
async fn renewed(state: &AppState, claimed: Claimed) -> Option<ClaimedAttempt> {
    let job = claimed.job;
    let deadline = renew(state, job.attempt, job.credential.handle()).await?;
    let now_ms = state.engine.clock().now_ms();
    Some(ClaimedAttempt {
        task_id: job.attempt.task,
        attempt: job.attempt.n,
        agent: job.agent.clone(),
        handle: job.credential.handle().to_owned(),
        prompt: job.prompt.clone(),
        system: job.system.clone(),
        input: job.input.clone(),
        stdin: stdin_name(job.run.stdin).to_owned(),
        stream: stream_name(job.run.stream).to_owned(),
        timeout_ms: job
            .run
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        max_output_bytes: job.run.max_output_bytes,
        lease_ms: deadline.saturating_sub(now_ms),
        lease_deadline_ms: deadline,
        continued_from: job.continued_from.clone(),
        resume_session: job.resume_session.clone(),
        resume_branch: job.resume_from.as_ref().map(|p| p.branch.clone()),
        resume_head: job.resume_from.as_ref().and_then(|p| p.head.clone()),
    })
}

/// Renews `attempt`'s lease with its own handle; its new deadline (unix ms),
/// or `None` when the attempt is no longer the open one.
async fn renew(state: &AppState, attempt: AttemptId, handle: &str) -> Option<u64> {
    let auth = state
        .engine
        .authenticate_worker(handle, Verb::Heartbeat)
        .ok()?;
    debug_assert_eq!(auth.attempt, attempt);
    state
        .engine
        .heartbeat(&auth, Some(attempt.task))
        .await
        .ok()
        .map(|ack| ack.deadline)
}

async fn heartbeat(
    State(state): State<AppState>,
    caller: PoolCaller,
    RawBody(body): RawBody,
) -> Result<Json<HeartbeatAnswer>, ApiError> {
    let request: HeartbeatRequest = parse_json(&body)?;
    check_pool(&request.pool)?;
    if request.held.len() + request.ended.len() > MAX_HELD {
        return Err(ApiError::bad_request(format!(
            "held and ended name at most {MAX_HELD} attempts together"
        )));
    }
    if request.ended.iter().any(|e| e.reason.len() > MAX_REASON) {
        return Err(ApiError::bad_request(format!(
            "a reason is at most {MAX_REASON} bytes"
        )));
    }
    let wait = check_wait(request.wait_ms)?;
    // The gate first, with no agent: a token without the verb is refused
    // even for an empty heartbeat.
    let Some(first) = caller.agents.first() else {
        return Err(ApiError::forbidden());
    };
    caller.check(&state, Verb::RenewLeases, first)?;
    for ended in &request.ended {
        let attempt = AttemptId::new(ended.task_id, ended.attempt);
        if let Some((job, _)) = state.remote.held(attempt) {
            caller.check(&state, Verb::RenewLeases, &job.agent)?;
        }
        // An attempt the pool no longer holds has ended anyway.
        let _ = state.remote.report(
            &request.pool,
            attempt,
            PoolEnd::Failed(ended.reason.clone()),
        );
    }
    let mut gone = Vec::new();
    let mut live = Vec::new();
    let mut seen = HashSet::new();
    for held in request.held.iter().filter(|h| seen.insert(**h)) {
        let attempt = AttemptId::new(held.task_id, held.attempt);
        let Some((job, pool)) = state.remote.held(attempt) else {
            gone.push(*held);
            continue;
        };
        caller.check(&state, Verb::RenewLeases, &job.agent)?;
        if pool != request.pool {
            gone.push(*held);
            continue;
        }
        match renew(&state, attempt, job.credential.handle()).await {
            Some(_) => live.push(attempt),
            None => gone.push(*held),
        }
    }
    if gone.is_empty() && !live.is_empty() {
        let went = tokio::select! {
            went = state.remote.wait_gone(&request.pool, &live, wait) => went,
            () = state.shutdown.cancelled() => Vec::new(),
        };
        gone.extend(went.into_iter().map(|a| AttemptRef {
            task_id: a.task,
            attempt: a.n,
        }));
    }
    Ok(Json(HeartbeatAnswer { gone }))
}
