//! `/mcp`: rmcp's Streamable HTTP service on the daemon's router, behind the
//! bearer check of the other routes and the session ledger.
//!
//! Every request is authenticated on its own (the admin token or an operator
//! session's `sws-` token; role tokens get 403) and the caller rides in the
//! request's extensions to the tool handler, which acts with its rights. A
//! session's request also counts it present (`mcp.presence_secs`). A request
//! naming an MCP session is let through only for the credential that opened
//! it, and one that may open a session takes a place in that credential's
//! share first (`ledger`). A session opened before a restart (or closed
//! idle) comes back for its opener from the session file (`session_file`).
//! A DELETE that closes a session is answered `200`, as the official SDKs
//! expect; a resume of an event stream rmcp cannot resume (among them any
//! request's stream of a previous life of the session: event ids name the
//! life that sent them, `stream_ids`) is answered `404`, so the client
//! fails the request rather than resuming forever.
//! rmcp answers only the `Host` names the daemon is reached by and
//! browser pages of its own origins. The router's middleware
//! (body limit, sensitive `Authorization`, counts, JSON errors) applies as
//! for any route; rmcp also cuts a body past `limits.max_body_bytes` while
//! streaming it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::common::http_header::{
    HEADER_LAST_EVENT_ID as LAST_EVENT_ID, HEADER_SESSION_ID,
};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use swarmd_engine::ErrorCode;
use tokio_util::sync::CancellationToken;

use super::ledger::{Credential, Ledger, Refusal, Slot};
use super::session_file::SessionFile;
use super::stream_ids::TaggedSessions;
use super::{SwarmdTools, catalogue};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::extract::unread_body;
use swarmd_config::Config;

/// How long MCP streams outlive the start of a drain.
const STREAMS_GRACE: Duration = Duration::from_secs(1);

/// The `Retry-After` of a refused new session, in seconds: sessions close
/// when their client deletes them or after five idle minutes, so a place
/// may free at any time.
const RETRY_AFTER_SECS: &str = "30";

/// The `/mcp` route.
pub fn routes(state: &AppState) -> Router<AppState> {
    let limit = usize::try_from(state.config.limits.max_body_bytes).unwrap_or(usize::MAX);
    let mcp = &state.config.mcp;
    let (total, per_credential) = (
        usize::try_from(mcp.max_sessions).unwrap_or(usize::MAX),
        usize::try_from(mcp.max_sessions_per_credential).unwrap_or(usize::MAX),
    );
    let file = Arc::new(SessionFile::open(
        &state.config.store.state_dir,
        total.saturating_add(per_credential),
    ));
    let closed = closing(state);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(&state.config, state.bound, &state.base_url))
        .with_allowed_origins(allowed_origins(&state.config, &state.base_url))
        .with_max_request_body_bytes(limit)
        .with_cancellation_token(closed.clone());
    config.session_store = Some(file.clone());
    let tools = Arc::new(catalogue(state.config.mcp.upstream_aliases));
    let for_service = state.clone();
    let sessions = Arc::new(TaggedSessions::new());
    let service = StreamableHttpService::new(
        move || Ok(SwarmdTools::new(for_service.clone(), tools.clone())),
        sessions.clone(),
        config,
    );
    let gate = Gate {
        state: state.clone(),
        sessions,
        ledger: Ledger::new(total, per_credential),
        file,
        closed,
    };
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(gate, authorize))
}

/// The `Host` names rmcp answers (a page rebinding its own name to this
/// address is refused): the loopback names, the bound address, and the
/// hosts of the base URL (`server.base_url` or the one derived from the
/// bound address), `cluster.advertise_url` and `server.allowed_hosts`. An
/// entry without a port matches any port.
fn allowed_hosts(config: &Config, bound: SocketAddr, base_url: &str) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
    if !bound.ip().is_unspecified() {
        hosts.push(bound.ip().to_string());
    }
    let advertised = config.cluster.as_ref();
    let urls = [
        Some(base_url),
        advertised.and_then(|cluster| cluster.advertise_url.as_deref()),
    ];
    hosts.extend(urls.into_iter().flatten().filter_map(url_host));
    hosts.extend(config.server.allowed_hosts.iter().cloned());
    hosts
}

/// The origins whose browser pages rmcp answers (a request without `Origin`
/// is not a page's): loopback pages on any port, the origin of the base
/// URL, and `server.allowed_origins`.
fn allowed_origins(config: &Config, base_url: &str) -> Vec<String> {
    let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect();
    if let Ok(base) = base_url.parse::<Uri>()
        && let (Some(scheme), Some(authority)) = (base.scheme_str(), base.authority())
    {
        let port = authority
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        origins.push(format!("{scheme}://{}:{port}", authority.host()));
    }
    origins.extend(config.server.allowed_origins.iter().cloned());
    origins
}

/// The host of a configured URL.
fn url_host(url: &str) -> Option<String> {
    let uri = url.parse::<Uri>().ok()?;
    uri.host().map(str::to_owned)
}

/// What the middleware in front of rmcp needs.
#[derive(Clone)]
struct Gate {
    state: AppState,
    sessions: Arc<TaggedSessions>,
    ledger: Arc<Ledger>,
    file: Arc<SessionFile>,
    /// Fired once rmcp has closed its sessions (the drain's grace is over):
    /// every request is then answered 503 `draining`, as the REST routes'.
    closed: CancellationToken,
}

/// What became of a request naming a session this daemon does not hold.
enum Revival {
    /// The file records it for this credential: it is the credential's
    /// again, and rmcp restores it from the file.
    Revived,
    /// No such session for this credential.
    Unknown,
    /// The credential (or the operators) hold their whole share.
    Refused(Refusal),
}

impl Gate {
    /// A place for one more session of `credential`, after forgetting the
    /// sessions rmcp has closed.
    async fn reserve(&self, credential: Credential) -> Result<Slot, Refusal> {
        let open = self.sessions.local().sessions.read().await;
        self.ledger.reserve(credential, |id| open.contains_key(id))
    }

    /// Takes back session `id` for `credential` when the file records it as
    /// that credential's: a place in its share, bound to the id.
    async fn revive(&self, id: &str, credential: &Credential) -> Revival {
        if self.file.owner(id).as_ref() != Some(credential) {
            return Revival::Unknown;
        }
        match self.reserve(credential.clone()).await {
            Ok(slot) => {
                slot.bind(id.to_owned());
                Revival::Revived
            }
            Err(refusal) => Revival::Refused(refusal),
        }
    }
}

/// Fires `STREAMS_GRACE` after the daemon starts draining: a waiting tool
/// call ends at the drain and still sends what it has, then rmcp closes its
/// sessions and streams so the HTTP server can stop.
fn closing(state: &AppState) -> CancellationToken {
    let token = CancellationToken::new();
    let (shutdown, fire) = (state.shutdown.clone(), token.clone());
    state.tasks.spawn(async move {
        shutdown.cancelled().await;
        tokio::time::sleep(STREAMS_GRACE).await;
        fire.cancel();
    });
    token
}

/// Resolves the bearer as the HTTP routes do and hands the caller on; lets
/// a request naming a session through only for its opener; refuses a new
/// session past the credential's share or the operators' table.
async fn authorize(
    State(gate): State<Gate>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let response = admit(&gate, request, next).await?;
    Ok(explained(response).await)
}

/// rmcp refuses a foreign `Host` or `Origin` with a plain-text 403: the
/// answer keeps its reason in the `{error, code}` body.
async fn explained(response: Response) -> Response {
    let plain = !response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if response.status() != StatusCode::FORBIDDEN || !plain {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), 512)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    ApiError::coded(ErrorCode::Forbidden, text).into_response()
}

async fn admit(gate: &Gate, request: Request, next: Next) -> Result<Response, ApiError> {
    let state = &gate.state;
    let (mut parts, body) = request.into_parts();
    let caller = Caller::from_request_parts(&mut parts, state).await?;
    let credential = match &caller {
        Caller::Token { .. } => {
            state.metrics.token_failure("forbidden");
            return Err(ApiError::forbidden());
        }
        // Any request (a tool call, a ping, the event stream) keeps the
        // session present: MCP clients hold no socket (docs/mcp.md, Presence).
        Caller::Operator(session) => {
            let arrived = !session.connected();
            session.touch(state.engine.clock().now_ms());
            session.mark_present(Duration::from_secs(state.config.mcp.presence_secs));
            if arrived {
                state.engine.wake_waiting();
            }
            Credential::Operator(session.sid)
        }
        Caller::Admin => Credential::Admin,
    };
    if gate.closed.is_cancelled() {
        return Err(swarmd_engine::EngineError::Draining.into());
    }
    parts.extensions.insert(caller);

    // rmcp reads a session id only as text; any other value names none.
    let named = parts
        .headers
        .get(HEADER_SESSION_ID)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = named {
        // Another credential's session answers as one that does not exist.
        if !gate.ledger.opened_by(&id, &credential) {
            match gate.revive(&id, &credential).await {
                Revival::Revived => {}
                Revival::Unknown => return Err(ApiError::not_found("MCP session")),
                Revival::Refused(refusal) => return Ok(refused(state, refusal)),
            }
        }
        let deletes = parts.method == Method::DELETE;
        let resumes = parts.method == Method::GET && parts.headers.contains_key(LAST_EVENT_ID);
        let response = next.run(Request::from_parts(parts, body)).await;
        if resumes {
            return Ok(resumed(response).await);
        }
        if deletes && response.status().is_success() {
            gate.ledger.closed(&id);
            // The official clients take 200 or 204 (the Python SDK warns
            // `Session termination failed: 202` on anything else).
            return Ok(StatusCode::OK.into_response());
        }
        return Ok(response);
    }
    if parts.method != Method::POST {
        return Ok(next.run(Request::from_parts(parts, body)).await);
    }
    let limit = usize::try_from(state.config.limits.max_body_bytes).unwrap_or(usize::MAX);
    let body = axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| unread_body(&e))?;
    if declares_json(&parts)
        && let Some(why) = not_json_rpc(&body)
    {
        return Err(ApiError::bad_request(why));
    }
    if !may_open_a_session(&body) {
        return Ok(next.run(Request::from_parts(parts, Body::from(body))).await);
    }
    if body.len() > MAX_INITIALIZE_BYTES {
        return Err(ApiError::coded(
            ErrorCode::PayloadTooLarge,
            format!("an MCP initialize request is at most {MAX_INITIALIZE_BYTES} bytes"),
        ));
    }
    let slot = match gate.reserve(credential.clone()).await {
        Ok(slot) => slot,
        Err(refusal) => return Ok(refused(state, refusal)),
    };
    // Run to the answer even if the client goes away meanwhile: a session
    // rmcp opens is always bound to its opener and counted.
    let request = Request::from_parts(parts, Body::from(body));
    let file = gate.file.clone();
    let opening = state.tasks.spawn(async move {
        let response = next.run(request).await;
        let opened = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|value| value.to_str().ok());
        if let Some(id) = opened {
            slot.bind(id.to_owned());
            // The file is written and synced: off the async workers.
            let id = id.to_owned();
            let _ = tokio::task::spawn_blocking(move || file.opened(&id, &credential)).await;
        }
        response
    });
    opening.await.map_err(|e| ApiError::internal(&e))
}

/// How long a resumed stream may stay silent before it is taken as live:
/// rmcp answers a stream it cannot resume with one that ends at once.
const RESUME_PEEK: Duration = Duration::from_millis(250);

/// The answer to a resume (`GET` with `Last-Event-ID`): rmcp's own when the
/// stream is resumed, a `404 not_found` when it ends before its first event.
/// rmcp cannot resume a stream it no longer holds (opened before the daemon
/// restarted or the session was put away idle, or its request answered and
/// gone) and answers such a resume with an empty `200` stream, which the
/// official clients take as a stream to resume again, forever; on a `4xx`
/// they retry a few times and fail the request, so its caller learns that
/// the answer will not come.
async fn resumed(response: Response) -> Response {
    use futures_util::StreamExt;

    if !response.status().is_success() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    let first = match tokio::time::timeout(RESUME_PEEK, stream.next()).await {
        Ok(None) => return unresumable(),
        Ok(Some(first)) => Some(first),
        Err(_) => None,
    };
    let body = Body::from_stream(futures_util::stream::iter(first).chain(stream));
    Response::from_parts(parts, body)
}

/// The `404` of a stream that cannot be resumed.
fn unresumable() -> Response {
    ApiError::coded(
        ErrorCode::NotFound,
        "this MCP event stream cannot be resumed (the daemon restarted, or the stream ended): \
         its request will not be answered; send it again",
    )
    .into_response()
}

/// Whether the request declares a JSON body (`application/json`, any
/// parameters); rmcp answers any other with 415, which is right.
fn declares_json(parts: &axum::http::request::Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// Why a body declared as JSON is not one JSON-RPC 2.0 message, if it is
/// not: rmcp answers such a body 415, as if its type were wrong, where the
/// client's mistake is its content (400 `bad_request`).
fn not_json_rpc(body: &[u8]) -> Option<String> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Err(e) => Some(format!("the body is not JSON: {e}")),
        Ok(serde_json::Value::Array(_)) => {
            Some("a JSON-RPC batch is not accepted: send one message per request".to_owned())
        }
        Ok(serde_json::Value::Object(map))
            if map.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0") =>
        {
            None
        }
        Ok(_) => Some(
            "the body is not a JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")"
                .to_owned(),
        ),
    }
}

/// The most an `initialize` request may weigh. Its params are kept for the
/// session's life and in the session file, which is rewritten whole at
/// each open, so they are bounded far below the body limit; real clients
/// send a few hundred bytes to a few KiB.
pub(crate) const MAX_INITIALIZE_BYTES: usize = 32 * 1024;

/// Whether a POST that names no session may open one: only an `initialize`
/// does, so anything but a JSON object naming another method may (what
/// cannot be read here is counted rather than let through uncounted).
fn may_open_a_session(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Message>(body).map_or(true, |message| {
        message.method.as_deref() == Some("initialize")
    })
}

/// The 429 of a new session past a cap, counted.
fn refused(state: &AppState, refusal: Refusal) -> Response {
    state.metrics.mcp_session_refused(refusal.reason());
    let message = match refusal {
        Refusal::Credential => format!(
            "this credential holds {} MCP sessions (mcp.max_sessions_per_credential); \
             close one or wait for idle ones to expire",
            state.config.mcp.max_sessions_per_credential
        ),
        Refusal::Total => format!(
            "{} MCP sessions are open (mcp.max_sessions); \
             close one or wait for idle ones to expire",
            state.config.mcp.max_sessions
        ),
    };
    let mut response = ApiError::coded(ErrorCode::TooManySessions, message).into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_may_be_an_initialize_may_open_a_session() {
        let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert!(may_open_a_session(initialize));
        // What cannot be told apart is counted too.
        assert!(may_open_a_session(b"not json"));
        assert!(may_open_a_session(br#"[{"method":"initialize"}]"#));
        let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#;
        assert!(!may_open_a_session(call));
        assert!(!may_open_a_session(
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#
        ));
    }

    #[tokio::test]
    async fn a_resume_whose_stream_ends_at_once_is_a_404_and_a_live_one_is_kept() {
        let sse = |body: Body| {
            let mut response = Response::new(body);
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            response
        };
        let empty = resumed(sse(Body::empty())).await;
        assert_eq!(empty.status(), StatusCode::NOT_FOUND);
        let text = axum::body::to_bytes(empty.into_body(), 4096).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(body["code"], "not_found", "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("cannot be resumed")
        );

        let replayed = resumed(sse(Body::from("id: 3/2\ndata: {}\n\n"))).await;
        assert_eq!(replayed.status(), StatusCode::OK);
        let text = axum::body::to_bytes(replayed.into_body(), 4096)
            .await
            .unwrap();
        assert_eq!(&text[..], b"id: 3/2\ndata: {}\n\n");

        // A stream that stays silent is live: it is answered as it is.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<&'static str, std::io::Error>>(1);
        let silent = sse(Body::from_stream(tokio_stream_of(rx)));
        let live = resumed(silent).await;
        assert_eq!(live.status(), StatusCode::OK);
        tx.send(Ok("data: late\n\n")).await.unwrap();
        drop(tx);
        let text = axum::body::to_bytes(live.into_body(), 4096).await.unwrap();
        assert_eq!(&text[..], b"data: late\n\n");
        let refused = resumed(StatusCode::NOT_FOUND.into_response()).await;
        assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    }

    fn tokio_stream_of<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Send {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    #[test]
    fn a_body_that_is_not_one_json_rpc_message_is_named() {
        let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#;
        assert_eq!(not_json_rpc(call), None);
        for (body, says) in [
            (&b"{{{"[..], "not JSON"),
            (b"", "not JSON"),
            (b"[]", "batch"),
            (br#"{"id":1,"method":"ping"}"#, "JSON-RPC 2.0"),
            (b"1e400", "not JSON"),
        ] {
            let why = not_json_rpc(body).unwrap();
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn rmcp_answers_loopback_the_bound_address_and_the_configured_names() {
        let mut config = Config::default();
        config.server.allowed_hosts = vec!["proxy.example".into()];
        config.server.allowed_origins = vec!["https://ui.example".into()];
        let bound: SocketAddr = "10.0.0.7:7700".parse().unwrap();
        let hosts = allowed_hosts(&config, bound, "https://swarm.example/base");
        for host in [
            "localhost",
            "127.0.0.1",
            "::1",
            "10.0.0.7",
            "swarm.example",
            "proxy.example",
        ] {
            assert!(hosts.iter().any(|h| h == host), "{host}: {hosts:?}");
        }
        let unspecified: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let hosts = allowed_hosts(&config, unspecified, "http://127.0.0.1:7700");
        assert!(!hosts.iter().any(|h| h == "0.0.0.0"), "{hosts:?}");

        let origins = allowed_origins(&config, "https://swarm.example/base");
        for origin in [
            "http://localhost:*",
            "http://127.0.0.1:*",
            "https://swarm.example:443",
            "https://ui.example",
        ] {
            assert!(origins.iter().any(|o| o == origin), "{origin}: {origins:?}");
        }
    }
}
