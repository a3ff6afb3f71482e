//! The `ws-delegated` workload: M MainAI sessions spawn tasks with
//! `spawn_task {delegate: true}`; every `spawn` frame is played as a
//! SubAgent (GET prompt, POST submit through the shared client, then
//! `spawn_ack`); a task counts when its `task_done` arrives, its latency
//! running from when it was due to be sent.
//!
//! Closed loop: each session keeps its share of C tasks in flight. Open
//! loop: each session sends its share of the offered rate on a fixed
//! schedule, whatever is in flight, and latency counts from the scheduled
//! time, so a slow daemon cannot hide queueing by slowing the generator.
//! The engine's share counts from the moment the frame was sent: how late
//! the generator's timer fired is its own error, reported as the send lag.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use swarmd_types::ids::ReqId;
use tokio::sync::mpsc;
use tokio::time::sleep_until;

use crate::cli::{DEFAULT_PROMPT_BYTES, WsArgs};
use crate::daemon::Target;
use crate::measure::{RunClock, Sampler};
use crate::report::RunReport;
use crate::session::{self, Incoming, Kind, Received, Session};
use crate::stats::Tally;
use crate::{pacer, subagent};

/// Open loop: tasks a session may have in flight before it counts
/// `overload` instead of sending.
const OPEN_LOOP_CAP: usize = 100_000;

/// Agent name of the delegated tasks (the session launches its SubAgent;
/// the daemon need not know the agent).
const AGENT: &str = "bench";

/// How a session paces its `spawn_task`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Keep this many in flight.
    Closed(usize),
    /// Send one whenever the pacer says one is due.
    Open,
}

/// Runs the workload and reports it.
pub(crate) async fn run(
    target: &Target,
    http: &reqwest::Client,
    args: &WsArgs,
) -> anyhow::Result<RunReport> {
    let sessions = match args.rate {
        Some(_) => args.sessions.max(1),
        None => args.sessions.clamp(1, args.in_flight.max(1)),
    };
    let mut opened = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        opened.push(Session::open(http, target).await?);
    }
    let clock = RunClock::new(&args.bound);
    let window_sampler = Sampler::over_window(target.pid, &clock);
    let count_sampler = Sampler::begin(target.pid);
    let urls = subagent::WorkerUrls::new(&target.base)?;
    let prompt: Arc<str> = prompt_of(args.prompt_bytes).into();
    let mut workers = Vec::with_capacity(sessions);
    let mut tick_senders = Vec::with_capacity(sessions);
    for (index, session) in opened.into_iter().enumerate() {
        let (tick_tx, ticks) = mpsc::unbounded_channel();
        let pace = match args.rate {
            Some(_) => {
                tick_senders.push(tick_tx);
                Pace::Open
            }
            None => {
                Pace::Closed(crate::measure::split(args.in_flight as u64, sessions, index) as usize)
            }
        };
        let mut driver = Driver::new(
            session,
            target,
            http,
            &urls,
            clock,
            (pace, ticks),
            clock.share(sessions, index),
        );
        driver.prompt = Arc::clone(&prompt);
        workers.push(tokio::spawn(driver.run()));
    }
    let pacer = match args.rate {
        Some(rate) => Some(pacer::start(
            pacer::Schedule {
                first: clock.start,
                period: Duration::from_secs_f64(1.0 / rate.max(0.001)),
                stop: clock.stop_at(),
            },
            tick_senders,
        )?),
        None => None,
    };
    let mut tally = Tally::default();
    for worker in workers {
        tally.merge(worker.await?);
    }
    if let Some(pacer) = pacer
        && pacer.join().is_err()
    {
        anyhow::bail!("the open loop's pacer thread panicked");
    }
    let usage = match window_sampler {
        Some(handle) => handle.await?,
        None => count_sampler.end(),
    };
    let summary = tally.summarize(clock.measured(&tally));
    if let Some(path) = &args.latency_csv {
        tally.write_csv(path)?;
    }
    Ok(RunReport {
        workload: "ws-delegated".to_owned(),
        store: target.store_label.clone(),
        sessions: sessions.to_string(),
        load_shape: {
            let shape = match args.rate {
                Some(rate) => format!("open {rate:.0}/s"),
                None => format!("C={}", args.in_flight),
            };
            match args.prompt_bytes {
                DEFAULT_PROMPT_BYTES => shape,
                bytes => format!("{shape}, prompt {bytes} B"),
            }
        },
        summary,
        usage,
    })
}

/// A prompt of `bytes` bytes: `bench`, repeated and cut to size.
fn prompt_of(bytes: usize) -> String {
    "bench ".repeat(bytes / 6 + 1)[..bytes].to_owned()
}

/// When a task was due and when its `spawn_task` actually went out.
#[derive(Debug, Clone, Copy)]
struct Sent {
    due: Instant,
    at: Instant,
}

/// One played SubAgent: the spawn's `req_id`, its task, how long it took
/// from the `spawn` frame's arrival, and the error code if it failed.
struct SubAgentDone {
    req_id: ReqId,
    task_id: String,
    span: Duration,
    outcome: Result<(), String>,
}

/// One session's side of the run.
struct Driver {
    session: Session,
    target: Target,
    http: reqwest::Client,
    urls: subagent::WorkerUrls,
    clock: RunClock,
    pace: Pace,
    /// Open loop: the due times of this session's requests, from the pacer.
    ticks: mpsc::UnboundedReceiver<Instant>,
    /// Count mode: tasks this session still has to send.
    quota: Option<u64>,
    tally: Tally,
    next_req: u64,
    /// `spawn_task`s not yet accepted: request number → when sent.
    unaccepted: HashMap<u64, Sent>,
    /// Accepted tasks not yet done: task id → when sent.
    running: HashMap<String, Sent>,
    /// SubAgent spans of tasks whose `task_done` has not arrived yet.
    spans: HashMap<String, Duration>,
    /// Tasks done before their SubAgent reported: task id → (done, time
    /// since the `spawn_task` went out).
    done_early: HashMap<String, (Instant, Duration)>,
    subagents_tx: mpsc::UnboundedSender<SubAgentDone>,
    subagents_rx: mpsc::UnboundedReceiver<SubAgentDone>,
    /// Every task's prompt.
    prompt: Arc<str>,
}

impl Driver {
    fn new(
        session: Session,
        target: &Target,
        http: &reqwest::Client,
        urls: &subagent::WorkerUrls,
        clock: RunClock,
        (pace, ticks): (Pace, mpsc::UnboundedReceiver<Instant>),
        quota: Option<u64>,
    ) -> Driver {
        let (subagents_tx, subagents_rx) = mpsc::unbounded_channel();
        Driver {
            session,
            target: target.clone(),
            http: http.clone(),
            urls: urls.clone(),
            clock,
            pace,
            ticks,
            quota,
            tally: Tally::default(),
            next_req: 0,
            unaccepted: HashMap::new(),
            running: HashMap::new(),
            spans: HashMap::new(),
            done_early: HashMap::new(),
            subagents_tx,
            subagents_rx,
            prompt: prompt_of(DEFAULT_PROMPT_BYTES).into(),
        }
    }

    fn in_flight(&self) -> usize {
        self.unaccepted.len() + self.running.len()
    }

    /// Whether new tasks may still be sent.
    fn sending(&self, now: Instant) -> bool {
        self.clock.stop_at().is_none_or(|stop| now < stop) && self.quota != Some(0)
    }

    async fn run(mut self) -> Tally {
        self.top_up(Instant::now());
        let far = self.clock.start + Duration::from_secs(365 * 24 * 3600);
        let mut drain_deadline: Option<Instant> = None;
        // The timer lives across iterations and is only reset when its
        // instant changes: a run handles tens of thousands of frames a second.
        let wake_timer = sleep_until(self.clock.stop_at().unwrap_or(far).into());
        tokio::pin!(wake_timer);
        loop {
            let now = Instant::now();
            let sending = self.sending(now);
            if !sending {
                if self.in_flight() == 0 {
                    break;
                }
                if drain_deadline.is_none() {
                    let deadline = now + self.clock.drain;
                    drain_deadline = Some(deadline);
                    wake_timer.as_mut().reset(deadline.into());
                }
                if drain_deadline.is_some_and(|deadline| now >= deadline) {
                    self.tally.errors_by("unfinished", self.in_flight() as u64);
                    break;
                }
            }
            let open = self.pace == Pace::Open && sending;
            tokio::select! {
                received = self.session.recv() => {
                    if !self.on_message(received) {
                        self.tally.error("ws_closed");
                        self.tally.errors_by("unfinished", self.in_flight() as u64);
                        break;
                    }
                }
                Some(done) = self.subagents_rx.recv() => {
                    self.on_subagent(done);
                }
                Some(due) = self.ticks.recv(), if open => {
                    self.tick(due);
                }
                () = &mut wake_timer => {
                    // Past the stop or drain instant: the loop's checks act on it.
                    wake_timer.as_mut().reset(far.into());
                }
            }
        }
        let Driver {
            session,
            http,
            target,
            mut tally,
            ticks,
            ..
        } = self;
        // The pacer stops once every session has hung up.
        drop(ticks);
        if session.logout(&http, &target).await.is_err() {
            tally.error("logout");
        }
        tally
    }

    /// Open loop: the pacer says a task was due at `due`; send it.
    fn tick(&mut self, due: Instant) {
        if !self.sending(Instant::now()) {
            return;
        }
        if self.in_flight() >= OPEN_LOOP_CAP {
            self.tally.error("overload");
        } else {
            self.send_task(due);
        }
    }

    /// Closed loop: sends until the session's share is in flight.
    fn top_up(&mut self, now: Instant) {
        if let Pace::Closed(target) = self.pace {
            while self.in_flight() < target && self.sending(now) {
                self.send_task(now);
            }
        }
    }

    fn send_task(&mut self, due: Instant) {
        let n = self.next_req;
        self.next_req += 1;
        if let Some(quota) = self.quota.as_mut() {
            *quota = quota.saturating_sub(1);
        }
        let at = Instant::now();
        if self.pace == Pace::Open {
            self.tally
                .record_lag(self.clock.start, at, at.saturating_duration_since(due));
        }
        self.unaccepted.insert(n, Sent { due, at });
        let frame = session::spawn_task(session::own_req_id('b', n), AGENT, &self.prompt, true);
        self.session.send(&frame);
    }

    /// Handles one message; false when the socket is gone.
    fn on_message(&mut self, received: Received) -> bool {
        self.tally.frames_in += 1;
        match received {
            Received::Frame(frame) => self.on_frame(*frame),
            Received::Event | Received::Other => {}
            Received::Malformed => self.tally.error("malformed_frame"),
            Received::Closed => return false,
        }
        true
    }

    fn on_frame(&mut self, frame: Incoming) {
        let now = Instant::now();
        match frame.kind {
            Kind::TaskAccepted => {
                let request = frame.req_id.as_deref().and_then(request_number);
                let sent = request.and_then(|n| self.unaccepted.remove(&n));
                match (sent, frame.task_id) {
                    (Some(sent), Some(task_id)) => {
                        self.running.insert(task_id, sent);
                    }
                    _ => self.tally.error("unexpected_accept"),
                }
            }
            Kind::Spawn => match (
                frame.req_id.and_then(|id| ReqId::new(id).ok()),
                frame.worker_handle,
                frame.task_id,
            ) {
                (Some(req_id), Some(handle), Some(task_id)) => {
                    let http = self.http.clone();
                    let urls = self.urls.clone();
                    let done = self.subagents_tx.clone();
                    tokio::spawn(async move {
                        let outcome = subagent::play(&http, &urls, &handle, &task_id).await;
                        let _ = done.send(SubAgentDone {
                            req_id,
                            task_id,
                            span: now.elapsed(),
                            outcome,
                        });
                    });
                }
                _ => self.tally.error("malformed_spawn"),
            },
            Kind::TaskDone => {
                let sent = frame
                    .task_id
                    .as_ref()
                    .and_then(|id| self.running.remove(id));
                match (sent, frame.status.as_deref()) {
                    (Some(sent), Some("pass")) => {
                        self.tally.record(self.clock.start, now, now - sent.due);
                        let since_sent = now - sent.at;
                        if let Some(task_id) = frame.task_id {
                            match self.spans.remove(&task_id) {
                                Some(span) => self.record_overhead(now, since_sent, span),
                                None => {
                                    self.done_early.insert(task_id, (now, since_sent));
                                }
                            }
                        }
                    }
                    (Some(_), status) => {
                        self.tally.error(format!("task_{}", status.unwrap_or("?")));
                    }
                    (None, _) => self.tally.error("unexpected_done"),
                }
                self.top_up(now);
            }
            Kind::Error => {
                let code = frame.code.unwrap_or_else(|| "error_frame".to_owned());
                self.tally
                    .error_with(code, frame.error.as_deref().unwrap_or(""));
                let request = frame.req_id.as_deref().and_then(request_number);
                if request.is_some_and(|n| self.unaccepted.remove(&n).is_some()) {
                    self.top_up(now);
                }
            }
            Kind::Ask | Kind::HookBefore => match session::go_on(frame.kind, frame.req_id) {
                Some(reply) => {
                    self.session.send(&reply);
                }
                None => self.tally.error("malformed_request"),
            },
            Kind::Cancel | Kind::HookAfter | Kind::TaskEvent => {}
            Kind::Unknown => self.tally.error("unknown_frame"),
        }
    }

    /// The engine's share of a task: the time from its `spawn_task` going
    /// out to its `task_done`, minus its SubAgent's span.
    fn record_overhead(&mut self, done: Instant, since_sent: Duration, span: Duration) {
        let overhead = since_sent.saturating_sub(span);
        self.tally.record_overhead(self.clock.start, done, overhead);
    }

    /// The SubAgent finished: ack its spawn (or fail it, so the task ends).
    fn on_subagent(&mut self, done: SubAgentDone) {
        let SubAgentDone {
            req_id,
            task_id,
            span,
            outcome,
        } = done;
        if outcome.is_ok() {
            match self.done_early.remove(&task_id) {
                Some((at, since_sent)) => self.record_overhead(at, since_sent, span),
                None => {
                    self.spans.insert(task_id, span);
                }
            }
        }
        if let Err(code) = &outcome {
            self.tally.error(code.clone());
        }
        self.session.send(&session::spawn_ack(req_id, outcome));
    }
}

/// The number of a `b<n>` request id.
fn request_number(req_id: &str) -> Option<u64> {
    req_id.strip_prefix('b')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_round_trip() {
        assert_eq!(request_number("b42"), Some(42));
        assert_eq!(request_number("x42"), None);
        assert_eq!(request_number("b"), None);
    }

    #[test]
    fn prompts_have_the_size_asked_for() {
        assert_eq!(prompt_of(DEFAULT_PROMPT_BYTES), "bench");
        assert_eq!(prompt_of(0), "");
        for bytes in [1, 6, 7, 4096] {
            assert_eq!(prompt_of(bytes).len(), bytes);
        }
    }
}
