//! What the chaos run's clients were told, shared by every load task: each
//! acknowledged creation, result and cancel, the frames the MainAI got, and
//! every answer no client expects. The checks compare it with what the
//! daemon holds once the run is over. Also the run's seeded random source
//! and the HTTP call helper every client uses.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::RequestBuilder;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// How long a client keeps retrying a request the daemon could not answer
/// (killed, restarting, or not ready yet).
const RETRY_FOR: Duration = Duration::from_secs(30);

/// What every load task shares.
#[derive(Debug)]
pub(super) struct Ctx {
    /// `http://127.0.0.1:PORT`: the same across restarts.
    pub base: String,
    pub admin: String,
    pub http: reqwest::Client,
    pub ledger: Ledger,
    pub rng: Rng,
    /// Stops the producers of new tasks and the cancels.
    pub stop_load: CancellationToken,
    /// Stops the MainAI and its SubAgents.
    pub stop_all: CancellationToken,
    /// Whether the daemon is up: false from just before a kill until the
    /// restarted daemon is ready. Clients connect only while it is true:
    /// the daemon's port is in the ephemeral range, and a connect to it
    /// while nothing listens can pick that very port as its source (a TCP
    /// self-connect), which then keeps the restart from binding it.
    pub up: watch::Sender<bool>,
}

/// The records behind one lock (never held across an `.await`) and the
/// signals the kill loop waits on to kill right after an acknowledgement.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    records: Mutex<Records>,
    /// Fires after a SubAgent's result was answered 200 and recorded.
    pub result_acked: Notify,
    /// Fires after a task creation was acknowledged and recorded.
    pub task_acked: Notify,
}

#[derive(Debug, Default)]
pub(super) struct Records {
    /// Creation key (`http:…` for `POST /v1/tasks`, `ws:…` for a
    /// `spawn_task` req_id) → the task id of every acknowledgement of it.
    pub tasks: BTreeMap<String, Vec<String>>,
    /// Results a SubAgent got 200 for.
    pub results: Vec<AckedResult>,
    /// Tasks a cancel was answered 200 `cancelled` for.
    pub cancels: BTreeSet<String>,
    /// `task_done` frames: (task, attempt, status).
    pub task_done: Vec<(String, u64, String)>,
    /// (task, attempt) of every `spawn` frame seen.
    pub spawns: BTreeSet<(String, u64)>,
    /// `spawn` frames for an attempt already seen.
    pub respawns: u64,
    /// `spawn` frames for an attempt whose result was already acknowledged.
    pub spawns_after_ack: u64,
    /// `cancel` frames.
    pub cancel_frames: u64,
    /// Results answered 409/410.
    pub refused_results: u64,
    /// Requests sent again after the daemon could not answer them.
    pub retries: u64,
    /// Creations sent again with an acknowledged key, to see it replayed.
    pub task_replays: u64,
    /// Second results with another body posted after a 200.
    pub probes: u64,
    /// MainAI socket connections.
    pub connections: u64,
    /// Every answer no client expects: what was asked, status and body.
    pub unexpected: Vec<String>,
    /// Every `wh-` handle handed out (the log must contain none).
    pub handles: BTreeSet<String>,
    /// Flow runs started and waits answered.
    pub flows: super::flows::FlowRecords,
}

/// A result a SubAgent posted and got 200 for.
#[derive(Debug, Clone)]
pub(super) struct AckedResult {
    pub task: String,
    pub attempt: u64,
    pub value: Value,
    pub ok: bool,
}

impl Ledger {
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Records) -> R) -> R {
        f(&mut self.records.lock().unwrap())
    }

    pub(super) fn unexpected(&self, what: String) {
        self.with(|r| r.unexpected.push(what));
    }
}

/// A seeded splitmix64: every random choice of the run comes from it, so
/// a seed reproduces the choices (not the interleaving).
#[derive(Debug)]
pub(super) struct Rng(Mutex<u64>);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(Mutex::new(seed))
    }

    pub(super) fn next(&self) -> u64 {
        let mut state = self.0.lock().unwrap();
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&self, n: u64) -> u64 {
        self.next() % n
    }

    pub(super) fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration uniform in `lo..=hi` milliseconds.
    pub(super) fn millis(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// What became of one request.
#[derive(Debug)]
pub(super) enum Reply {
    /// The daemon answered: status and JSON body (`null` if not JSON).
    Answer(u16, Value),
    /// No answer within `RETRY_FOR`, or the run is stopping.
    GaveUp,
}

impl Ctx {
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits until the daemon is up (see `up`).
    pub(super) async fn until_up(&self) {
        let mut up = self.up.subscribe();
        let _ = up.wait_for(|up| *up).await;
    }

    /// Sends `make()` until the daemon answers with anything but 503,
    /// for at most `RETRY_FOR`. A connection error (the daemon was killed
    /// while it was sent) or a 503 (not ready yet after a restart) is
    /// retried with the same request once the daemon is up again: every
    /// request sent through here is safe to repeat. Stops early once
    /// `stop` fires.
    pub(super) async fn send(
        &self,
        make: impl Fn() -> RequestBuilder,
        stop: &CancellationToken,
    ) -> Reply {
        let deadline = Instant::now() + RETRY_FOR;
        let mut first = true;
        while Instant::now() < deadline && !stop.is_cancelled() {
            if !first {
                self.ledger.with(|r| r.retries += 1);
            }
            first = false;
            self.until_up().await;
            if let Ok(response) = make().send().await {
                let status = response.status().as_u16();
                if let Ok(text) = response.text().await
                    && status != 503
                {
                    return Reply::Answer(
                        status,
                        serde_json::from_str(&text).unwrap_or(Value::Null),
                    );
                }
            }
            tokio::time::sleep(self.rng.millis(20, 60)).await;
        }
        Reply::GaveUp
    }
}
