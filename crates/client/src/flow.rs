//! `swarmd flow …`: the flow and run routes (docs/flows.md, CLI), and the
//! human renderings of their answers: the flow and run tables, a run as a
//! header and its node tree, and lint problems one per line.
//!
//! Views stay `serde_json::Value`s: the renderings read them field by
//! field, so a field the daemon adds later costs nothing and a missing one
//! prints as `-`. A run id or wait name is percent-encoded into its path
//! segment, so no argument can address another route.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::render::{clean, duration, short_id, since, table, text};
use super::{ApiClient, Bearer, ClientError, REQUEST_TIMEOUT, request_error};

/// Extra time a client waits beyond what it asked the daemon to wait.
const WAIT_MARGIN: Duration = Duration::from_secs(30);
/// The longest message, reason or prompt a line shows.
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

/// The problems of a lint answer or an `invalid_flow` body; a malformed
/// entry is kept with what it has.
pub fn problems_of(answer: &Value) -> Vec<LintProblem> {
    items(&answer["problems"])
        .iter()
        .map(|p| serde_json::from_value(p.clone()).unwrap_or_default())
        .collect()
}

/// The mark a node's status gets in the tree.
fn mark(status: &str) -> &'static str {
    match status {
        "passed" => "✓",
        "failed" => "✗",
        "running" => "▶",
        "waiting" => "⏸",
        "cancelled" => "⊘",
        _ => "·",
    }
}

/// A run's view (`GET /v1/runs/{id}`) for people: a key/value header, the
/// node tree (one node instance a line, indented by its depth in the
/// flow, with a status mark, and a step's task and duration), then the
/// waits, an open one with the command that answers it.
pub fn run_block(view: &Value, now_ms: u64) -> String {
    let id = view["id"].as_str().unwrap_or("-");
    let status = view["status"].as_str().unwrap_or("-");
    let ended = !matches!(status, "running" | "waiting");
    let mut pairs = vec![
        ("id", clean(id, 40)),
        (
            "flow",
            format!(
                "{} ({})",
                text(&view["flow"], 64),
                short_hash(&view["flow_hash"])
            ),
        ),
        ("status", clean(status, 20)),
        ("created", since(&view["created_ms"], now_ms)),
        ("updated", since(&view["updated_ms"], now_ms)),
        (
            "duration",
            took(&view["created_ms"], &view["updated_ms"], !ended, now_ms),
        ),
        ("input", text(&view["input"], LINE_CHARS)),
    ];
    if !view["result"].is_null() {
        pairs.push(("result", text(&view["result"], LINE_CHARS)));
    }
    if !view["error"].is_null() {
        pairs.push(("error", text(&view["error"], LINE_CHARS)));
    }
    let mut lines: Vec<String> = pairs
        .iter()
        .map(|(key, value)| format!("{key:8}  {value}"))
        .collect();
    let nodes = items(&view["nodes"]);
    if !nodes.is_empty() {
        lines.push(String::new());
        lines.extend(node_tree(nodes, now_ms));
    }
    let waits = items(&view["waits"]);
    if !waits.is_empty() {
        lines.push(String::new());
        lines.push("waits:".to_owned());
        for wait in waits {
            lines.extend(wait_lines(wait, waits, id, now_ms));
        }
    }
    lines.join("\n")
}

/// `POST /v1/runs/{id}/waits/{wait}`'s answer for people: the run as
/// `run_block` prints it, or, when the answer is only `{id, wait, status}`
/// (the credential was the wait's own token, which reads nothing else of
/// the run), those three.
pub fn answer_block(answer: &Value, now_ms: u64) -> String {
    if answer.get("flow").is_some() || answer.get("created_ms").is_some() {
        return run_block(answer, now_ms);
    }
    [
        ("id", text(&answer["id"], 40)),
        ("wait", text(&answer["wait"], LINE_CHARS)),
        ("status", text(&answer["status"], 20)),
    ]
    .iter()
    .map(|(key, value)| format!("{key:6}  {value}"))
    .collect::<Vec<_>>()
    .join("\n")
}

/// From `start` to `end`, or to now while `open` and not ended.
fn took(start: &Value, end: &Value, open: bool, now_ms: u64) -> String {
    match (start.as_u64(), end.as_u64()) {
        (Some(start), _) if open => duration(now_ms.saturating_sub(start)),
        (Some(start), Some(end)) => duration(end.saturating_sub(start)),
        _ => "-".to_owned(),
    }
}

/// One wait's lines: name, state, prompt; for an open one the command
/// that answers it (and its token, when the view carries it).
fn wait_lines(wait: &Value, all: &[Value], run_id: &str, now_ms: u64) -> Vec<String> {
    let name = wait["name"].as_str().unwrap_or("-");
    let open = wait["open"].as_bool() == Some(true);
    let state = if open {
        "open".to_owned()
    } else if !wait["answer"].is_null() {
        format!("answered {}", text(&wait["answer"], LINE_CHARS))
    } else if !wait["reason"].is_null() {
        format!("failed: {}", text(&wait["reason"], LINE_CHARS))
    } else {
        "closed".to_owned()
    };
    let mut first = format!("  {}  {state}", clean(name, 64));
    if !wait["prompt"].is_null() {
        let _ = write!(first, "  {}", text(&wait["prompt"], LINE_CHARS));
    }
    if let Some(deadline) = wait["deadline_ms"].as_u64().filter(|_| open) {
        let _ = write!(
            first,
            "  (ends in {})",
            duration(deadline.saturating_sub(now_ms))
        );
    }
    let mut lines = vec![first];
    if open {
        // A name shared by several open waits is ambiguous: answer by key.
        let shared = all
            .iter()
            .filter(|w| w["open"].as_bool() == Some(true) && w["name"].as_str() == Some(name))
            .count()
            > 1;
        let target = if shared {
            wait["key"].as_str().unwrap_or(name)
        } else {
            name
        };
        lines.push(format!(
            "    answer: swarmd flow answer {} {} '<JSON>'",
            shell_word(run_id),
            shell_word(target)
        ));
        if let Some(token) = wait["token"].as_str() {
            lines.push(format!("    token:  {}", clean(token, 200)));
        }
    }
    lines
}

/// `word` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':'));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", clean(word, 200).replace('\'', r"'\''"))
    }
}

/// One part of a node's place in the tree, in display order: the fields
/// that hold nodes rank `body`, `then`, `else`, `catch`, `children`;
/// numbers (child indices, fan-out items, loop iterations) by value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Field(u8, String),
    Index(u64),
}

fn field(name: &str) -> Step {
    let rank = match name {
        "body" => 0,
        "then" => 1,
        "else" => 2,
        "catch" => 3,
        "children" => 4,
        _ => 5,
    };
    Step::Field(rank, name.to_owned())
}

/// A node instance's place: its display order and depth.
struct Place {
    order: Vec<Step>,
    depth: usize,
}

/// The nodes of a view as a tree, one line each, parents before children
/// and fan-out items and loop iterations each with their own subtree.
///
/// A node's key is its sub-flow scope (`<call key>>name`), its pointer
/// and its instance suffix (`[i]` per fan-out item, `#i` per loop
/// iteration, outermost first); an instance index belongs to the `body`
/// of the enclosing fan-out or loop, found by the kind of the node at
/// that pointer.
fn node_tree(nodes: &[Value], now_ms: u64) -> Vec<String> {
    let by_key: HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|node| Some((node["key"].as_str()?, node)))
        .collect();
    let mut kinds: HashMap<(&str, &str), &str> = HashMap::new();
    for node in nodes {
        if let (Some(key), Some(pointer), Some(kind)) = (
            node["key"].as_str(),
            node["pointer"].as_str(),
            node["kind"].as_str(),
        ) {
            let (scope, _) = split_key(key, pointer);
            kinds.insert((scope, pointer), kind);
        }
    }
    let mut placed: Vec<(Place, &Value)> = nodes
        .iter()
        .map(|node| (place(node, &by_key, &kinds, 0), node))
        .collect();
    placed.sort_by(|a, b| a.0.order.cmp(&b.0.order));
    placed
        .into_iter()
        .flat_map(|(place, node)| node_lines(node, place.depth, now_ms))
        .collect()
}

/// `key` cut into its scope and instance suffix around `pointer`.
fn split_key<'k>(key: &'k str, pointer: &str) -> (&'k str, &'k str) {
    match key.rfind(pointer) {
        Some(at) if !pointer.is_empty() => (&key[..at], &key[at + pointer.len()..]),
        _ => ("", ""),
    }
}

fn place(
    node: &Value,
    by_key: &HashMap<&str, &Value>,
    kinds: &HashMap<(&str, &str), &str>,
    nesting: usize,
) -> Place {
    let key = node["key"].as_str().unwrap_or_default();
    let pointer = node["pointer"].as_str().unwrap_or_default();
    if pointer.is_empty() || !key.contains(pointer) || nesting > 16 {
        return Place {
            order: vec![Step::Field(5, key.to_owned())],
            depth: 0,
        };
    }
    let (scope, inst) = split_key(key, pointer);
    let (mut order, mut depth) = match scope.rsplit_once('>') {
        Some((call_key, flow)) => {
            let call = by_key.get(call_key).map_or_else(
                || Place {
                    order: vec![Step::Field(5, call_key.to_owned())],
                    depth: 0,
                },
                |call| place(call, by_key, kinds, nesting + 1),
            );
            let mut order = call.order;
            order.push(Step::Field(5, format!(">{flow}")));
            (order, call.depth + 1)
        }
        None => (Vec::new(), 0),
    };
    let mut indices = inst
        .split(['[', ']', '#'])
        .filter_map(|part| part.parse::<u64>().ok());
    let mut prefix = String::new();
    let mut fields = 0usize;
    for part in pointer.split('/').skip(1) {
        let parent_kind = kinds.get(&(scope, prefix.as_str())).copied();
        prefix.push('/');
        prefix.push_str(part);
        match part.parse::<u64>() {
            Ok(index) => order.push(Step::Index(index)),
            Err(_) => {
                fields += 1;
                order.push(field(part));
                if part == "body" && matches!(parent_kind, Some("fanout" | "loop")) {
                    order.push(Step::Index(indices.next().unwrap_or(0)));
                }
            }
        }
    }
    depth += fields.saturating_sub(1);
    Place { order, depth }
}

/// One node's line (and, for a step tried more than once, one line per
/// try): mark, kind, name, instance, status, task and duration, reason.
fn node_lines(node: &Value, depth: usize, now_ms: u64) -> Vec<String> {
    let indent = "  ".repeat(depth.min(40));
    let status = node["status"].as_str().unwrap_or("-");
    let key = node["key"].as_str().unwrap_or_default();
    let pointer = node["pointer"].as_str().unwrap_or_default();
    let (_, inst) = split_key(key, pointer);
    let side = pointer
        .rsplit('/')
        .next()
        .filter(|last| matches!(*last, "then" | "else" | "catch"));
    let mut line = format!("{indent}{} ", mark(status));
    if let Some(side) = side {
        let _ = write!(line, "{side}: ");
    }
    line.push_str(&clean(node["kind"].as_str().unwrap_or("-"), 20));
    if let Some(name) = node["name"].as_str() {
        let _ = write!(line, " {}", clean(name, 64));
    }
    line.push_str(&clean(inst, 40));
    let _ = write!(line, "  {}", clean(status, 20));
    let tries = items(&node["tries"]);
    if let [only] = tries {
        let _ = write!(line, "  {}", try_text(only, now_ms));
    }
    if !node["reason"].is_null() {
        let _ = write!(line, "  {}", text(&node["reason"], LINE_CHARS));
    }
    let mut lines = vec![line];
    if tries.len() > 1 {
        for (n, one) in tries.iter().enumerate() {
            let mut line = format!("{indent}    try {}  {}", n + 1, try_text(one, now_ms));
            if !one["reason"].is_null() {
                let _ = write!(line, "  {}", text(&one["reason"], LINE_CHARS));
            }
            lines.push(line);
        }
    }
    lines
}

/// A try's task (short id) and how long it took, or has taken so far.
fn try_text(one: &Value, now_ms: u64) -> String {
    let task = one["task_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map_or_else(|| "-".to_owned(), short_id);
    let open = one["ended_ms"].is_null();
    format!(
        "task {task}  {}",
        took(&one["started_ms"], &one["ended_ms"], open, now_ms)
    )
}

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;
