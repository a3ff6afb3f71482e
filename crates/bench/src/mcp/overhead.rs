//! The tool-call overhead: N sequential round trips of one task per path,
//! interleaved (each round runs every path once, the order rotating), so a
//! machine shared with other work loads every path alike:
//!
//! - MCP: `spawn`, then `wait` (mode `all`) on its id, on one rmcp client
//!   session;
//! - WebSocket: a logged-in session's `spawn_task` → `task_accepted` →
//!   `task_done`;
//! - HTTP: `POST /v1/tasks` with `wait_secs`, one request.
//!
//! A round trip counts from the first byte sent to the answer saying
//! `pass`; anything else is an error under its code.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use swarmd_types::ids::ReqId;

use super::client::McpClient;
use super::report::{PathRow, Spread};
use crate::cli::McpArgs;
use crate::daemon::Target;
use crate::http_load::{spawn_and_wait, waited_task};
use crate::session::{self, Kind, Received, Session};

/// The prompt of every task (the Lua agent returns it).
pub(crate) const PROMPT: &str = "bench";
/// Longest wait for one WebSocket round trip.
const WS_PATIENCE: Duration = Duration::from_secs(60);
/// `wait_secs` of the HTTP path.
const HTTP_WAIT_SECS: u64 = 60;

/// The paths each round runs once: MCP, WS, HTTP, rotating.
const PATHS: usize = 3;

/// Latencies and errors of one path.
#[derive(Debug, Default)]
struct Samples {
    latencies: Vec<Duration>,
    errors: BTreeMap<String, u64>,
}

impl Samples {
    fn add(&mut self, measured: bool, outcome: Result<Duration, String>) {
        match outcome {
            Ok(latency) if measured => self.latencies.push(latency),
            Ok(_) => {}
            Err(code) => *self.errors.entry(code).or_default() += 1,
        }
    }

    fn row(self, path: &str, direct: bool) -> PathRow {
        PathRow {
            path: path.to_owned(),
            spread: Spread::of(&self.latencies),
            errors: self.errors,
            direct,
        }
    }
}

/// Runs `args.warmup` unmeasured then `args.round_trips` measured rounds.
/// Rows: MCP spawn + wait, WebSocket, HTTP, then the MCP `spawn` and `wait`
/// calls alone (the overhead is taken against the direct paths only).
pub(crate) async fn run(
    target: &Target,
    http: &reqwest::Client,
    mcp: &McpClient,
    args: &McpArgs,
) -> anyhow::Result<Vec<PathRow>> {
    let mut session = Session::open(http, target).await?;
    let tasks_url = target.url("/v1/tasks");
    let body = waited_task(&args.agent, PROMPT, HTTP_WAIT_SECS);
    let [
        mut via_mcp,
        mut via_ws,
        mut via_http,
        mut spawn_calls,
        mut wait_calls,
    ] = std::array::from_fn(|_| Samples::default());
    for round in 0..args.warmup + args.round_trips {
        let measured = round >= args.warmup;
        for step in 0..PATHS {
            match (round + step) % PATHS {
                0 => {
                    let (total, split) = mcp_round_trip(mcp, &args.agent).await;
                    via_mcp.add(measured, total);
                    if let Some((spawn, wait)) = split {
                        spawn_calls.add(measured, Ok(spawn));
                        wait_calls.add(measured, Ok(wait));
                    }
                }
                1 => {
                    let req_id = format!("o{round}");
                    via_ws.add(
                        measured,
                        ws_round_trip(&mut session, &req_id, &args.agent).await,
                    );
                }
                _ => {
                    let start = Instant::now();
                    let outcome = spawn_and_wait(http, &tasks_url, &target.admin_token, &body)
                        .await
                        .map(|()| start.elapsed())
                        .map_err(|code| format!("http:{code}"));
                    via_http.add(measured, outcome);
                }
            }
        }
    }
    // The session is the WS path's own: a failed logout counts there.
    let mut ws_row = via_ws.row("WS `spawn_task` → `task_done`", true);
    if session.logout(http, target).await.is_err() {
        *ws_row.errors.entry("ws:logout".to_owned()).or_default() += 1;
    }
    Ok(vec![
        via_mcp.row("MCP `spawn` + `wait`", false),
        ws_row,
        via_http.row("HTTP `POST /v1/tasks` with `wait_secs`", true),
        spawn_calls.row("(MCP `spawn` call alone)", false),
        wait_calls.row("(MCP `wait` call alone)", false),
    ])
}

/// One task through MCP: the whole round trip, and its two calls' times.
async fn mcp_round_trip(
    mcp: &McpClient,
    agent: &str,
) -> (Result<Duration, String>, Option<(Duration, Duration)>) {
    let start = Instant::now();
    let task_id = match mcp.spawn(agent, PROMPT).await {
        Ok(id) => id,
        Err(code) => return (Err(format!("mcp:{code}")), None),
    };
    let spawned = start.elapsed();
    let waited = match mcp.wait_all(std::slice::from_ref(&task_id)).await {
        Ok(tasks) => tasks,
        Err(code) => return (Err(format!("mcp:{code}")), None),
    };
    let total = start.elapsed();
    match waited.first().map(|t| t.status.as_str()) {
        Some("pass") => (Ok(total), Some((spawned, total - spawned))),
        Some(other) => (Err(format!("mcp:task_{other}")), None),
        None => (Err("mcp:bad_answer".to_owned()), None),
    }
}

/// One task over the session's WebSocket: `spawn_task` until its
/// `task_done`.
async fn ws_round_trip(
    session: &mut Session,
    req_id: &str,
    agent: &str,
) -> Result<Duration, String> {
    let start = Instant::now();
    let Ok(id) = ReqId::new(req_id) else {
        return Err("ws:bad_req_id".to_owned());
    };
    if !session.send(&session::spawn_task(id, agent, PROMPT, false)) {
        return Err("ws:closed".to_owned());
    }
    let deadline = tokio::time::Instant::now() + WS_PATIENCE;
    let mut task_id: Option<String> = None;
    // A `task_done` read before its `task_accepted`: (task id, status).
    let mut early: Option<(String, String)> = None;
    loop {
        let received = tokio::time::timeout_at(deadline, session.recv())
            .await
            .map_err(|_| "ws:timeout".to_owned())?;
        let frame = match received {
            Received::Frame(frame) => frame,
            Received::Closed => return Err("ws:closed".to_owned()),
            Received::Malformed => return Err("ws:malformed_frame".to_owned()),
            Received::Event | Received::Other => continue,
        };
        let status = match frame.kind {
            Kind::TaskAccepted if frame.req_id.as_deref() == Some(req_id) => {
                task_id = frame.task_id;
                match (&task_id, early.take()) {
                    (Some(id), Some((done_id, status))) if *id == done_id => status,
                    _ => continue,
                }
            }
            Kind::TaskDone => match (&task_id, frame.task_id, frame.status) {
                (Some(id), Some(done_id), Some(status)) if *id == done_id => status,
                (None, Some(done_id), Some(status)) => {
                    early = Some((done_id, status));
                    continue;
                }
                _ => continue,
            },
            Kind::Error => {
                return Err(format!(
                    "ws:{}",
                    frame.code.as_deref().unwrap_or("error_frame")
                ));
            }
            _ => continue,
        };
        let latency = start.elapsed();
        return match status.as_str() {
            "pass" => Ok(latency),
            other => Err(format!("ws:task_{other}")),
        };
    }
}
