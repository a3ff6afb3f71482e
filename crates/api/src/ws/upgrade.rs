//! `GET /v1/operators/{sid}/ws`: a session attaches a socket to itself,
//! with its own token only (docs/protocol.md, WebSocket); the socket is
//! served by `connection`.

use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use swarmd_engine::{EngineError, ErrorCode, detached};

use super::{MAX_FRAME_BYTES, READ_CHUNK_BYTES, serve_socket};
use crate::app::AppState;
use crate::http::auth::{authenticate, bearer};
use crate::http::error::ApiError;
use crate::http::operators::parse_sid;

/// The socket's route, to be merged into the main router.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/operators/{sid}/ws", get(upgrade))
}

#[derive(Debug, Deserialize)]
struct SocketQuery {
    token: Option<String>,
}

/// The session token of an upgrade: `Authorization: Bearer`, else
/// `?token=` (browsers cannot set headers on a WebSocket).
#[derive(Debug)]
struct SocketCredential(Option<String>);

impl FromRequestParts<AppState> for SocketCredential {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, ApiError> {
        if let Some(token) = bearer(parts)? {
            return Ok(SocketCredential(Some(token.to_owned())));
        }
        let query = Query::<SocketQuery>::try_from_uri(&parts.uri)
            .map_err(|_| ApiError::bad_request("malformed query string"))?;
        Ok(SocketCredential(query.0.token))
    }
}

/// `GET /v1/operators/{sid}/ws`: the session's own token only.
async fn upgrade(
    State(state): State<AppState>,
    Path(sid): Path<String>,
    SocketCredential(token): SocketCredential,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let sid = parse_sid(&sid)?;
    let token = token.ok_or_else(|| ApiError::unauthorized(ErrorCode::Unauthorized))?;
    state.sessions.load_bearer(&token).await;
    let caller = authenticate(&state, &token)?;
    let session = state
        .sessions
        .find(&sid)
        .await
        .ok_or_else(|| ApiError::not_found("session"))?;
    let own = caller.session().is_some_and(|s| s.sid == sid);
    if !own {
        return Err(ApiError::forbidden());
    }
    // Only a real upgrade moves the session: a plain GET (a probe) must
    // not take its home from the node its socket lives on.
    let upgrade =
        upgrade.map_err(|e| ApiError::bad_request(format!("not a WebSocket upgrade: {e}")))?;
    // The socket attaches here: this node becomes the session's home. The
    // move runs to its end even if the client hangs up meanwhile: once the
    // database names this node, the previous home must be told.
    let (sessions, moving) = (state.sessions.clone(), session.clone());
    let moved = detached(async move {
        sessions.attach_home(&moving).await;
        Ok::<_, EngineError>(())
    });
    moved.await?;
    Ok(upgrade
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .read_buffer_size(READ_CHUNK_BYTES)
        .on_upgrade(move |socket| serve_socket(state, session, socket))
        .into_response())
}
