//! Extractors that answer bad input with our error body (docs/protocol.md, Errors) instead
//! of axum's plain-text rejections: `Json`, `Query`, `NoQuery`, `Path`, `RawBody`, and
//! the `Idempotency-Key` header.
//!
//! Each wraps the axum extractor of the same name and maps its rejection by
//! status: 413 → `payload_too_large`, 415 → `unsupported_media_type`,
//! anything else (syntax, missing field, wrong type, bad id) → 400
//! `bad_request`. A JSON body nested deeper than `MAX_JSON_DEPTH` (64) is a
//! 400 that names the limit.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use swarmd_engine::ErrorCode;

use crate::http::error::ApiError;

/// The longest `Idempotency-Key` accepted.
pub const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Maps an axum rejection (its status and text) to our error.
pub fn rejection(status: StatusCode, text: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::coded(
            ErrorCode::PayloadTooLarge,
            "request body is larger than limits.max_body_bytes",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::coded(ErrorCode::UnsupportedMediaType, text)
        }
        _ if text.contains(crate::http::guard::BODY_TIMEOUT_MESSAGE) => {
            ApiError::coded(ErrorCode::RequestTimeout, text)
        }
        _ => ApiError::bad_request(text),
    }
}

/// The error for a body read whole by hand (`axum::body::to_bytes`) that
/// could not be: 408 when it came too late, 413 past the length limit
/// given, else 400. Told apart by the error's type, anywhere in its chain.
pub fn unread_body(error: &axum::Error) -> ApiError {
    let text = error.to_string();
    if caused_by::<crate::http::guard::Late>(error) {
        ApiError::coded(ErrorCode::RequestTimeout, text)
    } else if caused_by::<http_body_util::LengthLimitError>(error) {
        rejection(StatusCode::PAYLOAD_TOO_LARGE, text)
    } else {
        ApiError::bad_request(format!("the request body could not be read: {text}"))
    }
}

/// Whether `error` or any error in its source chain is an `E`.
fn caused_by<E: std::error::Error + 'static>(error: &axum::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if error.is::<E>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// A JSON body (request) or JSON answer (response).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let reject =
            |e: axum::extract::rejection::JsonRejection| rejection(e.status(), e.body_text());
        // A body not declared as JSON is left to axum's 415.
        if !is_json(req.headers()) {
            return match axum::Json::<T>::from_request(req, state).await {
                Ok(axum::Json(value)) => Ok(Json(value)),
                Err(e) => Err(reject(e)),
            };
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| rejection(e.status(), e.body_text()))?;
        check_depth(&body)?;
        axum::Json::<T>::from_bytes(&body)
            .map(|axum::Json(value)| Json(value))
            .map_err(reject)
    }
}

/// Refuses a JSON body nested deeper than `MAX_JSON_DEPTH`, before it is
/// parsed: what is accepted must stay readable once stored in deeper records.
pub fn check_depth(body: &[u8]) -> Result<(), ApiError> {
    swarmd_output_store::check_text_depth(body)
        .map_err(|e| ApiError::bad_request(format!("the body is refused: {e}")))
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Query-string parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// A route that takes no query parameters: one given is refused (400),
/// so a typo is never silently ignored (docs/protocol.md, Errors). Placed
/// after a route's credential, so an unauthenticated caller learns nothing.
#[derive(Debug, Clone, Copy)]
pub struct NoQuery;

/// The most of a refused query parameter's name an error repeats.
const MAX_ECHOED_NAME: usize = 64;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(query) = parts.uri.query().filter(|q| !q.is_empty()) else {
            return Ok(NoQuery);
        };
        let first = query.split('&').next().unwrap_or(query);
        let name = first.split('=').next().unwrap_or(first);
        let shown: String = name.chars().take(MAX_ECHOED_NAME).collect();
        Err(ApiError::bad_request(format!(
            "unknown query parameter `{shown}`: this route takes none"
        )))
    }
}

/// Path parameters (ids are parsed and validated here).
#[derive(Debug, Clone, Copy)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(e) if e.status().is_server_error() => Err(ApiError::internal(&e.body_text())),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// The raw request body, within the body limit.
#[derive(Debug, Clone)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(RawBody(bytes)),
            Err(e) => Err(rejection(e.status(), e.body_text())),
        }
    }
}

/// The optional `Idempotency-Key` header: 1 to 200 visible ASCII characters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let key = value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|k| {
                !k.is_empty()
                    && k.len() <= MAX_IDEMPOTENCY_KEY
                    && k.bytes().all(|b| b.is_ascii_graphic())
            })
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
                ))
            })?;
        Ok(IdempotencyKey(Some(key.to_owned())))
    }
}

/// Whether the request's `Content-Type` is JSON (`application/json` or `+json`).
pub fn is_json(headers: &axum::http::HeaderMap) -> bool {
    media_type(headers).is_some_and(|m| m == "application/json" || m.ends_with("+json"))
}

/// The request's media type, lowercased, without parameters.
pub fn media_type(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers
        .get(axum::http::header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    let essence = value.split(';').next().unwrap_or_default().trim();
    Some(essence.to_ascii_lowercase())
}

/// For optional query parameters: an absent or empty value (`?status=`) is
/// `None`; anything else must parse.
///
/// # Errors
/// The parse error of `T`, as a deserialization error.
pub fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    use serde::Deserialize as _;
    let raw: Option<String> = Option::deserialize(deserializer)?;
    match raw.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(serde::de::Error::custom),
    }
}
