//! The chaos run's steady load besides the MainAI: `POST /v1/tasks` of the
//! process and Lua agents with idempotency keys (some replayed on purpose),
//! delegated `spawn_task` requests handed to the MainAI, and cancels of
//! random acknowledged tasks. Every loop stops at `stop_load` and is
//! bounded in count as well.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::chaos::ledger::{Ctx, Reply};

/// At most this many tasks per producer, whatever the run's length.
const MAX_PER_PRODUCER: u64 = 5_000;

/// Every task's policy: short leases and room for an attempt after a crash.
/// Only `failed` is retried, so an attempt a result decided is the last.
pub(super) fn policy() -> Value {
    json!({"max_attempts": 3, "attempt_timeout_secs": 3, "retry_backoff_ms": 100,
           "retry_on": ["failed"]})
}

/// Creates tasks of the `proc` and `lua` agents as the admin, each with its
/// own `Idempotency-Key` (also kept in its metadata, so the checks can find
/// every task a key made). About one in seven acknowledged keys is sent
/// again a little later, and must answer the same task.
pub(super) async fn http_producer(ctx: Arc<Ctx>, producer: u32) {
    for n in 0..MAX_PER_PRODUCER {
        if ctx.stop_load.is_cancelled() {
            return;
        }
        let key = format!("h{producer}-{n}");
        let agent = if ctx.rng.chance(50) { "proc" } else { "lua" };
        let body = json!({
            "agent": agent,
            "prompt": format!("\"p-{key}\""),
            "metadata": {"chaos_key": format!("http:{key}")},
            "policy": policy(),
        });
        if create(&ctx, &key, &body).await.is_some() {
            ctx.ledger.task_acked.notify_waiters();
            if ctx.rng.chance(15) {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ctx.rng.millis(0, 800)).await;
                    if create(&ctx, &key, &body).await.is_some() {
                        ctx.ledger.with(|r| r.task_replays += 1);
                    }
                });
            }
        }
        tokio::time::sleep(ctx.rng.millis(30, 120)).await;
    }
}

/// One `POST /v1/tasks` with `key`, retried with the same key and body until
/// answered; the acknowledged task id, recorded under `http:<key>`.
async fn create(ctx: &Ctx, key: &str, body: &Value) -> Option<String> {
    let make = || {
        ctx.http
            .post(ctx.url("/v1/tasks"))
            .bearer_auth(&ctx.admin)
            .header("idempotency-key", key)
            .json(body)
    };
    match ctx.send(make, &ctx.stop_all).await {
        Reply::Answer(200 | 201, answer) => {
            let Some(task) = answer["task_id"].as_str().map(str::to_owned) else {
                ctx.ledger
                    .unexpected(format!("POST /v1/tasks {key}: no task_id in {answer}"));
                return None;
            };
            ctx.ledger.with(|r| {
                r.tasks
                    .entry(format!("http:{key}"))
                    .or_default()
                    .push(task.clone());
            });
            Some(task)
        }
        Reply::Answer(status, answer) => {
            ctx.ledger
                .unexpected(format!("POST /v1/tasks {key}: {status} {answer}"));
            None
        }
        Reply::GaveUp => None,
    }
}

/// Hands `spawn_task` frames (delegated, so the attempt comes back to the
/// MainAI as a `spawn`) to the MainAI, which sends them and sends them
/// again until each is accepted.
pub(super) async fn delegated_producer(ctx: Arc<Ctx>, requests: mpsc::Sender<Value>) {
    for n in 0..MAX_PER_PRODUCER {
        if ctx.stop_load.is_cancelled() {
            return;
        }
        let req_id = format!("d-{n}");
        let frame = json!({
            "type": "spawn_task", "req_id": req_id, "agent": "chaos-sub",
            "prompt": format!("delegated {n}"), "delegate": true,
            "metadata": {"chaos_key": format!("ws:{req_id}")},
            "policy": policy(),
        });
        if requests.send(frame).await.is_err() {
            return;
        }
        tokio::time::sleep(ctx.rng.millis(60, 200)).await;
    }
}

/// Cancels a random acknowledged task every so often. A cancel that cannot
/// reach the daemon is not sent again: it is simply not acknowledged.
pub(super) async fn canceller(ctx: Arc<Ctx>) {
    for _ in 0..MAX_PER_PRODUCER {
        tokio::select! {
            () = ctx.stop_load.cancelled() => return,
            () = tokio::time::sleep(ctx.rng.millis(150, 500)) => {}
        }
        let acked: Vec<String> = ctx.ledger.with(|r| {
            r.tasks
                .values()
                .filter_map(|ids| ids.first().cloned())
                .collect()
        });
        if acked.is_empty() {
            continue;
        }
        let pick = usize::try_from(ctx.rng.below(acked.len() as u64)).unwrap();
        let task = &acked[pick];
        ctx.until_up().await;
        let sent = ctx
            .http
            .post(ctx.url(&format!("/v1/tasks/{task}/cancel")))
            .bearer_auth(&ctx.admin)
            .json(&json!({"reason": "chaos"}))
            .send()
            .await;
        let Ok(response) = sent else { continue };
        let status = response.status().as_u16();
        let Ok(text) = response.text().await else {
            continue;
        };
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match (status, answer["code"].as_str()) {
            (200, _) if answer["status"] == "cancelled" => {
                ctx.ledger.with(|r| r.cancels.insert(task.clone()));
            }
            // A cancel loses to a result the attempt already accepted
            // (docs/protocol.md): the window is the result's commit.
            (410, Some("task_terminal")) | (409, Some("already_final")) | (503, _) => {}
            _ => ctx
                .ledger
                .unexpected(format!("cancel {task}: {status} {answer}")),
        }
    }
}
