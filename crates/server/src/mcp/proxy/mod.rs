//! `swarmd mcp`: the daemon's MCP tools on stdio, relayed to its `/mcp`.
//!
//! The tools have one implementation, the daemon's. This process is an MCP
//! server on stdin/stdout and an rmcp client of `<url>/mcp`. By default it
//! holds one operator session (`session`): resumed from its state file
//! (`state_file`) or logged in with the credential, relayed with the
//! session's own token, and left on exit (stdin closed, SIGINT, SIGTERM)
//! unless kept. Its upstream client (`link`) pings `/mcp` on a heartbeat and
//! is replaced when the daemon restarts; a call made meanwhile waits up to
//! `--daemon-wait-secs`. It lists the daemon's tools, forwards each call, relays
//! the daemon's progress notifications under the progress token the stdio
//! client chose, and forwards a cancellation of a call upstream. Logs go to
//! stderr; stdout carries only the protocol; no credential is ever logged.

mod link;
mod session;
mod state_file;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientRequest, ContentBlock, ErrorCode, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerConfig, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;
use swarmd_engine::store::SessionKind;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::{McpArgs, McpSessionKind};
use crate::environment::Environment;
use link::{Forwards, Link, never_reached};
use session::{Operators, Seat, Secret, Wanted};
use state_file::{StateFile, StateFileError};

/// Why `swarmd mcp` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot reach the daemon's MCP endpoint {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("cannot reach the daemon at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the daemon at {url} refused {what}: {message}")]
    Refused {
        url: String,
        what: &'static str,
        message: String,
    },
    #[error("no place for the session file: pass --session-file, or set XDG_STATE_HOME or HOME")]
    NoSessionFile,
    #[error("session file: {0}")]
    SessionFile(String),
    #[error("MCP on stdio: {0}")]
    Stdio(String),
}

/// Serves the daemon's tools on stdio until stdin closes or a signal.
///
/// `credential` authorizes the login (none: a loopback login); with
/// `--no-login` it is the bearer of every `/mcp` request instead.
///
/// # Errors
/// When the daemon cannot be reached or refuses the login or the
/// credential, when the session file cannot be used, or when stdio fails.
pub async fn serve_stdio(
    args: &McpArgs,
    base_url: &str,
    credential: Option<&str>,
    env: &Environment,
) -> Result<(), ProxyError> {
    let operators = Operators::new(base_url)?;
    let credential = credential.map(Secret::new);
    let seat = match (args.no_login, credential) {
        (true, Some(credential)) => Seat::Given(credential),
        (true, None) => {
            return Err(ProxyError::Refused {
                url: operators.base().to_owned(),
                what: "a relay without a credential",
                message: "--no-login needs --token or SWARMD_TOKEN".to_owned(),
            });
        }
        (false, credential) => {
            let file = || state_file(args, operators.base(), env);
            operators
                .open(credential.as_ref(), &wanted(args), file, args.keep_session)
                .await?
        }
    };
    let patience = Duration::from_secs(args.daemon_wait_secs);
    let ended = relay(&operators, &seat, patience).await;
    operators.leave(seat).await;
    ended
}

/// The session the flags ask for.
fn wanted(args: &McpArgs) -> Wanted {
    Wanted {
        roles: args.roles.clone(),
        kind: match args.kind {
            McpSessionKind::MainAi => SessionKind::MainAi,
            McpSessionKind::Automate => SessionKind::Automate,
            McpSessionKind::Composite => SessionKind::Composite,
        },
        description: args.description.clone(),
    }
}

/// The locked state file; none when another relay holds it (this relay's
/// session is then not resumable, and says so).
fn state_file(
    args: &McpArgs,
    base: &str,
    env: &Environment,
) -> Result<Option<StateFile>, ProxyError> {
    let path = match &args.session_file {
        Some(path) => path.clone(),
        None => state_file::default_path(env, base).ok_or(ProxyError::NoSessionFile)?,
    };
    match StateFile::lock(&path) {
        Ok(file) => Ok(Some(file)),
        Err(StateFileError::Busy(path)) => {
            tracing::warn!(
                path = %path.display(),
                "another swarmd mcp uses this session file: logging in a session of our own, not resumable"
            );
            Ok(None)
        }
        Err(error) => Err(ProxyError::SessionFile(error.to_string())),
    }
}

/// Connects upstream as `seat` and serves stdio until it ends.
async fn relay(operators: &Operators, seat: &Seat, patience: Duration) -> Result<(), ProxyError> {
    let url = format!("{}/mcp", operators.base());
    let stop = CancellationToken::new();
    let _stop_on_exit = stop.clone().drop_guard();
    let forwards = Forwards::default();
    let (link, first) = link::connect(&url, seat.bearer().expose(), forwards.clone(), stop)
        .await
        .map_err(|reason| ProxyError::Connect {
            url: url.clone(),
            reason,
        })?;
    if let Seat::Own { sid, .. } = seat {
        tracing::info!(url = %url, sid = %sid, "relaying the daemon's MCP tools on stdio");
    } else {
        tracing::info!(url = %url, "relaying the daemon's MCP tools on stdio");
    }
    let relay = Relay {
        link,
        forwards,
        info: server_info(&first),
        read_only: Arc::default(),
        url: operators.base().to_owned(),
        patience,
    };
    let served = relay
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ProxyError::Stdio(e.to_string()))?;
    let cancel = served.cancellation_token();
    let waiting = served.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        ended = &mut waiting => ended,
        signal = shutdown_signal() => {
            tracing::info!(signal, "stopping");
            cancel.cancel();
            waiting.await
        }
    };
    ended
        .map(|_| ())
        .map_err(|e| ProxyError::Stdio(e.to_string()))
}

/// SIGINT or SIGTERM, by name; never, when they cannot be listened to.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
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

/// The stdio side: serves what the daemon serves.
#[derive(Debug)]
struct Relay {
    link: Link,
    forwards: Forwards,
    info: ServerConfig,
    /// Tools the daemon marks read-only: a call of one that the daemon's
    /// restart interrupted is sent again.
    read_only: Arc<Mutex<HashSet<String>>>,
    url: String,
    /// How long a call waits for an absent daemon.
    patience: Duration,
}

/// One try of a call on one upstream client.
enum Try {
    Done(Result<CallToolResponse, ErrorData>),
    /// The client broke; `again` when sending the call again is safe.
    Lost {
        again: bool,
    },
}

impl Relay {
    fn forget(&self, token: &rmcp::model::ProgressToken) {
        if let Ok(mut map) = self.forwards.lock() {
            map.remove(token);
        }
    }

    fn is_read_only(&self, name: &str) -> bool {
        self.read_only.lock().is_ok_and(|set| set.contains(name))
    }

    /// The tool result a model reads when the daemon stays away.
    fn unavailable(&self) -> CallToolResponse {
        let body = json!({
            "error": format!(
                "the daemon at {} did not answer within {} s; try again later",
                self.url,
                self.patience.as_secs()
            ),
            "code": swarmd_engine::ErrorCode::Unavailable.as_str(),
        });
        let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
        result.result_type.get_or_insert(ResultType::COMPLETE);
        result.into()
    }

    /// Sends the call on `peer` and relays its progress and cancellation.
    async fn try_call(
        &self,
        peer: &Peer<RoleClient>,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Try {
        let read_only = self.is_read_only(&request.name);
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
            Ok(Err(ServiceError::McpError(error))) => Try::Done(Err(error)),
            Ok(Err(error)) => {
                tracing::debug!(%error, "a call lost its upstream");
                Try::Lost {
                    again: read_only || never_reached(&error),
                }
            }
            Err(_) => Try::Lost { again: read_only },
        }
    }
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
        let deadline = Instant::now() + self.patience;
        let mut after = 0;
        loop {
            let live = tokio::select! {
                live = self.link.live_after(after, deadline) => live,
                () = context.ct.cancelled() => {
                    return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
                }
            };
            let Some(live) = live else {
                return Ok(self.unavailable());
            };
            match self.try_call(&live.peer, request.clone(), &context).await {
                Try::Done(result) => return result,
                Try::Lost { again } => {
                    self.link.broken(live.generation);
                    after = live.generation;
                    if !again || Instant::now() >= deadline {
                        return Ok(self.unavailable());
                    }
                }
            }
        }
    }
}
