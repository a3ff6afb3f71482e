//! The one place errors become HTTP (docs/protocol.md, Errors): a status code and the body
//! `{"error": "<human message>", "code": "<machine code>"}`. Internal errors
//! are logged once, here, with a correlation id the body repeats.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use swarmd_engine::EngineError;

use crate::sessions::SessionError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// An error with the status its code has (docs/protocol.md, Errors).
    pub fn coded(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(status_for(code), code, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::coded("bad_request", message)
    }

    /// The uniform 401 of verification steps 1–5 (docs/security.md): the body
    /// never says why.
    pub fn unauthorized(code: &'static str) -> Self {
        let message = if code == "token_expired" {
            "credential expired"
        } else {
            "missing or invalid credential"
        };
        Self::coded(code, message)
    }

    pub fn forbidden() -> Self {
        Self::coded("forbidden", "this credential may not do that")
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::coded("not_found", format!("{} not found", what.into()))
    }

    /// Logs `error` with a fresh correlation id and answers 500 with that id.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        tracing::error!(correlation_id = %id, %error, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error (correlation id {id})"),
        )
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The status of each machine code (docs/protocol.md, Errors).
pub fn status_for(code: &str) -> StatusCode {
    match code {
        "bad_request" => StatusCode::BAD_REQUEST,
        "unauthorized" | "token_expired" => StatusCode::UNAUTHORIZED,
        "forbidden" | "task_mismatch" => StatusCode::FORBIDDEN,
        "not_found" => StatusCode::NOT_FOUND,
        "attempt_superseded" | "already_final" | "role_taken" | "idempotency_conflict" => {
            StatusCode::CONFLICT
        }
        "task_terminal" | "handle_expired" => StatusCode::GONE,
        "payload_too_large" | "output_budget_exceeded" => StatusCode::PAYLOAD_TOO_LARGE,
        "unsupported_media_type" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "draining" | "not_ready" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error.code() {
            "internal" => ApiError::internal(&error),
            "unauthorized" | "token_expired" => ApiError::unauthorized(error.code()),
            code => ApiError::coded(code, error.to_string()),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::RoleTaken(_) => ApiError::coded("role_taken", error.to_string()),
            SessionError::NotFound => ApiError::not_found("session"),
            SessionError::BadRequest(m) => ApiError::bad_request(m),
            SessionError::NotReady => ApiError::coded("not_ready", error.to_string()),
            SessionError::Engine(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.message, "code": self.code }));
        (self.status, body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_code_has_its_status() {
        let table = [
            ("bad_request", 400),
            ("unauthorized", 401),
            ("token_expired", 401),
            ("forbidden", 403),
            ("task_mismatch", 403),
            ("not_found", 404),
            ("attempt_superseded", 409),
            ("already_final", 409),
            ("role_taken", 409),
            ("idempotency_conflict", 409),
            ("task_terminal", 410),
            ("handle_expired", 410),
            ("payload_too_large", 413),
            ("unsupported_media_type", 415),
            ("draining", 503),
            ("not_ready", 503),
            ("internal", 500),
        ];
        for (code, status) in table {
            assert_eq!(status_for(code).as_u16(), status, "{code}");
        }
    }
}
