//! The stdio side of `swarmd mcp`: an MCP server that serves what the
//! daemon serves. It lists the daemon's tools, forwards each call on the
//! link's live client, relays progress under the stdio client's own token
//! and a cancellation upstream. A call that finds the daemon away waits for
//! the link, up to its patience; one the daemon's restart interrupted is
//! sent again only when it never reached the daemon, the daemon refused
//! its bearer (the link logs in anew) or its tool is read-only, and
//! otherwise answers `unavailable`, saying it may have run.
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
            .map(|reason| format!(" (last: {reason})"))
            .unwrap_or_default();
        let next = if may_have_run {
            "the call may have run: check with `tasks` (or `task`) before sending it again"
        } else {
            "try again later"
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
                    if Instant::now() >= deadline {
                        return Ok(self.unavailable(false));
                    }
                }
            }
        }
    }
}
