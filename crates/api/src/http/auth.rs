//! Who is calling: the bearer of `Authorization` resolved to the admin, an
//! operator session, or a role token (observer, senior); pool routes take a
//! worker pool's token (`PoolCaller`). Worker routes take
//! the raw bearer instead and let the engine verify it for the route's verb.
//!
//! The header is capped at 2048 bytes before anything decodes it (docs/security.md, Verification),
//! and only a fingerprint of a rejected credential is ever logged. Every
//! refusal is counted in `swarmd_token_verify_failures_total` by its precise
//! reason; the client only ever sees the uniform 401 or a 403.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use swarmd_engine::ErrorCode;
use swarmd_engine::auth::{
    MAX_TOKEN_BYTES, SECRET_PREFIX, SessionSecret, fingerprint, looks_like_token,
};
use swarmd_engine::gate::{self, Role, Verb};
use swarmd_engine::ids::SessionId;
use swarmd_engine::{EngineError, WorkerAuth};

use crate::app::AppState;
use crate::http::error::ApiError;
use swarmd_sessions::Session;

/// An authenticated non-worker caller.
#[derive(Debug, Clone)]
pub enum Caller {
    Admin,
    Operator(Arc<Session>),
    /// A `swc1` role token (observer or senior).
    Token {
        role: Role,
        verbs: Vec<Verb>,
        sid: Option<SessionId>,
        /// The unix second from which it no longer verifies (its expiry
        /// plus the leeway): a stream it opened ends then.
        until: u64,
    },
}

impl Caller {
    pub fn role(&self) -> Role {
        match self {
            Caller::Admin => Role::Admin,
            Caller::Operator(_) => Role::Operator,
            Caller::Token { role, .. } => *role,
        }
    }

    /// The gate (docs/security.md, Roles and the gate): tokens must carry the verb, and every role
    /// must be allowed it by the table.
    pub fn require(&self, verb: Verb) -> Result<(), ApiError> {
        let granted = match self {
            Caller::Token { verbs, .. } => verbs.contains(&verb),
            _ => true,
        };
        if granted && gate::allowed(self.role(), verb) {
            Ok(())
        } else {
            Err(ApiError::forbidden())
        }
    }

    /// `require`, counting a refusal as a `forbidden` verification failure.
    pub fn check(&self, state: &AppState, verb: Verb) -> Result<(), ApiError> {
        self.require(verb)
            .inspect_err(|_| state.metrics.token_failure("forbidden"))
    }

    /// Whose share of live streams a stream of this caller takes: the
    /// admin's, its session's, or its role's (role tokens of one role share).
    pub fn stream_key(&self) -> String {
        match self {
            Caller::Admin => "admin".to_owned(),
            Caller::Operator(session) => format!("session:{}", session.sid),
            Caller::Token { role, .. } => format!("role:{}", role.as_str()),
        }
    }

    /// When the credential stops being valid by itself, unix seconds: a
    /// role token's expiry with the leeway (sessions end otherwise, the
    /// admin never).
    pub fn expires_secs(&self) -> Option<u64> {
        match self {
            Caller::Token { until, .. } => Some(*until),
            Caller::Admin | Caller::Operator(_) => None,
        }
    }

    /// The operator session behind the call, if any.
    pub fn session(&self) -> Option<&Arc<Session>> {
        match self {
            Caller::Operator(s) => Some(s),
            _ => None,
        }
    }
}

/// Why `bearer` refused a header, for the failure counter.
fn header_reason(value: &axum::http::HeaderValue) -> &'static str {
    if value.len() > MAX_TOKEN_BYTES {
        "too_long"
    } else {
        "malformed"
    }
}

/// The bearer credential of a request, if it has one. Oversized headers are
/// refused before any decoding.
pub fn bearer(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let Some(value) = parts.headers.get(AUTHORIZATION) else {
        return Ok(None);
    };
    if value.len() > MAX_TOKEN_BYTES {
        return Err(ApiError::unauthorized(ErrorCode::Unauthorized));
    }
    let text = value
        .to_str()
        .map_err(|_| ApiError::unauthorized(ErrorCode::Unauthorized))?;
    let token = text
        .strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))
        .ok_or_else(|| ApiError::unauthorized(ErrorCode::Unauthorized))?;
    Ok(Some(token.trim()))
}

/// `bearer`, with a missing or refused header counted and logged.
fn counted_bearer<'p>(parts: &'p Parts, state: &AppState) -> Result<&'p str, ApiError> {
    match bearer(parts) {
        Ok(Some(token)) => Ok(token),
        Ok(None) => {
            state.metrics.token_failure("missing");
            Err(ApiError::unauthorized(ErrorCode::Unauthorized))
        }
        Err(error) => {
            let value = parts.headers.get(AUTHORIZATION);
            let reason = value.map_or("malformed", header_reason);
            state.metrics.token_failure(reason);
            // The credential as presented (the scheme dropped when there is
            // one), hashed whole whatever its size: fingerprints stay
            // comparable with those of the other refusals.
            let presented = value.map_or(&[][..], |value| {
                let bytes = value.as_bytes();
                bytes.strip_prefix(b"Bearer ").unwrap_or(bytes)
            });
            tracing::info!(fingerprint = %fingerprint(presented), reason, "credential rejected");
            Err(error)
        }
    }
}

/// Whether `token` is the admin token.
fn is_admin(state: &AppState, token: &str) -> bool {
    SessionSecret::parse(token).is_ok_and(|secret| state.admin.matches(&secret))
}

/// Resolves a bearer to a caller.
pub fn authenticate(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    if let Ok(secret) = SessionSecret::parse(token) {
        if state.admin.matches(&secret) {
            return Ok(Caller::Admin);
        }
        if let Some(session) = state.sessions.authenticate(token) {
            return Ok(Caller::Operator(session));
        }
        return Err(refused(
            state,
            token,
            "unknown_secret",
            ErrorCode::Unauthorized,
        ));
    }
    if looks_like_token(token) {
        return match state.engine.tokens().verify(token) {
            // swarmd mints CapTokens for these roles only (`token mint`); the
            // admin is the `sws-` secret, so a signed admin claim is refused.
            Ok(claims) if matches!(claims.role, Role::Observer | Role::Senior) => {
                let until = state.engine.tokens().valid_until(&claims);
                Ok(Caller::Token {
                    role: claims.role,
                    verbs: claims.verbs,
                    sid: claims.sid,
                    until,
                })
            }
            Ok(_) => {
                state.metrics.token_failure("forbidden");
                Err(ApiError::forbidden())
            }
            Err(error) => Err(refused(state, token, error.reason(), error.public_code())),
        };
    }
    // A worker's handle is a credential, for the worker routes only: one
    // this node holds is refused as any valid worker credential is here.
    if token.starts_with(swarmd_engine::auth::HANDLE_PREFIX) {
        if state.engine.handle_task(token).is_some() {
            state.metrics.token_failure("forbidden");
            return Err(ApiError::forbidden());
        }
        return Err(refused(
            state,
            token,
            "unknown_handle",
            ErrorCode::Unauthorized,
        ));
    }
    // A wait's token is a capability for one verb on one wait, verified
    // against that wait only where it is answered.
    if token.starts_with(swarmd_flow_run::token::PREFIX) {
        state.metrics.token_failure("wait_token");
        return Err(ApiError::coded(
            ErrorCode::Forbidden,
            "a wait's token (swt1.…) only answers its own wait: \
             POST /v1/runs/{run}/waits/{wait}",
        ));
    }
    Err(refused(state, token, "malformed", ErrorCode::Unauthorized))
}

/// Logs (fingerprint only) and counts a refused credential; the 401 to send.
fn refused(state: &AppState, token: &str, reason: &'static str, code: ErrorCode) -> ApiError {
    tracing::info!(fingerprint = %fingerprint(token), reason, "credential rejected");
    state.metrics.token_failure(reason);
    if code == ErrorCode::Forbidden {
        ApiError::forbidden()
    } else {
        ApiError::unauthorized(code)
    }
}

/// Verification steps 1–6 (docs/security.md) for a worker route: the engine verifies the bearer
/// (token or `wh-` handle) for `verb`.
pub fn authenticate_worker(
    state: &AppState,
    bearer: &WorkerBearer,
    verb: Verb,
) -> Result<WorkerAuth, ApiError> {
    state
        .engine
        .authenticate_worker(&bearer.0, verb)
        .map_err(|error| worker_refusal(state, &bearer.0, error))
}

/// Maps a worker-side engine error, counting and logging credential and
/// binding failures (401, 403 and `handle_expired`) with the fingerprint.
pub fn worker_refusal(state: &AppState, bearer: &str, error: EngineError) -> ApiError {
    let reason = match &error {
        EngineError::Unauthorized(e) => Some(e.reason()),
        EngineError::Forbidden => Some("forbidden"),
        EngineError::HandleExpired => Some("handle_expired"),
        EngineError::TaskMismatch => Some("task_mismatch"),
        _ => None,
    };
    if let Some(reason) = reason {
        tracing::info!(fingerprint = %fingerprint(bearer), reason, "worker credential rejected");
        state.metrics.token_failure(reason);
    }
    error.into()
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = counted_bearer(parts, state)?;
        // A session another node logged in is read from the database when
        // this node does not hold it; the admin token costs no query.
        if !is_admin(state, token) {
            state.sessions.load_bearer(token).await;
        }
        authenticate(state, token)
    }
}

/// The raw bearer of a worker route; the engine verifies it for the route's
/// verb. `Debug` shows only its fingerprint.
#[derive(Clone)]
pub struct WorkerBearer(pub String);

impl std::fmt::Debug for WorkerBearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerBearer({})", fingerprint(&self.0))
    }
}

impl FromRequestParts<AppState> for WorkerBearer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = counted_bearer(parts, state)?;
        // `POST /v1/tasks` takes a session's secret here too. Only an `sws-`
        // secret can be one (a worker's `wh-` handle or `swc1` token never
        // is), and the admin token is never a session's, so neither costs a
        // look-up.
        if token.starts_with(SECRET_PREFIX) && !is_admin(state, token) {
            state.sessions.load_bearer(token).await;
        }
        Ok(WorkerBearer(token.to_owned()))
    }
}

/// A worker route's verb, as a type: the route's credential is verified for
/// it while the request's head is read.
pub trait RouteVerb {
    const VERB: Verb;
}

/// The worker verbs a route can name in [`Verified`].
pub mod verb {
    use super::{RouteVerb, Verb};

    macro_rules! route_verbs {
        ($($name:ident),*) => {$(
            #[doc = concat!("`", stringify!($name), "`, for [`super::Verified`].")]
            #[derive(Debug)]
            pub struct $name;
            impl RouteVerb for $name {
                const VERB: Verb = Verb::$name;
            }
        )*};
    }

    route_verbs!(FetchPrompt, PostResult, EmitOutput, Heartbeat);
}

/// A worker route's bearer, verified for the route's verb `V` (steps 1–6)
/// before its body is read: a refused credential costs the daemon a header,
/// never a body of up to `limits.max_body_bytes`.
#[derive(Debug)]
pub struct Verified<V> {
    pub bearer: WorkerBearer,
    pub auth: WorkerAuth,
    verb: PhantomData<V>,
}

impl<V: RouteVerb> FromRequestParts<AppState> for Verified<V> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let bearer = WorkerBearer::from_request_parts(parts, state).await?;
        let auth = authenticate_worker(state, &bearer, V::VERB)?;
        Ok(Verified {
            bearer,
            auth,
            verb: PhantomData,
        })
    }
}

/// A worker pool's `swc1` token (docs/security.md, Worker pools): the agents it
/// is bound to and the verbs it carries. Any other credential is refused
/// with 403 (a valid one) or 401.
#[derive(Debug, Clone)]
pub(crate) struct PoolCaller {
    pub(crate) agents: Vec<String>,
    pub(crate) verbs: Vec<Verb>,
}

impl PoolCaller {
    /// The gate for `verb`, and the binding to `agent`: 403 otherwise.
    pub(crate) fn check(&self, state: &AppState, verb: Verb, agent: &str) -> Result<(), ApiError> {
        let allowed = gate::check(Role::WorkerPool, &self.verbs, verb).is_ok()
            && self.agents.iter().any(|a| a == agent);
        if allowed {
            Ok(())
        } else {
            state.metrics.token_failure("forbidden");
            Err(ApiError::forbidden())
        }
    }
}

impl FromRequestParts<AppState> for PoolCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = counted_bearer(parts, state)?;
        if !looks_like_token(token) {
            return match authenticate(state, token) {
                Ok(_) => {
                    state.metrics.token_failure("forbidden");
                    Err(ApiError::forbidden())
                }
                Err(error) => Err(error),
            };
        }
        match state.engine.tokens().verify(token) {
            Ok(claims) if claims.role == Role::WorkerPool => Ok(PoolCaller {
                agents: swarmd_engine::auth::pool_agents(&claims.sub),
                verbs: claims.verbs,
            }),
            Ok(_) => {
                state.metrics.token_failure("forbidden");
                Err(ApiError::forbidden())
            }
            Err(error) => Err(refused(state, token, error.reason(), error.public_code())),
        }
    }
}
