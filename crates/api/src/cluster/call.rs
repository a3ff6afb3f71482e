//! Function-level forwarding, for the MCP tools that act on a live task
//! (`worker_prompt`, `worker_progress`, `worker_submit`, their `mse_*`
//! aliases, `cancel`): when another node holds the task, the tool calls
//! that node's REST route with the tool's own credential instead of
//! proxying the MCP session, and answers with the route's JSON, or its
//! refusal as the same `{error, code}`.

use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::Value;
use swarmd_engine::ErrorCode;

use super::forward::{FORWARDED, UNAVAILABLE, timeout_of};
use crate::app::AppState;
use crate::http::error::ApiError;
use swarmd_cluster::route::{Route, Subject};

/// The largest answer a peer's route may give one tool call.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// One REST call for a tool.
#[derive(Debug)]
pub struct PeerCall<'a> {
    pub method: Method,
    /// The route's path and query.
    pub path: String,
    /// The credential the tool was given or called with.
    pub bearer: &'a str,
    /// A JSON body.
    pub body: Option<Vec<u8>>,
}

/// `None` when this node serves the call (it holds the task, or the task
/// is finished or unknown); else the answer of the node that holds it: its
/// JSON (`null` for an empty body), or its refusal.
pub async fn call_owner(
    state: &AppState,
    subject: &Subject,
    call: PeerCall<'_>,
) -> Option<Result<Value, ApiError>> {
    let forwarder = state.cluster.as_ref()?;
    let owner = match forwarder
        .route(&state.engine, &state.runner, subject, false)
        .await
    {
        Route::Local => return None,
        Route::Unavailable(why) => {
            state.metrics.forwarded(UNAVAILABLE);
            return Some(Err(ApiError::coded(ErrorCode::OwnerUnavailable, why)));
        }
        Route::NoSuchNode => return Some(Err(ApiError::not_found("node"))),
        Route::Forward(owner) => owner,
    };
    let mut headers = HeaderMap::new();
    let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {}", call.bearer)) else {
        return Some(Err(ApiError::unauthorized(ErrorCode::Unauthorized)));
    };
    headers.insert(AUTHORIZATION, bearer);
    let path = call.path.split('?').next().unwrap_or_default();
    let timeout = timeout_of(&call.method, path);
    let mut request = forwarder.to_peer(call.method, &owner, &call.path, headers, timeout);
    if let Some(body) = call.body {
        request = request.header(CONTENT_TYPE, "application/json").body(body);
    }
    let unreachable = |error: reqwest::Error| {
        state.metrics.forwarded(UNAVAILABLE);
        tracing::warn!(
            owner = %owner.node,
            error = %error.without_url(),
            "cannot reach the node that holds the task"
        );
        ApiError::coded(
            ErrorCode::OwnerUnavailable,
            "the node that holds the task cannot be reached; retry",
        )
    };
    let mut answer = match request.send().await {
        Ok(answer) => answer,
        Err(error) => return Some(Err(unreachable(error))),
    };
    let status = answer.status();
    let mut bytes = Vec::new();
    loop {
        match answer.chunk().await {
            Ok(Some(chunk)) if bytes.len() + chunk.len() <= MAX_ANSWER_BYTES => {
                bytes.extend_from_slice(&chunk);
            }
            Ok(Some(_)) => {
                return Some(Err(ApiError::internal(&"a peer's answer is too large")));
            }
            Ok(None) => break,
            Err(error) => return Some(Err(unreachable(error))),
        }
    }
    state.metrics.forwarded(FORWARDED);
    Some(answer_of(status, &bytes))
}

/// A peer's answer as the tool's: a 2xx body as JSON, else its
/// `{error, code}` with the peer's status.
fn answer_of(status: StatusCode, bytes: &[u8]) -> Result<Value, ApiError> {
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::internal(&e))?
    };
    if status.is_success() {
        return Ok(body);
    }
    let code = body["code"]
        .as_str()
        .and_then(|code| code.parse::<ErrorCode>().ok())
        .unwrap_or(ErrorCode::Internal);
    let message = body["error"].as_str().unwrap_or("the owner node refused");
    Err(ApiError::with_status(status, code, message))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_peers_refusal_keeps_its_status_code_and_message() {
        let body = json!({"error": "already decided", "code": "already_final"});
        let error = answer_of(StatusCode::CONFLICT, body.to_string().as_bytes()).unwrap_err();
        assert_eq!(error.status(), StatusCode::CONFLICT);
        assert_eq!(error.code(), ErrorCode::AlreadyFinal);
        assert_eq!(error.message(), "already decided");
        assert_eq!(
            answer_of(StatusCode::OK, br#"{"seq":3}"#).unwrap(),
            json!({"seq": 3})
        );
        assert_eq!(answer_of(StatusCode::NO_CONTENT, b"").unwrap(), Value::Null);
        assert_eq!(
            answer_of(StatusCode::BAD_GATEWAY, b"<html>")
                .unwrap_err()
                .code(),
            ErrorCode::Internal
        );
    }
}
