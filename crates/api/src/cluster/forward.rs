//! Request forwarding (docs/decisions.md, Cluster): a request about a live
//! task another node holds is proxied to that node's `advertise_url` and
//! its answer relayed; `route` decides which requests, and verifies their
//! credential before it looks an owner up.
//!
//! The request goes out with its method, its route's own path (rebuilt
//! from the route template, never the path that arrived) and its query,
//! end-to-end headers and the body read whole up to
//! `limits.max_body_bytes`, with `x-swarmd-forwarded-by: <this node>`; a request carrying that header is
//! never forwarded again. The answer comes back with its status, end-to-end
//! headers and body (streamed), plus `x-swarmd-forwarded-to: <owner node>`.
//! An owner that cannot be reached answers `503 owner_unavailable` with
//! `Retry-After`, and its failure is logged with the target it was sent
//! to (the owner's advertise URL and the route's path) and the error's
//! causes. `Authorization` is marked sensitive on the way out and nothing
//! here logs a header or a query.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use swarmd_cluster::route::{self, Caller, Route};
use swarmd_cluster::{FORWARDED_BY, FORWARDED_TO, Forwarder};
use swarmd_engine::ErrorCode;
use swarmd_engine::auth::SessionSecret;
use swarmd_engine::gate::Role;
use swarmd_postgres::TaskOwner;

use crate::app::AppState;
use crate::http::MAX_WAIT_SECS;
use crate::http::error::ApiError;
use swarmd_client::wire::MAX_WAIT_MS;

/// The outcomes `swarmd_cluster_forwarded_requests_total` counts.
pub(crate) const FORWARDED: &str = "forwarded";
pub(crate) const UNAVAILABLE: &str = "unavailable";

/// How long a forwarded request may take, except the long ones below.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// What an answer to `Retry-After` says, in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// Headers that describe one connection, not the request (RFC 9110
/// section 7.6.1), and those the client sets itself.
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The middleware on a cluster node (`http::layers::admit` calls it when
/// the daemon has a `forwarder`): serves here, forwards, or answers 503
/// (see `route`); a forwardable route on a path that is not its own
/// answers 400.
pub async fn forward(
    state: &AppState,
    forwarder: &Forwarder,
    request: Request,
    next: Next,
) -> Response {
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let asked = match route::asked(
        request.method(),
        template,
        request.uri().path(),
        request.headers(),
    ) {
        Ok(Some(asked)) => asked,
        Ok(None) => return next.run(request).await,
        Err(why) => return ApiError::bad_request(why).into_response(),
    };
    let verified = match asked.caller {
        Caller::Named => true,
        Caller::AdminOrSession => caller_verified(state, request.headers()).await,
        Caller::Pool => pool_verified(state, request.headers()),
    };
    if !verified {
        // Refused here, by the route's own authentication.
        return next.run(request).await;
    }
    let forwarded = request.headers().contains_key(FORWARDED_BY);
    match forwarder
        .route(&state.engine, &state.runner, &asked.subject, forwarded)
        .await
    {
        Route::Local => next.run(request).await,
        Route::Unavailable(why) => {
            state.metrics.forwarded(UNAVAILABLE);
            unavailable(why)
        }
        Route::NoSuchNode => no_such_node(),
        Route::Forward(owner) => {
            let limit = state.config.limits.max_body_bytes;
            let answer = relay(forwarder, &owner, request, &asked.path, limit).await;
            let forwarded = answer.headers().contains_key(FORWARDED_TO);
            state
                .metrics
                .forwarded(if forwarded { FORWARDED } else { UNAVAILABLE });
            answer
        }
    }
}

/// Whether the bearer is the admin token or the secret of a session this
/// node knows (read from the database by its digest, as the routes' own
/// authentication does): the callers a cancel serves.
async fn caller_verified(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(bearer) = route::bearer(headers) else {
        return false;
    };
    let Ok(secret) = SessionSecret::parse(bearer) else {
        return false;
    };
    if state.admin.matches(&secret) {
        return true;
    }
    state.sessions.load_bearer(bearer).await;
    state.sessions.authenticate(bearer).is_some()
}

/// Whether the bearer is a `worker_pool` token this node verifies: the
/// caller a pool's claim or heartbeat is forwarded for. Its binding to the
/// agent is the named node's to check.
fn pool_verified(state: &AppState, headers: &HeaderMap) -> bool {
    route::bearer(headers)
        .and_then(|bearer| state.engine.tokens().verify(bearer).ok())
        .is_some_and(|claims| claims.role == Role::WorkerPool)
}

/// Proxies `request` to `owner` on `path` (its route's own path) with the
/// request's query, and relays the answer.
async fn relay(
    forwarder: &Forwarder,
    owner: &TaskOwner,
    request: Request,
    path: &str,
    limit: u64,
) -> Response {
    let (parts, body) = request.into_parts();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let Ok(body) = axum::body::to_bytes(body, limit).await else {
        return ApiError::coded(
            ErrorCode::PayloadTooLarge,
            "request body is larger than limits.max_body_bytes",
        )
        .into_response();
    };
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let sent = forwarder
        .to_peer(
            parts.method.clone(),
            owner,
            &path_and_query,
            end_to_end(&parts.headers),
            timeout_of(&parts.method, path),
        )
        .body(body)
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        Err(error) => {
            tracing::warn!(
                owner = %owner.node,
                target = %target(owner, path),
                error = %causes(&error.without_url()),
                "cannot reach the node that holds the task"
            );
            return unavailable("the node that holds the task cannot be reached; retry");
        }
    };
    tracing::debug!(owner = %owner.node, route = path, status = answer.status().as_u16(), "forwarded");
    let mut response = Response::builder().status(answer.status());
    if let Some(out) = response.headers_mut() {
        *out = end_to_end(answer.headers());
        if let Ok(node) = HeaderValue::from_str(&owner.node.to_string()) {
            out.insert(HeaderName::from_static(FORWARDED_TO), node);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|error| ApiError::internal(&error).into_response())
}

/// Where a forwarded request went, as its failure is logged: the owner's
/// advertise URL and the route's path, never the query (which the error's
/// own URL would carry).
fn target(owner: &TaskOwner, path: &str) -> String {
    format!("{}{path}", owner.advertise_url.trim_end_matches('/'))
}

/// An error and its causes on one line (`builder error: invalid domain
/// character`): reqwest's own text names only the kind.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

/// How long a forwarded request may take: a sub-task's spawn may wait
/// the whole of `MAX_WAIT_SECS` (`wait_secs`), a pool's claim or
/// heartbeat its long-poll's `MAX_WAIT_MS`.
pub(super) fn timeout_of(method: &Method, path: &str) -> Duration {
    match (method, path) {
        (&Method::POST, "/v1/tasks") => Duration::from_secs(MAX_WAIT_SECS) + REQUEST_TIMEOUT,
        (&Method::POST, "/v1/pool/claim" | "/v1/pool/heartbeat") => {
            Duration::from_millis(MAX_WAIT_MS) + REQUEST_TIMEOUT
        }
        _ => REQUEST_TIMEOUT,
    }
}

/// `headers` without the hop-by-hop ones, those `Connection` names, and
/// `Content-Length` (the body is framed again).
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name_str = name.as_str();
        if HOP_BY_HOP.contains(&name_str)
            || name == header::CONTENT_LENGTH
            || named.iter().any(|n| n == name_str)
        {
            continue;
        }
        kept.append(name.clone(), value.clone());
    }
    kept
}

/// `404 not_found` for a pool's request naming a node the cluster does not
/// have (it left, or never was): the pool stops claiming from it.
fn no_such_node() -> Response {
    ApiError::coded(
        ErrorCode::NotFound,
        "no node of this cluster has the id x-swarmd-node names",
    )
    .into_response()
}

/// `503 owner_unavailable` with `Retry-After`.
pub(crate) fn unavailable(why: &str) -> Response {
    let mut response = ApiError::coded(ErrorCode::OwnerUnavailable, why).into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_end_to_end_headers_cross_a_node() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer wh-x"),
            ("content-type", "application/x-ndjson"),
            ("idempotency-key", "k1"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "dropped"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-length", "12"),
            ("host", "node-b:7070"),
            ("upgrade", "websocket"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let kept = end_to_end(&headers);
        let mut names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["authorization", "content-type", "idempotency-key"]);
        assert_eq!(kept["idempotency-key"], "k1");
    }

    #[test]
    fn a_spawn_may_take_the_longest_wait_and_the_rest_are_short() {
        assert_eq!(
            timeout_of(&Method::POST, "/v1/tasks"),
            Duration::from_secs(MAX_WAIT_SECS) + REQUEST_TIMEOUT
        );
        assert_eq!(
            timeout_of(&Method::POST, "/v1/worker/output"),
            REQUEST_TIMEOUT
        );
        assert_eq!(
            timeout_of(&Method::POST, "/v1/pool/claim"),
            Duration::from_millis(MAX_WAIT_MS) + REQUEST_TIMEOUT
        );
    }

    #[test]
    fn a_failed_forward_names_its_target_and_the_cause() {
        let owner = TaskOwner {
            task: None,
            node: uuid::Uuid::nil(),
            advertise_url: "http://node a:7841/".to_owned(),
            alive: true,
        };
        assert_eq!(
            target(&owner, "/v1/worker/result"),
            "http://node a:7841/v1/worker/result"
        );
        let client = reqwest::Client::new();
        let error = client
            .post(format!(
                "{}?task_id=T-1",
                target(&owner, "/v1/worker/result")
            ))
            .build()
            .unwrap_err();
        let logged = causes(&error.without_url());
        assert!(logged.starts_with("builder error: "), "{logged}");
        assert!(!logged.contains("task_id"), "{logged}");
    }

    #[test]
    fn an_unreachable_owner_is_a_503_to_retry() {
        let response = unavailable("gone");
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()[header::RETRY_AFTER], RETRY_AFTER_SECS);
    }
}
