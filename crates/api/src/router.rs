//! The whole API as one axum router: the HTTP routes (`http`), the
//! WebSocket upgrade (`ws`) and the daemon's further routes, under one
//! stack of middleware.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header::AUTHORIZATION;
use axum::middleware;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;

use crate::app::AppState;
use crate::{http, ws};

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
/// 6. `DefaultBodyLimit`: the extractors cut a body without a declared
///    length at `limits.max_body_bytes`;
/// 7. admission (`http::layers::admit`), one middleware in three steps:
///    the guards (`http::guard`: `Host`, `Origin`, the write rate, the
///    body's deadline); a declared body over `limits.max_body_bytes`
///    answers 413 before any handler sees it; on a cluster node, a request
///    about a live task another node holds is forwarded to it
///    (`cluster::forward`).
///
/// `more` is mounted beside the API's own routes, under the same layers
/// (the daemon's MCP server at `/mcp`).
///
/// Operator login from loopback needs the peer address: serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn router(state: AppState, more: Router<AppState>) -> Router {
    let limit = state.config.limits.max_body_bytes;
    let extractor_limit = usize::try_from(limit).unwrap_or(usize::MAX);
    // `CatchPanicLayer` changes the body type, so it wraps the stack from outside.
    let middleware = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([AUTHORIZATION]))
        .layer(http::layers::trace_layer())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            http::layers::count_requests,
        ))
        .layer(middleware::map_response(http::layers::json_errors))
        .layer(DefaultBodyLimit::max(extractor_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            http::layers::admit,
        ));
    Router::new()
        .merge(http::routes())
        .merge(ws::routes())
        .merge(more)
        .fallback(http::not_found)
        .layer(middleware)
        .layer(CatchPanicLayer::custom(http::layers::panic_response))
        .with_state(state)
}
