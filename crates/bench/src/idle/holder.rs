//! One session of the idle-capacity workload: spawns delegated tasks up to
//! its share of the current stage, holds their `spawn` frames without ever
//! playing the SubAgent, and at the end cancels them and waits for their
//! `task_done`. With `queued`, a task counts as held once it is accepted:
//! the daemon runs one at a time and the rest wait in its queue.

use std::collections::HashSet;

use tokio::sync::{mpsc, watch};

use crate::daemon::Target;
use crate::session::{self, Incoming, Kind, Received, Session};
use crate::stats::Tally;

/// `spawn_task`s a session has sent whose `spawn` has not arrived yet.
const WINDOW: usize = 256;

/// What the coordinator asks of the sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stage {
    /// Nothing yet.
    Idle,
    /// Hold `shares[index]` tasks (stage numbers count from 1).
    Hold { stage: u64, shares: Vec<u64> },
    /// Cancel every held task and wait for them to finish.
    Cancel,
}

/// One session's state.
#[derive(Debug)]
pub(super) struct Holder {
    session: Session,
    index: usize,
    /// Tasks are held from their `task_accepted` (queued) rather than from
    /// their `spawn` (waiting on a SubAgent).
    queued: bool,
    stage_rx: watch::Receiver<Stage>,
    reached_tx: mpsc::UnboundedSender<usize>,
    tally: Tally,
    next_req: u64,
    /// Sent `spawn_task`s without their `spawn` yet.
    pending: usize,
    /// Tasks whose `spawn` arrived and that have not finished.
    held: HashSet<String>,
    /// Tasks to hold in this stage.
    target: u64,
    cancelling: bool,
    /// Whether the current stage was reported reached.
    reported: bool,
}

impl Holder {
    pub(super) fn new(
        session: Session,
        index: usize,
        queued: bool,
        stage_rx: watch::Receiver<Stage>,
        reached_tx: mpsc::UnboundedSender<usize>,
    ) -> Holder {
        Holder {
            session,
            index,
            queued,
            stage_rx,
            reached_tx,
            tally: Tally::default(),
            next_req: 0,
            pending: 0,
            held: HashSet::new(),
            target: 0,
            cancelling: false,
            reported: true,
        }
    }

    /// Follows the stages until the cancels are done or the coordinator
    /// goes away; returns the errors seen.
    pub(super) async fn run(mut self, http: reqwest::Client, target: Target) -> Tally {
        loop {
            tokio::select! {
                received = self.session.recv() => match received {
                    Received::Frame(frame) => self.on_frame(*frame),
                    Received::Event | Received::Other => {}
                    Received::Malformed => self.tally.error("malformed_frame"),
                    Received::Closed => {
                        self.tally.error("ws_closed");
                        break;
                    }
                },
                changed = self.stage_rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let stage = self.stage_rx.borrow_and_update().clone();
                    self.on_stage(stage);
                }
            }
            if self.cancelling && self.reported {
                break;
            }
        }
        if !self.held.is_empty() {
            self.tally
                .errors_by("not_cancelled", self.held.len() as u64);
        }
        let Holder {
            session, mut tally, ..
        } = self;
        if session.logout(&http, &target).await.is_err() {
            tally.error("logout");
        }
        tally
    }

    fn on_stage(&mut self, stage: Stage) {
        match stage {
            Stage::Idle => {}
            Stage::Hold { shares, .. } => {
                self.target = shares.get(self.index).copied().unwrap_or(0);
                self.reported = false;
                self.top_up();
            }
            Stage::Cancel => {
                self.cancelling = true;
                self.reported = false;
                let held: Vec<String> = self.held.iter().cloned().collect();
                for task_id in held {
                    self.cancel(&task_id);
                }
            }
        }
        self.check_reached();
    }

    fn on_frame(&mut self, frame: Incoming) {
        match frame.kind {
            Kind::Spawn if !self.queued => self.hold(frame.task_id, "malformed_spawn"),
            Kind::TaskAccepted if self.queued => {
                self.hold(frame.task_id, "malformed_task_accepted");
            }
            Kind::TaskDone => {
                let known = frame.task_id.is_some_and(|id| self.held.remove(&id));
                let status = frame.status.as_deref().unwrap_or("?");
                match (known, self.cancelling, status) {
                    (true, true, "cancelled") => {}
                    (true, true, other) => self.tally.error(format!("task_{other}")),
                    (true, false, other) => self.tally.error(format!("task_{other}_while_held")),
                    (false, ..) => self.tally.error("unexpected_done"),
                }
            }
            Kind::Error => {
                let code = frame.code.unwrap_or_else(|| "error_frame".to_owned());
                self.tally
                    .error_with(code, frame.error.as_deref().unwrap_or(""));
                if frame.req_id.is_some_and(|r| r.starts_with('i')) {
                    self.pending = self.pending.saturating_sub(1);
                }
            }
            Kind::Ask | Kind::HookBefore => match session::go_on(frame.kind, frame.req_id) {
                Some(reply) => {
                    self.session.send(&reply);
                }
                None => self.tally.error("malformed_request"),
            },
            Kind::Spawn | Kind::TaskAccepted | Kind::Cancel | Kind::HookAfter | Kind::TaskEvent => {
            }
            Kind::Unknown => self.tally.error("unknown_frame"),
        }
        self.top_up();
        self.check_reached();
    }

    /// Counts a sent task as held (cancelling it at once when the stage is
    /// already cancelling).
    fn hold(&mut self, task_id: Option<String>, malformed: &'static str) {
        self.pending = self.pending.saturating_sub(1);
        match task_id {
            Some(task_id) => {
                if self.cancelling {
                    self.cancel(&task_id);
                }
                self.held.insert(task_id);
            }
            None => self.tally.error(malformed),
        }
    }

    /// Sends `spawn_task`s until the stage's share is held or pending.
    fn top_up(&mut self) {
        if self.cancelling {
            return;
        }
        while self.pending < WINDOW && (self.held.len() + self.pending) < self.target as usize {
            let req_id = session::own_req_id('i', self.next_req);
            let frame = session::spawn_task(req_id, "bench-idle", "wait", true);
            self.next_req += 1;
            self.pending += 1;
            self.session.send(&frame);
        }
    }

    fn cancel(&mut self, task_id: &str) {
        let Ok(task_id) = task_id.parse() else {
            self.tally.error("malformed_task_id");
            return;
        };
        let frame = session::cancel_task(session::own_req_id('c', self.next_req), task_id);
        self.next_req += 1;
        self.session.send(&frame);
    }

    /// Reports the stage reached once: the share held, or every task gone.
    fn check_reached(&mut self) {
        if self.reported {
            return;
        }
        let reached = if self.cancelling {
            self.held.is_empty() && self.pending == 0
        } else {
            self.pending == 0 && self.held.len() as u64 >= self.target
        };
        if reached {
            self.reported = true;
            let _ = self.reached_tx.send(self.index);
        }
    }
}
