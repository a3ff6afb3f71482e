//! The HTTP API (docs/protocol.md): routes, authentication, extractors, middleware
//! and error mapping, assembled by `router`.
//!
//! Route groups live in their own files (`worker`, `pool`, `tasks`, `output`,
//! `events`, `ops`, and the operator sessions in `operators`); `error` is
//! the one place errors become status + `{error, code}`, and `extract` makes
//! bad input land there too.

mod agents;
pub mod auth;
mod blobs;
pub(crate) mod branches;
pub mod error;
pub mod extract;
pub(crate) mod flows;
pub mod guard;
pub mod layers;
pub mod operators;
pub mod sse;

mod events;
mod ops;
pub(crate) mod output;
pub(crate) mod pool;
pub(crate) mod tasks;
pub(crate) mod ui;
pub(crate) mod views;
pub(crate) mod worker;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header::AUTHORIZATION;
use axum::middleware;
use swarmd_engine::ErrorCode;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;

use crate::app::AppState;
use crate::http::error::ApiError;

pub use tasks::MAX_WAIT_SECS;

/// The whole API with its middleware.
///
/// Layers, outermost first (they run after routing, so spans and counts know
/// the route):
/// 1. a panicking handler answers 500 with a correlation id;
/// 2. `Authorization` marked sensitive, so nothing below can log it;
/// 3. the request span (method and path; no headers, no query), and status
///    and latency logged at debug level when it answers;
/// 4. request counts by route and status;
/// 5. any error answer without a JSON body gets `{error, code}`;
/// 6. the guards (`guard`): `Host`, `Origin`, the write rate, the body's
///    deadline;
/// 7. a declared body over `limits.max_body_bytes` answers 413 before any
///    handler sees it; `DefaultBodyLimit` cuts undeclared ones in the
///    extractors;
/// 8. on a cluster node, a request about a live task another node holds is
///    forwarded to it (`cluster::forward`).
///
/// Operator login from loopback needs the peer address: serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn router(state: AppState) -> Router {
    let limit = state.config.limits.max_body_bytes;
    let extractor_limit = usize::try_from(limit).unwrap_or(usize::MAX);
    // `CatchPanicLayer` changes the body type, so it wraps the stack from outside.
    let middleware = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([AUTHORIZATION]))
        .layer(layers::trace_layer())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            layers::count_requests,
        ))
        .layer(middleware::map_response(layers::json_errors))
        .layer(middleware::from_fn_with_state(state.clone(), guard::guard))
        .layer(middleware::from_fn_with_state(
            limit,
            layers::declared_length,
        ))
        .layer(DefaultBodyLimit::max(extractor_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::cluster::forward,
        ));
    Router::new()
        .merge(worker::routes())
        .merge(pool::routes())
        .merge(tasks::routes())
        .merge(output::routes())
        .merge(blobs::routes())
        .merge(events::routes())
        .merge(ops::routes())
        .merge(operators::routes())
        .merge(agents::routes())
        .merge(branches::routes())
        .merge(flows::routes())
        .merge(ui::routes())
        .merge(crate::mcp::routes(&state))
        .fallback(not_found)
        .layer(middleware)
        .layer(CatchPanicLayer::custom(layers::panic_response))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::coded(ErrorCode::NotFound, "no such route")
}

#[cfg(test)]
mod tests;
