//! `swarmd-client`: a Rust client of the swarmd daemon's API, the code
//! behind the CLI's remote commands and usable by other programs: the task
//! routes (`swarmd task …`, `branch`), the flow and run routes (`swarmd
//! flow …`, `flow`), the event tail, the pool routes' bodies shared with
//! the daemon (`wire`), the stdio MCP relay (`swarmd mcp`, `mcp`), and the
//! human tables (`render`), all against docs/protocol.md and docs/mcp.md.
//! It links no engine, store or spawner (only `swarmd-types`' ids and
//! codes); the worker wrapper and pools, which run children, are
//! `swarmd-worker`, over this crate.
//!
//! One `ApiClient` holds the base URL and the bearer credential (replaceable,
//! for a worker that adopts a fresh token); every verb
//! group adds its calls in its own file, and the request helpers (`get`,
//! `post`, `send`, `send_json`) are public for calls it does not wrap.
//! Server errors arrive as `{"error", "code"}` bodies and become
//! `ClientError::Status`.

mod branch;
pub mod flow;
pub mod mcp;
pub mod render;
mod resolve;
mod tail;
mod task;
pub mod wire;

use std::error::Error as _;
use std::fmt;
use std::io;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::Value;

pub use branch::branch_table;
pub use flow::{LintProblem, RunQuery, RunRequest, RunStart};
pub use resolve::{SCAN_LIMIT, tail_of};
pub use tail::{SseEvent, SseParser, TailOptions};
pub use task::{SpawnRequest, TaskQuery};

/// Timeout for requests that do not wait server-side.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Time to establish a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A bearer credential (token, handle or session secret). `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer(String);

impl Bearer {
    /// Wraps a credential; surrounding whitespace (a newline read from a file) is dropped.
    pub fn new(value: impl AsRef<str>) -> Bearer {
        Bearer(value.as_ref().trim().to_owned())
    }

    fn header(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bearer(<redacted>)")
    }
}

/// A client of one daemon, authenticated with one credential.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base_url: String,
    /// Shared by every clone, so that a replaced credential (see
    /// `set_bearer`) is what all of them send from then on.
    bearer: Arc<RwLock<Bearer>>,
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL `{url}`: expected http://host:port or https://host:port")]
    BadUrl { url: String },
    #[error("request to {url} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("{url} answered HTTP {status}{}: {message}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    Status {
        url: String,
        status: u16,
        code: Option<String>,
        message: String,
    },
    #[error("invalid response from {url}: {reason}")]
    Decode { url: String, reason: String },
    #[error("`{given}`: {reason}")]
    Unresolved { given: String, reason: String },
    #[error("cannot {action}: {source}")]
    Io {
        action: &'static str,
        #[source]
        source: io::Error,
    },
}

impl ApiClient {
    /// A client for the daemon at `base_url`: `http://host:port`, or
    /// `https://host:port` (a TLS-terminating proxy in front of it), whose
    /// certificate is checked against the system's roots (`SSL_CERT_FILE`
    /// and `SSL_CERT_DIR` name others).
    ///
    /// # Errors
    /// `BadUrl` unless `base_url` is an `http://` or `https://` URL.
    pub fn new(base_url: &str, bearer: Bearer) -> Result<ApiClient, ClientError> {
        let base_url = base_url.trim_end_matches('/');
        let host = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
            .unwrap_or_default();
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(ClientError::BadUrl {
                url: base_url.to_owned(),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|error| request_error(base_url, &error))?;
        Ok(ApiClient {
            http,
            base_url: base_url.to_owned(),
            bearer: Arc::new(RwLock::new(bearer)),
        })
    }

    /// A client of the same daemon over the same connections, sending
    /// `bearer` instead (a pool writes each attempt with its own handle).
    pub fn with_bearer(&self, bearer: Bearer) -> ApiClient {
        ApiClient {
            http: self.http.clone(),
            base_url: self.base_url.clone(),
            bearer: Arc::new(RwLock::new(bearer)),
        }
    }

    /// Replaces the credential this client and all its clones send.
    pub fn set_bearer(&self, bearer: Bearer) {
        *self.bearer.write().unwrap_or_else(PoisonError::into_inner) = bearer;
    }

    /// Whether the credential is a worker handle (`wh-…`) rather than a token.
    pub fn sends_handle(&self) -> bool {
        self.bearer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .starts_with("wh-")
    }

    fn authorization(&self) -> String {
        self.bearer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .header()
    }

    /// The daemon's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The absolute URL of `path` (which starts with `/`) on this daemon.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// A `GET` of `path` carrying the credential.
    pub fn get(&self, path: &str) -> RequestBuilder {
        self.http
            .get(self.url(path))
            .header(reqwest::header::AUTHORIZATION, self.authorization())
    }

    /// A `POST` to `path` carrying the credential.
    pub fn post(&self, path: &str) -> RequestBuilder {
        self.http
            .post(self.url(path))
            .header(reqwest::header::AUTHORIZATION, self.authorization())
    }

    /// Sends `request` and returns its response when the status is a
    /// success (`url` names the request in errors).
    pub async fn send(&self, request: RequestBuilder, url: &str) -> Result<Response, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|error| request_error(url, &error))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(status_error(url, response).await)
        }
    }

    /// Sends `request` and parses a JSON body; an empty body is `null`.
    pub async fn send_json(
        &self,
        request: RequestBuilder,
        url: &str,
    ) -> Result<Value, ClientError> {
        let body = self
            .send(request, url)
            .await?
            .bytes()
            .await
            .map_err(|error| request_error(url, &error))?;
        if body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).map_err(|error| ClientError::Decode {
            url: url.to_owned(),
            reason: error.to_string(),
        })
    }
}

/// A transport error with its causes on one line ("connection refused" is
/// usually a cause, not the top message).
fn request_error(url: &str, error: &reqwest::Error) -> ClientError {
    let mut reason = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    ClientError::Request {
        url: url.to_owned(),
        reason,
    }
}

/// The server's error body, `{"error": "...", "code": "..."}`, or its text.
async fn status_error(url: &str, response: Response) -> ClientError {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
        code: Option<String>,
    }
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let (message, code) = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => (body.error, body.code),
        Err(_) if text.trim().is_empty() => (
            status.canonical_reason().unwrap_or("error").to_owned(),
            None,
        ),
        Err(_) => (text.trim().chars().take(300).collect(), None),
    };
    ClientError::Status {
        url: url.to_owned(),
        status: status.as_u16(),
        code,
        message: message.replace('\n', " "),
    }
}

/// Whether a status is worth retrying: the daemon is draining or overloaded.
pub fn is_transient(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
    )
}

#[cfg(test)]
mod tests;
