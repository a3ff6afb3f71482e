//! The chaos run's MainAI: one WebSocket operator session that reconnects
//! with the same sid and token after every restart. It sends the delegated
//! `spawn_task` requests (again on every reconnect and every second until
//! each is accepted: `req_id` makes them idempotent), records `task_done`
//! frames, and plays one SubAgent per new (task, attempt) it is spawned;
//! a repeated `spawn` is ignored, as a MainAI should.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::chaos::ledger::{AckedResult, Ctx, Reply};
use crate::daemon::Login;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long an unanswered `spawn_task` waits before it is sent again.
const RESEND_AFTER: Duration = Duration::from_secs(1);

/// Runs the session until `stop_all`.
pub(super) async fn main_ai(ctx: Arc<Ctx>, login: Login, mut requests: mpsc::Receiver<Value>) {
    // req_id → (frame, when last sent): sent until `task_accepted`.
    let mut pending: BTreeMap<String, (Value, Instant)> = BTreeMap::new();
    let mut requests_open = true;
    while !ctx.stop_all.is_cancelled() {
        ctx.until_up().await;
        let Some(mut ws) = dial(&ctx, &login).await else {
            tokio::time::sleep(ctx.rng.millis(20, 60)).await;
            continue;
        };
        ctx.ledger.with(|r| r.connections += 1);
        let mut alive = resend(&mut ws, &mut pending, Duration::ZERO).await;
        let mut tick = tokio::time::interval(RESEND_AFTER);
        while alive {
            tokio::select! {
                () = ctx.stop_all.cancelled() => return,
                request = requests.recv(), if requests_open => {
                    let Some(frame) = request else {
                        requests_open = false;
                        continue;
                    };
                    let req_id = frame["req_id"].as_str().unwrap().to_owned();
                    pending.insert(req_id, (frame.clone(), Instant::now()));
                    alive = ws.send(Message::text(frame.to_string())).await.is_ok();
                }
                _ = tick.tick() => alive = resend(&mut ws, &mut pending, RESEND_AFTER).await,
                message = ws.next() => alive = received(&ctx, &mut pending, message),
            }
        }
        // A failed send does not lose what the daemon already sent: read
        // the rest before the socket goes.
        let drain = async { while received(&ctx, &mut pending, ws.next().await) {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        tokio::time::sleep(ctx.rng.millis(20, 60)).await;
    }
}

/// Handles what the socket yielded; false once it is closed.
fn received(
    ctx: &Arc<Ctx>,
    pending: &mut BTreeMap<String, (Value, Instant)>,
    message: Option<Result<Message, tungstenite::Error>>,
) -> bool {
    match message {
        Some(Ok(Message::Text(text))) => {
            match serde_json::from_str(text.as_str()) {
                Ok(frame) => on_frame(ctx, pending, frame),
                Err(_) => ctx.ledger.unexpected(format!("ws: not JSON: {text}")),
            }
            true
        }
        Some(Ok(Message::Close(_)) | Err(_)) | None => false,
        Some(Ok(_)) => true,
    }
}

/// Opens the session's socket, or `None` if the daemon is not there.
async fn dial(ctx: &Ctx, login: &Login) -> Option<Socket> {
    let url = format!(
        "{}/v1/operators/{}/ws",
        ctx.base.replacen("http://", "ws://", 1),
        login.sid
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", login.token).parse().unwrap(),
    );
    let connect = tokio_tungstenite::connect_async(request);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((ws, _))) => Some(ws),
        _ => None,
    }
}

/// Sends every pending request last sent more than `after` ago; false when
/// the socket broke.
async fn resend(
    ws: &mut Socket,
    pending: &mut BTreeMap<String, (Value, Instant)>,
    after: Duration,
) -> bool {
    for (frame, sent) in pending.values_mut() {
        if sent.elapsed() < after {
            continue;
        }
        if ws.send(Message::text(frame.to_string())).await.is_err() {
            return false;
        }
        *sent = Instant::now();
    }
    true
}

fn on_frame(ctx: &Arc<Ctx>, pending: &mut BTreeMap<String, (Value, Instant)>, frame: Value) {
    let task = frame["task_id"].as_str().unwrap_or_default().to_owned();
    match frame["type"].as_str().unwrap_or_default() {
        "task_accepted" => {
            let req_id = frame["req_id"].as_str().unwrap_or_default();
            pending.remove(req_id);
            ctx.ledger.with(|r| {
                r.tasks
                    .entry(format!("ws:{req_id}"))
                    .or_default()
                    .push(task);
            });
            ctx.ledger.task_acked.notify_waiters();
        }
        "spawn" => {
            let attempt = frame["attempt"].as_u64().unwrap_or_default();
            let handle = frame["worker_handle"].as_str().unwrap_or_default();
            let first = ctx.ledger.with(|r| {
                r.handles.insert(handle.to_owned());
                let first = r.spawns.insert((task.clone(), attempt));
                if !first {
                    r.respawns += 1;
                    if r.results
                        .iter()
                        .any(|a| a.task == task && a.attempt == attempt)
                    {
                        r.spawns_after_ack += 1;
                    }
                }
                first
            });
            if first {
                tokio::spawn(subagent(ctx.clone(), task, attempt, handle.to_owned()));
            }
        }
        "task_done" => {
            let attempt = frame["attempt"].as_u64().unwrap_or_default();
            let status = frame["status"].as_str().unwrap_or_default().to_owned();
            ctx.ledger
                .with(|r| r.task_done.push((task, attempt, status)));
        }
        "cancel" => ctx.ledger.with(|r| r.cancel_frames += 1),
        "task_event" | "hook_after" => {}
        _ => ctx.ledger.unexpected(format!("ws frame {frame}")),
    }
}

/// One SubAgent: fetches the prompt, heartbeats, posts some output, works a
/// while (heartbeating), then submits. One in twelve never submits (its
/// lease runs out); one in ten submits `ok=false`. After a 200, one in four
/// later posts a second, different result, which must be refused.
async fn subagent(ctx: Arc<Ctx>, task: String, attempt: u64, handle: String) {
    let worker = |path: &str| {
        ctx.http
            .post(ctx.url(path))
            .bearer_auth(&handle)
            .header("content-type", "application/json")
    };
    let prompt = format!("/v1/worker/prompt?task_id={task}");
    let fetched = ctx
        .send(
            || ctx.http.get(ctx.url(&prompt)).bearer_auth(&handle),
            &ctx.stop_all,
        )
        .await;
    if !worker_answer(&ctx, &task, "prompt", fetched) {
        return;
    }
    let beat = json!({"task_id": task}).to_string();
    let heartbeat = || worker("/v1/worker/heartbeat").body(beat.clone());
    if !worker_answer(
        &ctx,
        &task,
        "heartbeat",
        ctx.send(heartbeat, &ctx.stop_all).await,
    ) {
        return;
    }
    let lines: Vec<String> = (0..=ctx.rng.below(2))
        .map(|n| json!({"type": "progress", "stage": format!("step-{n}")}).to_string())
        .collect();
    let ndjson = lines.join("\n");
    let output = || {
        ctx.http
            .post(ctx.url(&format!("/v1/worker/output?task_id={task}")))
            .bearer_auth(&handle)
            .header("content-type", "application/x-ndjson")
            .body(ndjson.clone())
    };
    if !worker_answer(&ctx, &task, "output", ctx.send(output, &ctx.stop_all).await) {
        return;
    }
    let work = ctx.rng.millis(0, 2000);
    tokio::time::sleep(work / 2).await;
    if !worker_answer(
        &ctx,
        &task,
        "heartbeat",
        ctx.send(heartbeat, &ctx.stop_all).await,
    ) {
        return;
    }
    tokio::time::sleep(work / 2).await;
    if ctx.rng.chance(8) {
        return;
    }
    let ok = !ctx.rng.chance(10);
    let body = format!("{task}/{attempt}/{}", ctx.rng.next());
    let key = format!("r-{task}-{attempt}");
    if !submit(&ctx, &task, attempt, &handle, &key, &body, ok).await || !ctx.rng.chance(25) {
        return;
    }
    // A second, different result on the same attempt: 409 `already_final`
    // (or 410 once the task is over); a 200 is recorded and fails the checks.
    tokio::time::sleep(ctx.rng.millis(0, 1500)).await;
    ctx.ledger.with(|r| r.probes += 1);
    let other = format!("{body}/again");
    submit(
        &ctx,
        &task,
        attempt,
        &handle,
        &format!("{key}-again"),
        &other,
        ok,
    )
    .await;
}

/// Posts a result with `key`, retried with the same key and body until
/// answered; whether it was acknowledged (then it is recorded).
async fn submit(
    ctx: &Ctx,
    task: &str,
    attempt: u64,
    handle: &str,
    key: &str,
    body: &str,
    ok: bool,
) -> bool {
    let path = format!("/v1/worker/submit?task_id={task}&ok={ok}");
    let make = || {
        ctx.http
            .post(ctx.url(&path))
            .bearer_auth(handle)
            .header("idempotency-key", key)
            .body(body.to_owned())
    };
    match ctx.send(make, &ctx.stop_all).await {
        Reply::Answer(200, ack) => {
            if ack["attempt"] != attempt || ack["task_id"] != task {
                ctx.ledger
                    .unexpected(format!("submit {task}/{attempt}: acknowledged as {ack}"));
            }
            ctx.ledger.with(|r| {
                r.results.push(AckedResult {
                    task: task.to_owned(),
                    attempt,
                    value: Value::String(body.to_owned()),
                    ok,
                });
            });
            ctx.ledger.result_acked.notify_waiters();
            true
        }
        other => {
            if matches!(other, Reply::Answer(409 | 410, _)) {
                ctx.ledger.with(|r| r.refused_results += 1);
            }
            worker_answer(ctx, task, "submit", other);
            false
        }
    }
}

/// Whether a worker call succeeded; 409 (superseded, already final) and 410
/// (task over) end the SubAgent quietly, anything else is recorded.
fn worker_answer(ctx: &Ctx, task: &str, call: &str, reply: Reply) -> bool {
    match reply {
        Reply::Answer(200, _) => true,
        Reply::Answer(409, answer)
            if matches!(
                answer["code"].as_str(),
                Some("attempt_superseded" | "already_final")
            ) =>
        {
            false
        }
        Reply::Answer(410, answer) if answer["code"] == "task_terminal" => false,
        Reply::Answer(status, answer) => {
            ctx.ledger
                .unexpected(format!("{call} {task}: {status} {answer}"));
            false
        }
        Reply::GaveUp => false,
    }
}
