//! `/mcp`: rmcp's Streamable HTTP service on the daemon's router, behind the
//! bearer check of the other routes.
//!
//! Every request is authenticated on its own (the admin token or an operator
//! session's `sws-` token; role tokens get 403) and the caller rides in the
//! request's extensions to the tool handler, which acts with its rights. A
//! session's request also counts it present (`mcp.presence_secs`). The
//! router's middleware (body limit, sensitive `Authorization`, counts, JSON
//! errors) applies as for any route; rmcp also cuts a body past
//! `limits.max_body_bytes` while streaming it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::transport::common::http_header::{HEADER_MCP_PROTOCOL_VERSION, HEADER_SESSION_ID};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use swarmd_engine::ErrorCode;

use tokio_util::sync::CancellationToken;

use super::{SwarmdTools, catalogue};
use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;

/// How long MCP streams outlive the start of a drain.
const STREAMS_GRACE: Duration = Duration::from_secs(1);

/// The `/mcp` route.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let limit = usize::try_from(state.config.limits.max_body_bytes).unwrap_or(usize::MAX);
    // Requests carry a bearer, so a page rebinding a name to this address
    // cannot call the tools: the Host allow-list (for credential-less local
    // servers) would only refuse clients that reach us by another name.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(limit)
        .with_cancellation_token(closing(state));
    let tools = Arc::new(catalogue());
    let for_service = state.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(SwarmdTools::new(for_service.clone(), tools.clone())),
        sessions.clone(),
        config,
    );
    let gate = Gate {
        state: state.clone(),
        sessions,
    };
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(gate, authorize))
}

/// What the middleware in front of rmcp needs.
#[derive(Clone)]
struct Gate {
    state: AppState,
    sessions: Arc<LocalSessionManager>,
}

impl Gate {
    /// Whether the request would open a session past `mcp.max_sessions`:
    /// one that names no session and no protocol revision (an
    /// initialize-era `initialize`) while the table is full.
    async fn over_capacity(&self, parts: &Parts) -> bool {
        let opens = parts.method == Method::POST
            && !parts.headers.contains_key(HEADER_SESSION_ID)
            && !parts.headers.contains_key(HEADER_MCP_PROTOCOL_VERSION);
        let max = usize::try_from(self.state.config.mcp.max_sessions).unwrap_or(usize::MAX);
        opens && self.sessions.sessions.read().await.len() >= max
    }
}

/// Fires `STREAMS_GRACE` after the daemon starts draining: a waiting tool
/// call ends at the drain and still sends what it has, then rmcp closes its
/// sessions and streams so the HTTP server can stop.
fn closing(state: &AppState) -> CancellationToken {
    let token = CancellationToken::new();
    let (shutdown, fire) = (state.shutdown.clone(), token.clone());
    state.tasks.spawn(async move {
        shutdown.cancelled().await;
        tokio::time::sleep(STREAMS_GRACE).await;
        fire.cancel();
    });
    token
}

/// Resolves the bearer as the HTTP routes do and hands the caller on;
/// refuses a new session past `mcp.max_sessions`.
async fn authorize(
    State(gate): State<Gate>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let state = &gate.state;
    let (mut parts, body) = request.into_parts();
    let caller = Caller::from_request_parts(&mut parts, state).await?;
    match &caller {
        Caller::Token { .. } => {
            state.metrics.token_failure("forbidden");
            return Err(ApiError::forbidden());
        }
        // Any request (a tool call, a ping, the event stream) keeps the
        // session present: MCP clients hold no socket (docs/mcp.md, Presence).
        Caller::Operator(session) => {
            let arrived = !session.connected();
            session.touch(state.engine.clock().now_ms());
            session.mark_present(Duration::from_secs(state.config.mcp.presence_secs));
            if arrived {
                state.engine.wake_waiting();
            }
        }
        Caller::Admin => {}
    }
    if gate.over_capacity(&parts).await {
        return Err(ApiError::coded(
            ErrorCode::TooManySessions,
            format!(
                "{} MCP sessions are open; close one or wait for idle ones to expire",
                state.config.mcp.max_sessions
            ),
        ));
    }
    parts.extensions.insert(caller);
    Ok(next.run(Request::from_parts(parts, body)).await)
}
