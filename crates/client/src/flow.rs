//! `swarmd flow …`: the flow and run routes (docs/flows.md, CLI), and the
//! human renderings of their answers: the flow and run tables, a run as a
//! header and its node tree, and lint problems one per line.
//!
//! Views stay `serde_json::Value`s: the renderings read them field by
//! field, so a field the daemon adds later costs nothing and a missing one
//! prints as `-`. A run id or wait name is percent-encoded into its path
//! segment, so no argument can address another route.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::render::{clean, short_id, since, table, text};
use super::{ApiClient, Bearer, ClientError, REQUEST_TIMEOUT, request_error};

/// Extra time a client waits beyond what it asked the daemon to wait.
const WAIT_MARGIN: Duration = Duration::from_secs(30);
/// How long one read of `wait_run` waits for the run to end before it
/// looks whether the run waits on a person instead.
const WAIT_POLL_SECS: u64 = 1;
/// The widest message, reason or prompt a line shows, in columns.
const LINE_CHARS: usize = 200;

/// The body of `POST /v1/runs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRequest {
    /// A flow's name (a JSON string) or a flow's IR (an object).
    pub flow: Value,
    /// The run's input, checked against the flow's `input_schema`.
    pub input: Value,
    /// Sent as the `Idempotency-Key` header: the same key answers the same run.
    #[serde(skip)]
    pub idempotency_key: Option<String>,
}

/// The query of `GET /v1/runs`; an absent field is no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// Only runs older than this run id (the last of the previous page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One problem lint found: where (an RFC 6901 pointer into the flow), a
/// stable code, what and how to fix it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LintProblem {
    pub pointer: String,
    pub code: String,
    pub message: String,
    pub hint: String,
}

/// A refusal's body; `invalid_flow` lists the lint problems.
#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    code: Option<String>,
    problems: Option<Vec<LintProblem>>,
}

/// What `POST /v1/runs` answered.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStart {
    /// The run (`created` false: an earlier run with the same key).
    Started { view: Value, created: bool },
    /// The flow failed lint (`invalid_flow`): every problem.
    Invalid {
        message: String,
        problems: Vec<LintProblem>,
    },
}

impl ApiClient {
    /// `GET /v1/flows`: `{flows: [{name, description, hash, source, input_schema}]}`.
    ///
    /// # Errors
    /// `Request` on transport failure, `Status` for a refusal.
    pub async fn list_flows(&self) -> Result<Value, ClientError> {
        let url = self.url("/v1/flows");
        self.send_json(self.get("/v1/flows").timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `GET /v1/flows/{name}`: `{name, hash, source, flow}`.
    ///
    /// # Errors
    /// As `list_flows`; an unknown flow is `Status` 404.
    pub async fn get_flow(&self, name: &str) -> Result<Value, ClientError> {
        let path = format!("/v1/flows/{}", segment(name));
        let url = self.url(&path);
        self.send_json(self.get(&path).timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `POST /v1/flows/lint`: `{ok, hash, problems}`, checked against the
    /// daemon's agents and flows.
    ///
    /// # Errors
    /// As `list_flows`; a document that is not flow IR is `Status` 400
    /// `invalid_flow`.
    pub async fn lint_flow(&self, flow: &Value) -> Result<Value, ClientError> {
        let path = "/v1/flows/lint";
        let url = self.url(path);
        let body = serde_json::json!({ "flow": flow });
        let request = self.post(path).json(&body).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }

    /// `POST /v1/runs`: starts a run, or answers the run an earlier request
    /// with the same idempotency key started.
    ///
    /// # Errors
    /// As `list_flows`; a flow that fails lint is `Ok(RunStart::Invalid)`.
    pub async fn start_run(&self, request: &RunRequest) -> Result<RunStart, ClientError> {
        let path = "/v1/runs";
        let url = self.url(path);
        let mut builder = self.post(path).json(request).timeout(REQUEST_TIMEOUT);
        if let Some(key) = &request.idempotency_key {
            builder = builder.header("Idempotency-Key", key.as_str());
        }
        let response = builder
            .send()
            .await
            .map_err(|error| request_error(&url, &error))?;
        let status = response.status();
        if status.is_success() {
            let body = response
                .bytes()
                .await
                .map_err(|error| request_error(&url, &error))?;
            let view = serde_json::from_slice(&body).map_err(|error| ClientError::Decode {
                url: url.clone(),
                reason: error.to_string(),
            })?;
            let created = status == reqwest::StatusCode::CREATED;
            return Ok(RunStart::Started { view, created });
        }
        let text = response.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) if body.code.as_deref() == Some("invalid_flow") && body.problems.is_some() => {
                Ok(RunStart::Invalid {
                    message: body.error.replace('\n', " "),
                    problems: body.problems.unwrap_or_default(),
                })
            }
            Ok(body) => Err(ClientError::Status {
                url,
                status: status.as_u16(),
                code: body.code,
                message: body.error.replace('\n', " "),
            }),
            Err(_) => Err(ClientError::Status {
                url,
                status: status.as_u16(),
                code: None,
                message: match text.trim() {
                    "" => status.canonical_reason().unwrap_or("error").to_owned(),
                    text => clean(text, 300),
                },
            }),
        }
    }

    /// `GET /v1/runs`: `{runs: [{id, flow, status, session, created_ms,
    /// updated_ms, error}]}`, newest first.
    ///
    /// # Errors
    /// As `list_flows`.
    pub async fn list_runs(&self, query: &RunQuery) -> Result<Value, ClientError> {
        let url = self.url("/v1/runs");
        let request = self.get("/v1/runs").query(query).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }

    /// `GET /v1/runs/{id}`: the run's view; with `wait_secs`, once it ended
    /// or that many seconds passed (the daemon caps it at 300).
    ///
    /// # Errors
    /// As `list_flows`; a run the caller may not see is `Status` 404.
    pub async fn get_run(&self, id: &str, wait_secs: Option<u64>) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}", segment(id));
        let url = self.url(&path);
        let mut request = self.get(&path).timeout(REQUEST_TIMEOUT);
        if let Some(secs) = wait_secs.filter(|secs| *secs > 0) {
            request = request
                .query(&[("wait", secs)])
                .timeout(Duration::from_secs(secs.min(300)) + WAIT_MARGIN);
        }
        self.send_json(request, &url).await
    }

    /// The run's view once it ended or waits on a person
    /// (`waits_on_a_person`: nothing moves until someone answers), or
    /// after `secs` seconds (at most 300, as the daemon's own wait):
    /// `GET /v1/runs/{id}` at once, then with `?wait=` a second at a time.
    ///
    /// # Errors
    /// As `get_run`.
    pub async fn wait_run(&self, id: &str, secs: u64) -> Result<Value, ClientError> {
        let deadline = Instant::now() + Duration::from_secs(secs.min(300));
        let mut view = self.get_run(id, None).await?;
        loop {
            let status = view["status"].as_str().unwrap_or_default();
            let ended = !matches!(status, "running" | "waiting");
            let left = deadline.saturating_duration_since(Instant::now());
            if ended || waits_on_a_person(&view) || left.is_zero() {
                return Ok(view);
            }
            view = self.get_run(id, Some(WAIT_POLL_SECS)).await?;
        }
    }

    /// `POST /v1/runs/{id}/cancel`: the run's view after the cancel.
    ///
    /// # Errors
    /// As `get_run`; a run the caller does not own is `Status` 403.
    pub async fn cancel_run(&self, id: &str, reason: Option<&str>) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/cancel", segment(id));
        let url = self.url(&path);
        let body = match reason {
            Some(reason) => serde_json::json!({ "reason": reason }),
            None => serde_json::json!({}),
        };
        let request = self.post(&path).json(&body).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }

    /// `POST /v1/runs/{id}/waits/{wait}`: answers an open wait (by its name,
    /// or its key when several share the name) with `value`. The answer is
    /// the run's view, or only `{id, wait, status}` when the credential is
    /// the wait's own `swt1.` token (`answer_block` prints either). With
    /// `token` that token is the credential instead of this client's.
    ///
    /// # Errors
    /// As `get_run`; an answer that does not match the wait's schema, or a
    /// wait that is not open, is `Status` 400 or 409.
    pub async fn answer_wait(
        &self,
        id: &str,
        wait: &str,
        value: &Value,
        token: Option<&Bearer>,
    ) -> Result<Value, ClientError> {
        // The wait's token replaces the client's credential: one
        // Authorization header, never two, and a refusal names its source.
        let with_token = token.map(|token| self.with_bearer(token.clone()));
        let client = with_token.as_ref().unwrap_or(self);
        let path = format!("/v1/runs/{}/waits/{}", segment(id), segment(wait));
        let url = client.url(&path);
        let body = serde_json::json!({ "value": value });
        let request = client.post(&path).json(&body).timeout(REQUEST_TIMEOUT);
        client.send_json(request, &url).await
    }
}

/// `text` as one URL path segment: everything but unreserved characters
/// percent-encoded.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A content hash as tables show it: its algorithm and 12 hex digits.
fn short_hash(hash: &Value) -> String {
    match hash.as_str() {
        Some(hash) => clean(hash, "sha256:".len() + 12),
        None => "-".to_owned(),
    }
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// `GET /v1/flows` as a table: name, source, hash, description.
pub fn flow_table(page: &Value) -> String {
    let rows = items(&page["flows"])
        .iter()
        .map(|flow| {
            vec![
                text(&flow["name"], 64),
                text(&flow["source"], 60),
                short_hash(&flow["hash"]),
                text(&flow["description"], 60),
            ]
        })
        .collect();
    table(&["NAME", "SOURCE", "HASH", "DESCRIPTION"], rows)
}

/// `GET /v1/runs` as a table: id, flow, status, time since its last
/// change, error; full ids with `wide`.
pub fn run_table(page: &Value, now_ms: u64, wide: bool) -> String {
    let rows = items(&page["runs"])
        .iter()
        .map(|run| {
            let id = run["id"].as_str().unwrap_or("-");
            vec![
                if wide { clean(id, 40) } else { short_id(id) },
                text(&run["flow"], 64),
                text(&run["status"], 20),
                since(&run["updated_ms"], now_ms),
                text(&run["error"], 60),
            ]
        })
        .collect();
    table(&["ID", "FLOW", "STATUS", "SINCE", "ERROR"], rows)
}

/// Lint problems, one per line: `pointer  code  message  (hint)`.
pub fn problem_lines(problems: &[LintProblem]) -> String {
    problems
        .iter()
        .map(|p| {
            let pointer = if p.pointer.is_empty() {
                "/"
            } else {
                &p.pointer
            };
            let mut line = format!(
                "{}  {}  {}",
                clean(pointer, LINE_CHARS),
                clean(&p.code, 40),
                clean(&p.message, LINE_CHARS)
            );
            if !p.hint.is_empty() {
                let _ = write!(line, "  ({})", clean(&p.hint, LINE_CHARS));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A lint route's `400 invalid_flow` (a document that is not flow IR) as
/// a lint problem: the pointer its message names (`…: /body/strategy:
/// why`), else `/`; code `invalid_flow`.
pub fn shape_problem(message: &str) -> LintProblem {
    let detail = message
        .split_once("): ")
        .filter(|(head, _)| head.contains("flow.schema.json"))
        .map_or(message, |(_, rest)| rest);
    let (pointer, why) = match detail.split_once(": ") {
        Some((pointer, why)) if pointer.starts_with('/') && !pointer.contains(' ') => {
            (pointer, why)
        }
        _ => ("/", detail),
    };
    LintProblem {
        pointer: pointer.to_owned(),
        code: "invalid_flow".to_owned(),
        message: why.to_owned(),
        hint: "the document is not flow IR: see docs/flow.schema.json".to_owned(),
    }
}

/// The problems of a lint answer or an `invalid_flow` body; a malformed
/// entry is kept with what it has.
pub fn problems_of(answer: &Value) -> Vec<LintProblem> {
    items(&answer["problems"])
        .iter()
        .map(|p| serde_json::from_value(p.clone()).unwrap_or_default())
        .collect()
}

#[path = "flow_view.rs"]
mod view;
pub use view::{answer_block, run_block, waits_on_a_person};

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;
