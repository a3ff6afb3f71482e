//! The middleware every route runs through: the body limit with our 413,
//! the request span, per-route request counts, panics as 500, and a last
//! pass that gives any error answer without a JSON body (axum's 405, a
//! rejection from an extractor that is not ours) the `{error, code}` body.

use std::ops::ControlFlow;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{Response as HttpResponse, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use swarmd_engine::ErrorCode;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, OnResponse, TraceLayer};
use tracing::Span;

use crate::app::AppState;
use crate::http::error::ApiError;

/// Paths longer than this are cut in logs.
const MAX_LOGGED_PATH: usize = 256;
/// How much of a foreign error body is kept as our message.
const MAX_FOREIGN_MESSAGE: usize = 512;
/// A refused body up to this size is read and dropped before the 413.
const DRAIN_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Reading a refused body stops after this long.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// What a request passes before its route, in this order: the guards
/// (`http::guard`: `Host`, `Origin`, the write rate, the body's deadline),
/// the declared body length against `limits.max_body_bytes`, then, on a
/// cluster node, forwarding to the node that holds its task
/// (`cluster::forward`). One middleware rather than three: each `from_fn`
/// layer boxes the rest of the stack and its future again for every
/// request.
pub async fn admit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let admitted = match crate::http::guard::check(&state, request) {
        ControlFlow::Continue(request) => {
            declared_length(state.config.limits.max_body_bytes, request).await
        }
        refused => refused,
    };
    match admitted {
        ControlFlow::Continue(request) => match state.cluster.as_ref() {
            Some(forwarder) => crate::cluster::forward(&state, forwarder, request, next).await,
            None => next.run(request).await,
        },
        ControlFlow::Break(refused) => refused,
    }
}

/// Refuses a body whose declared `Content-Length` is over the limit before
/// handling it. Bodies without a length are cut by `DefaultBodyLimit` in the
/// extractors, which answer the same 413.
///
/// The refused body is read and dropped first (up to `DRAIN_MAX_BYTES`, for
/// at most `DRAIN_TIME`): a client still sending when the connection closes
/// would see a broken pipe instead of the 413.
async fn declared_length(limit: u64, request: Request) -> ControlFlow<Response, Request> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(length) = declared.filter(|length| *length > limit) else {
        return ControlFlow::Continue(request);
    };
    if length <= DRAIN_MAX_BYTES {
        let mut body = request.into_body().into_data_stream();
        let drained = tokio::time::timeout(DRAIN_TIME, async {
            let mut seen = 0u64;
            while let Some(Ok(chunk)) = body.next().await {
                seen += chunk.len() as u64;
                if seen > DRAIN_MAX_BYTES {
                    break;
                }
            }
        });
        let _ = drained.await;
    }
    ControlFlow::Break(
        ApiError::coded(
            ErrorCode::PayloadTooLarge,
            "request body is larger than limits.max_body_bytes",
        )
        .into_response(),
    )
}

/// Counts the answer under its route template (`unmatched` for the fallback).
pub async fn count_requests(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    state.metrics.http_request(
        route.as_ref().map_or("unmatched", MatchedPath::as_str),
        response.status().as_u16(),
    );
    response
}

/// Rewrites an error answer that lacks a JSON body into `{error, code}`.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json_response(&response) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_FOREIGN_MESSAGE)
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::coded(ErrorCode::MethodNotAllowed, text),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::bad_request(text),
        StatusCode::NOT_FOUND => ApiError::coded(ErrorCode::NotFound, text),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::coded(ErrorCode::PayloadTooLarge, text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::coded(ErrorCode::UnsupportedMediaType, text)
        }
        StatusCode::UNAUTHORIZED => ApiError::unauthorized(ErrorCode::Unauthorized),
        StatusCode::FORBIDDEN => ApiError::forbidden(),
        StatusCode::SERVICE_UNAVAILABLE => ApiError::coded(ErrorCode::NotReady, text),
        s if s.is_server_error() => ApiError::internal(&text),
        s => ApiError::with_status(s, ErrorCode::BadRequest, text),
    };
    let mut rewritten = error.into_response();
    // Keep headers such as `Allow` on a 405.
    for (name, value) in parts.headers.iter() {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rewritten
}

fn is_json_response(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// A panic in a handler answers 500 with a correlation id; the daemon goes on.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> HttpResponse<Body> {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned());
    ApiError::internal(&format!("handler panicked: {message}")).into_response()
}

/// The request span: method and path (never the query, which may carry a
/// `?token=`, and never headers); status and latency are recorded on it.
pub fn trace_layer()
-> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan, (), Answered, (), (), ()> {
    TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_request(())
        .on_response(Answered)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

/// Makes the `http` span of one request.
#[derive(Debug, Clone, Copy)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &axum::http::Request<B>) -> Span {
        let path = request.uri().path();
        let path = path.get(..MAX_LOGGED_PATH).unwrap_or(path);
        tracing::info_span!("http", method = request.method().as_str(), path)
    }
}

/// Logs the answer's status and latency at debug level, inside the request
/// span. They are not recorded on the span itself: formatting fields into a
/// span costs every request, and only events show them.
#[derive(Debug, Clone, Copy)]
pub struct Answered;

impl<B> OnResponse<B> for Answered {
    fn on_response(self, response: &HttpResponse<B>, latency: Duration, _span: &Span) {
        let status = response.status().as_u16();
        let latency_ms = latency.as_secs_f64() * 1e3;
        tracing::debug!(status, latency_ms, "answered");
    }
}
