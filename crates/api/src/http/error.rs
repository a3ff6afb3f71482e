//! The one place errors become answers (docs/protocol.md, Errors): a status code and the
//! body `{"error": "<human message>", "code": "<machine code>"}` for HTTP,
//! and the code and message of WebSocket `error` frames (`describe`).
//! Internal errors are logged once, here, with a correlation id the answer
//! repeats.

use std::convert::Infallible;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use swarmd_engine::{EngineError, ErrorCode};
use swarmd_wire::ErrorBody;

use swarmd_sessions::SessionError;

/// The longest message an error carries: a message that repeats what a
/// client sent (an unknown name, a bad value) never answers a megabyte
/// with a megabyte.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// `message` cut to [`MAX_MESSAGE_BYTES`] at a character boundary, saying
/// how much was cut.
fn bounded(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let cut = message.len();
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(&format!("… ({} more bytes)", cut - end));
    message
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
}

impl ApiError {
    /// An error with the status its code has (docs/protocol.md, Errors).
    pub fn coded(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::with_status(status_for(code), code, message)
    }

    /// An error answered with another status than its code's: a foreign
    /// 4xx (such as 408) keeps its status under the nearest code.
    pub fn with_status(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: bounded(message.into()),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::coded(ErrorCode::BadRequest, message)
    }

    /// The uniform 401 of verification steps 1–5 (docs/security.md): the body never says why.
    pub fn unauthorized(code: ErrorCode) -> Self {
        Self::coded(code, public_message(code))
    }

    pub fn forbidden() -> Self {
        Self::coded(ErrorCode::Forbidden, "this credential may not do that")
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::coded(ErrorCode::NotFound, format!("{} not found", what.into()))
    }

    /// Reports `error` as internal (see `report_internal`) and answers 500.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        Self::coded(ErrorCode::Internal, report_internal(error))
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The status of a machine code. `ErrorCode::http_status` lists one for
/// every code, each a valid status, so the fallback never answers.
pub fn status_for(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

pub use swarmd_sessions::report_internal;

/// What a client is told of an engine error, HTTP and WebSocket alike: its
/// code, and its message unless that could say too much (a refused
/// credential never says why; an internal error is reported once).
pub fn describe(error: &EngineError) -> (ErrorCode, String) {
    let code = error.code();
    let message = match code {
        ErrorCode::Internal => report_internal(error),
        ErrorCode::Unauthorized | ErrorCode::TokenExpired => public_message(code).to_owned(),
        _ => error.to_string(),
    };
    (code, message)
}

/// The message of a refused credential, by code.
fn public_message(code: ErrorCode) -> &'static str {
    if code == ErrorCode::TokenExpired {
        "credential expired"
    } else {
        "missing or invalid credential"
    }
}

/// What cannot fail: a sink that never refuses (a `Vec`) adapted by one
/// whose step can.
impl From<Infallible> for ApiError {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let (code, message) = describe(&error);
        ApiError::coded(code, message)
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::RoleTaken(_) => ApiError::coded(ErrorCode::RoleTaken, error.to_string()),
            SessionError::NotFound => ApiError::not_found("session"),
            SessionError::BadRequest(m) => ApiError::bad_request(m),
            SessionError::TooMany(_) => {
                ApiError::coded(ErrorCode::TooManySessions, error.to_string())
            }
            SessionError::Engine(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body: ErrorBody = ErrorBody::new(self.code, self.message);
        (self.status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_message_repeating_a_huge_input_is_cut() {
        let huge = format!("unknown layer `{}`", "é".repeat(MAX_MESSAGE_BYTES));
        let error = super::ApiError::bad_request(huge.clone());
        assert!(
            error.message().len() <= MAX_MESSAGE_BYTES + 32,
            "{}",
            error.message().len()
        );
        assert!(error.message().starts_with("unknown layer `éé"));
        assert!(
            error.message().ends_with(" more bytes)"),
            "{}",
            &error.message()[16_000..]
        );
        let short = super::ApiError::bad_request("short");
        assert_eq!(short.message(), "short");
    }

    use super::*;

    #[test]
    fn every_code_has_a_valid_status() {
        for &code in ErrorCode::ALL {
            let status = StatusCode::from_u16(code.http_status()).expect("a valid status");
            assert_eq!(status_for(code), status, "{code}");
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{code}"
            );
        }
    }

    #[tokio::test]
    async fn the_body_carries_the_code_as_its_wire_string() {
        let response = ApiError::coded(ErrorCode::RoleTaken, "taken").into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, json!({ "error": "taken", "code": "role_taken" }));
    }

    #[test]
    fn internal_errors_show_only_their_correlation_id() {
        let error = EngineError::Spawn(swarmd_engine::SpawnError::Failed("disk /x".to_owned()));
        let (code, message) = describe(&error);
        assert_eq!(code, ErrorCode::Internal);
        assert!(
            message.starts_with("internal error (correlation id "),
            "{message}"
        );
        assert!(!message.contains("/x"), "{message}");
    }

    #[test]
    fn refused_credentials_never_say_why() {
        let error = EngineError::Unauthorized(swarmd_engine::auth::TokenError::UnknownHandle);
        assert_eq!(
            describe(&error),
            (
                ErrorCode::Unauthorized,
                "missing or invalid credential".to_owned()
            )
        );
    }
}
