//! The stdio side of `swarmd mcp`: an MCP server that serves what the
//! daemon serves. It lists the daemon's tools, forwards each call on the
//! link's live client, relays progress under the stdio client's own token
//! and a cancellation upstream. A call that finds the daemon away waits for
//! the link, up to its patience; one the daemon's restart interrupted is
//! sent again only when it never reached the daemon, the daemon refused
//! its bearer (the link logs in anew) or its tool is read-only, and
//! otherwise answers `unavailable`, saying it may have run. A call whose
//! answer cannot come any more counts as interrupted too: its response
//! stream was lost and not resumed, or it is overdue past its own deadline.
//! A call the daemon refused over HTTP (a 4xx: too large, too fast) gets
//! the daemon's `{error, code}` as its tool error, never a retry.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientRequest, ContentBlock, ErrorCode, ListToolsResult,
    PaginatedRequestParams, ProgressToken, ResultType, ServerConfig, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler};
use serde_json::json;
use tokio::time::Instant;

use super::link::{Down, Forwards, Link, bearer_refused, never_reached, refusal};

/// The stdio side: serves what the daemon serves.
#[derive(Debug)]
pub(super) struct Relay {
    link: Link,
    forwards: Forwards,
    info: ServerConfig,
    /// Tools the daemon marks read-only: a call of one that the daemon's
    /// restart interrupted is sent again.
    read_only: Arc<Mutex<HashSet<String>>>,
    /// The daemon's base URL, for messages.
    url: String,
    /// How long a call waits for an absent daemon.
    patience: Duration,
}

/// One try of a call on one upstream client.
enum Try {
    Done(Result<CallToolResponse, ErrorData>),
    /// The client broke; `again` when sending the call again is safe
    /// (otherwise the daemon may have run it).
    Lost {
        again: bool,
    },
}

/// The most times one call is sent before it answers `unavailable`.
const MAX_TRIES: u32 = 5;

/// A tool error whose text is `body` (`{error, code}`).
fn tool_error(body: &serde_json::Value) -> CallToolResponse {
    let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    result.result_type.get_or_insert(ResultType::COMPLETE);
    result.into()
}

impl Relay {
    /// A relay whose first upstream client is `first`: its server info is
    /// served as the relay's own.
    pub(super) fn new(
        link: Link,
        first: &Peer<RoleClient>,
        forwards: Forwards,
        url: &str,
        patience: Duration,
    ) -> Relay {
        Relay {
            link,
            forwards,
            info: server_info(first),
            read_only: Arc::default(),
            url: url.to_owned(),
            patience,
        }
    }

    fn forget(&self, token: &ProgressToken) {
        if let Ok(mut map) = self.forwards.lock() {
            map.remove(token);
        }
    }

    fn is_read_only(&self, name: &str) -> bool {
        self.read_only.lock().is_ok_and(|set| set.contains(name))
    }

    /// The tool result a model reads when the daemon stays away; `may_have_run`
    /// when the call reached the daemon before the link broke.
    fn unavailable(&self, may_have_run: bool) -> CallToolResponse {
        let last = match self.link.last_error() {
            Some(Down::Refused { login }) => return self.unauthorized(login.as_deref()),
            Some(Down::Away(reason)) => Some(reason),
            None => None,
        };
        let cause = last
            .map(|reason| format!(" (last: {})", plain_cause(&reason)))
            .unwrap_or_default();
        let next = if may_have_run {
            "the call may have run: check with `tasks` (or `task`) before sending it again"
        } else {
            "the call was not run: try again in a minute, or check that the daemon is running"
        };
        tool_error(&json!({
            "error": format!(
                "the daemon at {} did not answer within {} s{cause}; {next}",
                self.url,
                self.patience.as_secs()
            ),
            "code": swarmd_types::ErrorCode::Unavailable.as_str(),
        }))
    }

    /// The tool result a model reads when the daemon refuses the relay's
    /// session; `login` is why logging in anew failed, when the relay can
    /// log in (it keeps trying).
    fn unauthorized(&self, login: Option<&str>) -> CallToolResponse {
        let gone = format!(
            "the daemon at {} no longer accepts this relay's session (it was ended, or the \
             daemon's store no longer holds it)",
            self.url
        );
        let error = match login {
            Some(login) => {
                format!("{gone} and a new login failed ({login}); the relay tries again")
            }
            None => format!("{gone}: restart swarmd mcp to log in again"),
        };
        tool_error(&json!({
            "error": error,
            "code": swarmd_types::ErrorCode::Unauthorized.as_str(),
        }))
    }

    /// Sends the call on `peer` and relays its progress and cancellation.
    async fn try_call(
        &self,
        peer: &Peer<RoleClient>,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Try {
        let read_only = self.is_read_only(&request.name);
        let bound = own_bound(&request, read_only);
        let call = ClientRequest::CallToolRequest(CallToolRequest::new(request));
        let handle = match peer
            .send_cancellable_request(call, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(ServiceError::McpError(error)) => return Try::Done(Err(error)),
            // Not sent: the client is closed.
            Err(_) => return Try::Lost { again: true },
        };
        let upstream_token = handle.progress_token.clone();
        let id = handle.id.clone();
        if let (Some(token), Ok(mut map)) =
            (context.meta.get_progress_token(), self.forwards.lock())
        {
            map.insert(upstream_token.clone(), (token, context.peer.clone()));
        }
        let answer = tokio::select! {
            answer = handle.rx => answer,
            () = past(bound) => {
                // The answer is overdue: its stream was lost with the daemon.
                self.forget(&upstream_token);
                let reason = Some("no answer past the call's own deadline".to_owned());
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                    .await;
                tracing::debug!("a call got no answer past its own deadline");
                return Try::Lost { again: read_only };
            }
            () = context.ct.cancelled() => {
                self.forget(&upstream_token);
                let reason = Some("cancelled by the stdio client".to_owned());
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                    .await;
                return Try::Done(Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "cancelled", None)));
            }
        };
        self.forget(&upstream_token);
        match answer {
            Ok(Ok(ServerResult::CallToolResult(mut result))) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Try::Done(Ok(result.into()))
            }
            Ok(Ok(_)) => Try::Done(Err(ErrorData::internal_error(
                "the daemon answered tools/call with another result",
                None,
            ))),
            // The call's response stream ended and could not be resumed
            // (the daemon restarted): its answer cannot come any more.
            Ok(Err(ServiceError::McpError(error))) if stream_lost(&error) => {
                tracing::debug!(%error, "a call lost its response stream");
                Try::Lost { again: read_only }
            }
            Ok(Err(ServiceError::McpError(error))) => Try::Done(Err(error)),
            Ok(Err(error)) => match refusal(&error) {
                Some(answer) => Try::Done(Ok(tool_error(&answer))),
                None => {
                    tracing::debug!(%error, "a call lost its upstream");
                    Try::Lost {
                        again: read_only || never_reached(&error) || bearer_refused(&error),
                    }
                }
            },
            Err(_) => Try::Lost { again: read_only },
        }
    }
}

/// Past a call's own deadline (its `timeout_secs`, as `wait` has) by this
/// much, a call still unanswered is taken as lost with its stream.
const OVERDUE: Duration = Duration::from_secs(30);

/// How long a read-only call without a `timeout_secs` may take: `wait`'s
/// default; the other read-only tools answer at once.
const READ_ONLY_SECS: Duration = Duration::from_secs(60);

/// How long a call may take before its answer is overdue: its own
/// `timeout_secs` and `OVERDUE`; `READ_ONLY_SECS` and `OVERDUE` for a
/// read-only call without one; none for any other call.
fn own_bound(request: &CallToolRequestParams, read_only: bool) -> Option<Duration> {
    let asked = request
        .arguments
        .as_ref()
        .and_then(|a| a.get("timeout_secs"));
    let Some(secs) = asked.and_then(serde_json::Value::as_f64) else {
        return read_only.then_some(READ_ONLY_SECS + OVERDUE);
    };
    let secs = if secs.is_finite() {
        secs.clamp(0.0, 86_400.0)
    } else {
        0.0
    };
    Some(Duration::from_secs_f64(secs) + OVERDUE)
}

/// Sleeps `bound`; never, for none.
async fn past(bound: Option<Duration>) {
    match bound {
        Some(bound) => tokio::time::sleep(bound).await,
        None => std::future::pending().await,
    }
}

/// Whether rmcp's client failed the call because its response stream
/// closed before the answer and could not be resumed: it marks such an
/// error with `TRANSPORT_CLOSED` in its data.
fn stream_lost(error: &ErrorData) -> bool {
    error.code == ErrorCode::INTERNAL_ERROR
        && error
            .data
            .as_ref()
            .and_then(|data| data.get(TRANSPORT_CLOSED))
            .is_some()
}

/// The key rmcp's client sets in the data of an error it makes for a call
/// whose transport closed.
const TRANSPORT_CLOSED: &str = "io.modelcontextprotocol/transportClosed";

/// Why the daemon could not be reached, in words a model can act on: the
/// kind of failure the connection error names, else its text without the
/// Rust type names rmcp puts in it, kept short.
fn plain_cause(reason: &str) -> String {
    let lower = reason.to_ascii_lowercase();
    let known = [
        (
            "connection refused",
            "connection refused: the daemon is not listening",
        ),
        ("connecterror", "the connection could not be made"),
        (
            "error sending request",
            "the connection could not be made: the daemon is not running or not reachable",
        ),
        ("dns error", "the daemon's host name does not resolve"),
        (
            "no answer within",
            "the daemon did not answer the connection in time",
        ),
        ("timed out", "the connection timed out"),
        ("connection reset", "the connection was reset"),
    ];
    if let Some((_, plain)) = known.iter().find(|(key, _)| lower.contains(key)) {
        return (*plain).to_owned();
    }
    if let Some((_, answer)) = reason.split_once("HTTP ") {
        return format!("HTTP {}", shortened(answer, 120));
    }
    // Drop `[rmcp::…<…>]` and other bracketed type names.
    let mut plain = String::with_capacity(reason.len());
    let mut depth = 0_usize;
    for c in reason.chars() {
        match c {
            '[' | '<' => depth += 1,
            ']' | '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    shortened(&plain, 160)
}

/// `text` cut to at most `max` characters, marked with `…` when cut.
fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// What the daemon says about itself, served as the relay's own.
fn server_info(peer: &Peer<RoleClient>) -> ServerConfig {
    peer.peer_info()
        .map(|info| {
            ServerConfig::new(info.capabilities.clone())
                .with_server_info(info.server_info.clone().unwrap_or_default())
                .with_instructions(info.instructions.clone().unwrap_or_default())
        })
        .unwrap_or_default()
}

/// An upstream failure as the stdio client sees it: the daemon's own
/// JSON-RPC error as is, a transport fault as an internal error.
fn upstream_error(error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(error) => error,
        other => ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!("the daemon's MCP endpoint failed: {other}"),
            None,
        ),
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let deadline = Instant::now() + self.patience;
        let mut after = 0;
        let mut listed = loop {
            let Some(live) = self.link.live_after(after, deadline).await else {
                return Err(ErrorData::internal_error(
                    format!("the daemon at {} is unavailable", self.url),
                    None,
                ));
            };
            match live.peer.list_tools(request.clone()).await {
                Ok(listed) => break listed,
                Err(ServiceError::McpError(error)) => return Err(error),
                Err(error) => {
                    tracing::debug!(%error, "tools/list lost its upstream");
                    self.link.broken(live.generation);
                    after = live.generation;
                    if Instant::now() >= deadline {
                        return Err(upstream_error(error));
                    }
                }
            }
        };
        if let Ok(mut read_only) = self.read_only.lock() {
            for tool in &listed.tools {
                if tool.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true) {
                    read_only.insert(tool.name.to_string());
                }
            }
        }
        // Marked for a stdio client on 2026-07-28; rmcp strips it for older ones.
        listed.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(listed)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The upstream request carries a progress token of its own.
        request.meta = None;
        let mut deadline = Instant::now() + self.patience;
        let mut after = 0;
        let mut tries = 0;
        loop {
            let live = tokio::select! {
                live = self.link.live_after(after, deadline) => live,
                () = context.ct.cancelled() => {
                    return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
                }
            };
            let Some(live) = live else {
                return Ok(self.unavailable(false));
            };
            match self.try_call(&live.peer, request.clone(), &context).await {
                Try::Done(result) => return result,
                Try::Lost { again } => {
                    self.link.broken(live.generation);
                    after = live.generation;
                    if !again {
                        return Ok(self.unavailable(true));
                    }
                    tries += 1;
                    if tries >= MAX_TRIES {
                        return Ok(self.unavailable(false));
                    }
                    // A call lost after a long wait still gets the whole
                    // patience for the link to come back.
                    deadline = deadline.max(Instant::now() + self.patience);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_an_outage_reads_without_rust_type_names() {
        let rmcp = "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::\
                    transport::streamable_http_client::StreamableHttpClientWorker<reqwest::async_impl::\
                    client::Client>>] error: Client error: error sending request for url \
                    (http://127.0.0.1:45417/mcp), when send initialize request";
        let plain = plain_cause(rmcp);
        assert!(!plain.contains("rmcp::") && !plain.contains('<'), "{plain}");
        assert!(plain.contains("not running"), "{plain}");
        let odd = plain_cause("Transport [a::B<c::D>] error: something else went wrong");
        assert_eq!(odd, "Transport error: something else went wrong");
        assert!(plain_cause(&"x".repeat(500)).chars().count() <= 161);
        assert!(plain_cause("unexpected server response: HTTP 503 x: {}").starts_with("HTTP 503"));
    }

    #[test]
    fn a_call_with_its_own_timeout_is_overdue_a_while_past_it() {
        let call = |arguments: serde_json::Value| {
            let mut params = CallToolRequestParams::new("wait");
            params.arguments = arguments.as_object().cloned();
            own_bound(&params, false)
        };
        assert_eq!(
            call(json!({"timeout_secs": 40})),
            Some(Duration::from_secs(40) + OVERDUE)
        );
        assert_eq!(call(json!({"task_ids": []})), None);
        assert_eq!(call(json!({"timeout_secs": "soon"})), None);
        assert_eq!(call(json!({"timeout_secs": -3})), Some(OVERDUE));
        let read = CallToolRequestParams::new("tasks");
        assert_eq!(own_bound(&read, true), Some(READ_ONLY_SECS + OVERDUE));
    }

    #[test]
    fn only_rmcps_closed_transport_mark_is_a_lost_stream() {
        let mut data = serde_json::Map::new();
        data.insert(TRANSPORT_CLOSED.to_owned(), json!(7));
        let lost = ErrorData::internal_error("stream closed", Some(data.into()));
        assert!(stream_lost(&lost));
        assert!(!stream_lost(&ErrorData::internal_error("boom", None)));
        assert!(!stream_lost(&ErrorData::invalid_params("bad", None)));
    }
}
