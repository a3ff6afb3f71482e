//! `swarmd mcp`: the daemon's MCP tools on stdio, relayed to its `/mcp`.
//!
//! The tools have one implementation, the daemon's. This process is an MCP
//! server on stdin/stdout and an rmcp client of `<url>/mcp` with the bearer
//! it was given: it lists the daemon's tools, forwards each call, relays the
//! daemon's progress notifications under the progress token the stdio client
//! chose, and forwards a cancellation of a call as a cancellation upstream.
//! Logs go to stderr; stdout carries only the protocol.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientRequest, ErrorCode, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ResultType, ServerConfig, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};

/// Why `swarmd mcp` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot reach the daemon's MCP endpoint {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("MCP on stdio: {0}")]
    Stdio(String),
}

/// Upstream progress tokens mapped to the stdio call they belong to.
type Forwards = Arc<Mutex<HashMap<ProgressToken, (ProgressToken, Peer<RoleServer>)>>>;

/// Serves the daemon's tools on stdio until stdin closes.
///
/// # Errors
/// When the daemon cannot be reached or refuses the credential, or stdio fails.
pub async fn serve_stdio(base_url: &str, bearer: &str) -> Result<(), ProxyError> {
    let url = format!("{}/mcp", base_url.trim_end_matches('/'));
    let forwards = Forwards::default();
    let config = StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(bearer);
    let transport = StreamableHttpClientTransport::from_config(config);
    let upstream = Upstream {
        forwards: forwards.clone(),
    }
    .serve(transport)
    .await
    .map_err(|e| ProxyError::Connect {
        url: url.clone(),
        reason: e.to_string(),
    })?;
    let info = upstream
        .peer()
        .peer_info()
        .map(|info| {
            ServerConfig::new(info.capabilities.clone())
                .with_server_info(info.server_info.clone().unwrap_or_default())
                .with_instructions(info.instructions.clone().unwrap_or_default())
        })
        .unwrap_or_default();
    tracing::info!(url = %url, "relaying the daemon's MCP tools on stdio");
    let relay = Relay {
        upstream: upstream.peer().clone(),
        forwards,
        info,
    };
    let served = relay
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ProxyError::Stdio(e.to_string()))?;
    let ended = served.waiting().await;
    // Closing the upstream session tells the daemon to drop its state.
    let _ = upstream.cancel().await;
    ended
        .map(|_| ())
        .map_err(|e| ProxyError::Stdio(e.to_string()))
}

/// The client side: relays the daemon's progress notifications.
#[derive(Debug)]
struct Upstream {
    forwards: Forwards,
}

impl ClientHandler for Upstream {
    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let target = self
            .forwards
            .lock()
            .ok()
            .and_then(|map| map.get(&params.progress_token).cloned());
        if let Some((token, peer)) = target {
            params.progress_token = token;
            if let Err(error) = peer.notify_progress(params).await {
                tracing::debug!(%error, "progress not relayed");
            }
        }
    }
}

/// The stdio side: serves what the daemon serves.
#[derive(Debug)]
struct Relay {
    upstream: Peer<RoleClient>,
    forwards: Forwards,
    info: ServerConfig,
}

impl Relay {
    fn forget(&self, token: &ProgressToken) {
        if let Ok(mut map) = self.forwards.lock() {
            map.remove(token);
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
        let mut listed = self
            .upstream
            .list_tools(request)
            .await
            .map_err(upstream_error)?;
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
        let call = ClientRequest::CallToolRequest(CallToolRequest::new(request));
        let handle = self
            .upstream
            .send_cancellable_request(call, PeerRequestOptions::no_options())
            .await
            .map_err(upstream_error)?;
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
                let _ = self
                    .upstream
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                    .await;
                return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
            }
        };
        self.forget(&upstream_token);
        match answer {
            Ok(Ok(ServerResult::CallToolResult(mut result))) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Ok(result.into())
            }
            Ok(Ok(_)) => Err(ErrorData::internal_error(
                "the daemon answered tools/call with another result",
                None,
            )),
            Ok(Err(error)) => Err(upstream_error(error)),
            Err(_) => Err(upstream_error(ServiceError::TransportClosed)),
        }
    }
}
