//! The guards every request passes before its handler (docs/security.md,
//! Browsers and DNS rebinding; docs/operations.md, Limits):
//!
//! 1. its `Host` must be one the daemon answers to (421 `host_not_allowed`),
//!    so a page that rebinds its own name to 127.0.0.1 reads nothing;
//! 2. a browser's `Origin`, when sent, must be the daemon's own or a
//!    configured one (403 `origin_not_allowed`), so no foreign page can post
//!    to the API or open a WebSocket;
//! 3. a write (any method but GET, HEAD and OPTIONS) must be within its
//!    credential's rate, or its peer's when it carries none (429
//!    `rate_limited` with `Retry-After`);
//! 4. its body must arrive within `server.body_timeout_secs` in total (408
//!    `request_timeout`), however slowly it trickles.
//!
//! Every refusal is counted in `swarmd_requests_refused_total` or
//! `swarmd_rate_limited_total`. Live streams are bounded by the routes that
//! open them, through `Guards::open_stream`.

mod deadline;
mod rate;
mod streams;

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use swarmd_engine::ErrorCode;

pub(crate) use deadline::{BODY_TIMEOUT_MESSAGE, Late};
pub use rate::{RateKey, Rates};
pub use streams::StreamSlot;
use streams::{Full, Streams};

/// When a refused stream is told to try again: streams last, so soon is
/// pointless.
const STREAM_RETRY_SECS: u64 = 5;

/// A live stream refused: whose share was full. Answered as a 429
/// `too_many_streams` with `Retry-After`.
#[derive(Debug)]
pub struct StreamsFull(&'static str);

impl IntoResponse for StreamsFull {
    fn into_response(self) -> Response {
        let mut response = ApiError::coded(
            ErrorCode::TooManyStreams,
            format!(
                "too many live streams open for {}; close one or retry later",
                self.0
            ),
        )
        .into_response();
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(STREAM_RETRY_SECS));
        response
    }
}

use crate::app::AppState;
use crate::http::auth::bearer;
use crate::http::error::ApiError;
use crate::metrics::GuardMetrics;
use swarmd_config::{Config, HostRules};

/// The guards of one daemon, built from its configuration.
#[derive(Debug)]
pub struct Guards {
    hosts: HostRules,
    rates: Rates,
    streams: Streams,
    body_timeout: Duration,
    metrics: GuardMetrics,
}

impl Guards {
    pub fn new(config: &Config, metrics: GuardMetrics) -> Guards {
        Guards {
            hosts: HostRules::new(config),
            rates: Rates::new(&config.limits),
            streams: Streams::new(&config.limits),
            body_timeout: Duration::from_secs(config.server.body_timeout_secs),
            metrics,
        }
    }

    /// The rate limiters (login and WebSocket frames check them directly).
    pub fn rates(&self) -> &Rates {
        &self.rates
    }

    /// A 429 for a refusal under `limit`, counted, telling when to retry.
    pub fn limited(&self, limit: &'static str, wait: Duration) -> Response {
        self.metrics.rate_limited(limit);
        let mut response = ApiError::coded(
            ErrorCode::RateLimited,
            format!(
                "too many requests for this {}; retry later",
                rate::subject(limit)
            ),
        )
        .into_response();
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(secs.max(1)));
        response
    }

    /// A place for one more live stream of `caller` (by its identity, see
    /// `Caller::stream_key`), or a 429 `too_many_streams` with
    /// `Retry-After`, counted under `streams`.
    pub fn open_stream(&self, caller: String) -> Result<StreamSlot, StreamsFull> {
        self.streams.open(caller).map_err(|full| {
            self.metrics.rate_limited("streams");
            StreamsFull(match full {
                Full::Caller => "this caller (limits.streams_per_caller)",
                Full::Total => "the daemon (limits.max_streams)",
            })
        })
    }

    /// Counts a request or frame refused under `limit` that is answered
    /// elsewhere (a WebSocket error frame).
    pub fn count_limited(&self, limit: &'static str) {
        self.metrics.rate_limited(limit);
    }

    /// Counts a request refused before routing for `reason`.
    pub fn refused(&self, reason: &'static str) {
        self.metrics.request_refused(reason);
    }
}

/// Host, origin and rate, in that order; a write passes on with its body
/// under the deadline. `Break` is the refusal to answer with.
pub fn check(state: &AppState, request: Request) -> ControlFlow<Response, Request> {
    let guards = &state.guards;
    let host = request
        .headers()
        .get(HOST)
        .map(|v| v.to_str().unwrap_or("\u{0}"))
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !guards.hosts.host_allowed(host)
    {
        guards.refused("host");
        return ControlFlow::Break(
            ApiError::coded(
                ErrorCode::HostNotAllowed,
                "this daemon does not answer to that Host; add it to server.allowed_hosts",
            )
            .into_response(),
        );
    }
    if let Some(origin) = request.headers().get(ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|origin| guards.hosts.origin_allowed(origin, host));
        if !allowed {
            guards.refused("origin");
            return ControlFlow::Break(
                ApiError::coded(
                    ErrorCode::OriginNotAllowed,
                    "requests from this Origin are refused; add it to server.allowed_origins",
                )
                .into_response(),
            );
        }
    }
    if !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        let (parts, body) = request.into_parts();
        let key = match bearer(&parts) {
            Ok(Some(credential)) => Some(RateKey::credential(credential)),
            // A malformed header is refused by the route's own extractor.
            Ok(None) | Err(_) => parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(peer)| RateKey::peer(peer.ip())),
        };
        if let Some(key) = key
            && let Err(wait) = guards.rates.check_write(&key)
        {
            return ControlFlow::Break(guards.limited("write", wait));
        }
        let body = deadline::limit(body, guards.body_timeout, guards.metrics.clone());
        return ControlFlow::Continue(Request::from_parts(parts, body));
    }
    ControlFlow::Continue(request)
}
