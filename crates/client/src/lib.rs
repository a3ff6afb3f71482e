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

/// A bearer credential (token, handle or session secret) and, when known,
/// where it was read from. `Debug` hides the credential.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer {
    secret: String,
    /// The flag, variable or file it was read from, named by a 401 error.
    source: Option<String>,
}

impl Bearer {
    /// Wraps a credential; surrounding whitespace (a newline read from a file) is dropped.
    pub fn new(value: impl AsRef<str>) -> Bearer {
        Bearer {
            secret: value.as_ref().trim().to_owned(),
            source: None,
        }
    }

    /// The same credential, read from `source` (`--token`, a file's path):
    /// a daemon's 401 answer to it names `source`, never the credential.
    #[must_use]
    pub fn read_from(self, source: impl Into<String>) -> Bearer {
        Bearer {
            source: Some(source.into()),
            ..self
        }
    }

    fn header(&self) -> String {
        format!("Bearer {}", self.secret)
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
    #[error("invalid URL `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
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
    /// `BadUrl` unless `base_url` is an `http://` or `https://` URL with a
    /// host (`check_base_url`).
    pub fn new(base_url: &str, bearer: Bearer) -> Result<ApiClient, ClientError> {
        let base_url = base_url.trim_end_matches('/');
        check_base_url(base_url).map_err(|reason| ClientError::BadUrl {
            url: base_url.to_owned(),
            reason,
        })?;
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
            .secret
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
            let source = self
                .bearer
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .source
                .clone();
            Err(status_error(url, response, source.as_deref()).await)
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
    if error.is_connect() {
        reason.push_str(
            " (is the daemon running there? start it with `swarmd serve`, \
             or name another with --url or SWARMD_URL)",
        );
    }
    ClientError::Request {
        url: url.to_owned(),
        reason,
    }
}

/// Checks that `url` can be a daemon's base URL: `http://` or `https://`,
/// a host, and an optional port and path.
///
/// # Errors
/// What is wrong with `url`, as a phrase that follows it in a message.
pub fn check_base_url(url: &str) -> Result<(), String> {
    const EXPECTED: &str = "expected http://host:port or https://host:port";
    if url.contains(char::is_whitespace) {
        return Err(format!("{EXPECTED}, without spaces"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|error| format!("{EXPECTED}: {error}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{EXPECTED}, not {}://", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{EXPECTED}: it names no host"));
    }
    Ok(())
}

/// The server's error body, `{"error": "...", "code": "..."}`, or its text;
/// a 401 answer names `source`, where the refused credential was read
/// from.
async fn status_error(url: &str, response: Response, source: Option<&str>) -> ClientError {
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
    let mut message = message.replace('\n', " ");
    if let Some(source) = source.filter(|_| status == StatusCode::UNAUTHORIZED) {
        message = format!("{message} (credential from {source})");
    }
    ClientError::Status {
        url: url.to_owned(),
        status: status.as_u16(),
        code,
        message,
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
