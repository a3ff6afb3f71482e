//! Operator session routes (docs/protocol.md, Operator sessions): login,
//! list, get and delete; the WebSocket upgrade of
//! `/v1/operators/{sid}/ws` is the socket's own (`ws::upgrade`).
//!
//! Login needs the admin token — or no credential at all from a loopback
//! peer when `auth.loopback_login = true` (the peer address comes from
//! `ConnectInfo`, which the accept loop sets; without it no peer counts as
//! loopback). A credential-less login must declare `Content-Type:
//! application/json` (a browser cannot send that cross-site without a
//! preflight the daemon never grants) and is limited per peer address by
//! `limits.login_rate_per_min`. A session may read, delete and attach to itself only;
//! the admin may read and delete any session but attach to none.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::SessionId;
use swarmd_engine::{ErrorCode, detached};

use crate::app::AppState;
use crate::http::auth::{Caller, authenticate, bearer};
use crate::http::error::ApiError;
use crate::http::extract::{NoQuery, check_depth, rejection};
use swarmd_sessions::{LoginRequest, LoginResponse, Session, SessionSummary};

/// The session routes (docs/protocol.md, Operator sessions), to be merged into the main router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/operators", get(list).post(login))
        .route("/v1/operators/{sid}", get(show).delete(remove))
}

/// Who may log in: the admin (or a token with `manage_operators`), or
/// anyone from loopback when the configuration allows it.
#[derive(Debug)]
struct LoginAuth;

impl FromRequestParts<AppState> for LoginAuth {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let refuse = |error: ApiError| error.into_response();
        if let Some(token) = bearer(parts).map_err(refuse)? {
            authenticate(state, token)
                .and_then(|caller| caller.require(Verb::ManageOperators))
                .map_err(refuse)?;
            return Ok(LoginAuth);
        }
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip())
            .filter(std::net::IpAddr::is_loopback);
        let Some(peer) = peer.filter(|_| state.config.auth.loopback_login) else {
            return Err(refuse(ApiError::unauthorized(ErrorCode::Unauthorized)));
        };
        if !declares_json(parts) {
            state.guards.refused("content_type");
            return Err(refuse(ApiError::coded(
                ErrorCode::UnsupportedMediaType,
                "a login without a credential must be sent as Content-Type: application/json",
            )));
        }
        if let Err(wait) = state.guards.rates().check_login(peer) {
            return Err(state.guards.limited("login", wait));
        }
        Ok(LoginAuth)
    }
}

/// Whether the request declares a JSON body (`application/json`, any
/// parameters).
fn declares_json(parts: &Parts) -> bool {
    parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// `POST /v1/operators`: an empty body is a login with every default.
async fn login(
    State(state): State<AppState>,
    _auth: LoginAuth,
    _: NoQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<LoginResponse>), ApiError> {
    let body = body.map_err(|e| rejection(e.status(), e.body_text()))?;
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        LoginRequest::default()
    } else {
        check_depth(&body)?;
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid login request: {e}")))?
    };
    let response = state.sessions.login(&state.engine, request).await?;
    Ok((StatusCode::CREATED, Json(response)))
}

/// `GET /v1/operators` (admin).
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
) -> Result<Json<Vec<SessionSummary>>, ApiError> {
    caller.require(Verb::ManageOperators)?;
    Ok(Json(state.sessions.list()))
}

/// `GET /v1/operators/{sid}` (that session or the admin).
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(sid): Path<String>,
) -> Result<Json<SessionSummary>, ApiError> {
    let session = target(&state, &caller, &sid).await?;
    Ok(Json(session.summary()))
}

/// `DELETE /v1/operators/{sid}` (that session or the admin): closes its
/// socket and releases its roles.
async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(sid): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = target(&state, &caller, &sid).await?;
    // A deletion forgets the session here before it tells the session's
    // home (on a cluster) or writes its end: it runs to its end even if the
    // client hangs up meanwhile.
    let (sessions, engine) = (state.sessions.clone(), state.engine.clone());
    detached(async move { sessions.delete(&engine, &session.sid).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The session `sid` names, if the caller may act on it.
async fn target(state: &AppState, caller: &Caller, sid: &str) -> Result<Arc<Session>, ApiError> {
    let sid = parse_sid(sid)?;
    let own = caller.session().is_some_and(|s| s.sid == sid);
    if !own {
        caller.require(Verb::ManageOperators)?;
    }
    state
        .sessions
        .find(&sid)
        .await
        .ok_or_else(|| ApiError::not_found("session"))
}

pub(crate) fn parse_sid(sid: &str) -> Result<SessionId, ApiError> {
    sid.parse()
        .map_err(|e| ApiError::bad_request(format!("bad session id: {e}")))
}
