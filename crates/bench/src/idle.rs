//! The `idle-capacity` workload: sessions spawn delegated tasks whose
//! SubAgents never answer (each `spawn` frame is received and held), the
//! daemon's RSS is read each time the number of waiting tasks reaches a
//! checkpoint, and at the end every task is cancelled and must finish
//! `cancelled`.
//!
//! A coordinator drives the sessions through stages over a `watch`
//! channel; each session reports on an mpsc channel when it has reached
//! its share of a stage, and keeps reading its socket meanwhile.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::sync::{mpsc, watch};

use crate::cli::IdleArgs;
use crate::daemon::Target;
use crate::measure::split;
use crate::procfs::{ProcSample, load_average};
use crate::report::mib;
use crate::session::Session;
use crate::stats::{Tally, errors_text};

mod holder;

use holder::{Holder, Stage};

/// The daemon's memory at one checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    /// Tasks waiting on SubAgents.
    pub waiting: u64,
    pub sample: Option<ProcSample>,
    /// Time from the previous checkpoint.
    pub took: Duration,
    pub load: Option<f64>,
}

/// What the workload measured.
#[derive(Debug, Clone)]
pub(crate) struct IdleReport {
    pub store: String,
    /// Whether the tasks were held queued rather than waiting (`--queued`).
    pub queued: bool,
    pub baseline: Option<ProcSample>,
    pub checkpoints: Vec<Checkpoint>,
    pub cancel_took: Duration,
    pub errors: Tally,
}

/// Runs the workload.
pub(crate) async fn run(
    target: &Target,
    http: &reqwest::Client,
    args: &IdleArgs,
) -> anyhow::Result<IdleReport> {
    if args.at.windows(2).any(|w| w[0] > w[1]) {
        bail!("--at must be ascending");
    }
    let sessions = args.sessions.max(1);
    let (stage_tx, stage_rx) = watch::channel(Stage::Idle);
    let (reached_tx, mut reached_rx) = mpsc::unbounded_channel();
    let mut workers = Vec::with_capacity(sessions);
    for index in 0..sessions {
        let session = Session::open(http, target).await?;
        let holder = Holder::new(
            session,
            index,
            args.queued,
            stage_rx.clone(),
            reached_tx.clone(),
        );
        workers.push(tokio::spawn(holder.run(http.clone(), target.clone())));
    }
    drop(reached_tx);
    let baseline = target.pid.and_then(ProcSample::read);
    let mut report = IdleReport {
        store: target.store_label.clone(),
        queued: args.queued,
        baseline,
        checkpoints: Vec::new(),
        cancel_took: Duration::ZERO,
        errors: Tally::default(),
    };
    let mut failed = false;
    for (stage, &waiting) in args.at.iter().enumerate() {
        let started = Instant::now();
        let shares: Vec<u64> = (0..sessions).map(|i| split(waiting, sessions, i)).collect();
        let _ = stage_tx.send(Stage::Hold {
            stage: stage as u64 + 1,
            shares,
        });
        if !all_reached(&mut reached_rx, sessions, args.patience).await {
            let held = held_label(args.queued);
            eprintln!("idle-capacity: {waiting} {held} tasks not reached in time");
            failed = true;
            break;
        }
        let took = started.elapsed();
        // The last frames of the stage are still being written out.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let checkpoint = Checkpoint {
            waiting,
            sample: target.pid.and_then(ProcSample::read),
            took,
            load: load_average(),
        };
        eprintln!("{}", checkpoint_line(&checkpoint, baseline, args.queued));
        report.checkpoints.push(checkpoint);
    }
    let started = Instant::now();
    let _ = stage_tx.send(Stage::Cancel);
    if !all_reached(&mut reached_rx, sessions, args.patience).await {
        eprintln!("idle-capacity: the cancels did not all finish in time");
    }
    report.cancel_took = started.elapsed();
    drop(stage_tx);
    for worker in workers {
        report.errors.merge(worker.await?);
    }
    if failed {
        report.errors.error("checkpoint_not_reached");
    }
    Ok(report)
}

/// Waits for `sessions` reports of the current stage.
async fn all_reached(
    reached: &mut mpsc::UnboundedReceiver<usize>,
    sessions: usize,
    patience: Duration,
) -> bool {
    let wait = async {
        for _ in 0..sessions {
            if reached.recv().await.is_none() {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(patience, wait).await.unwrap_or(false)
}

/// How the held tasks are named in the output.
fn held_label(queued: bool) -> &'static str {
    if queued { "queued" } else { "waiting" }
}

fn checkpoint_line(c: &Checkpoint, baseline: Option<ProcSample>, queued: bool) -> String {
    format!(
        "idle-capacity: {} {}: RSS {} MiB, peak {} MiB, {} KiB/task, reached in {:.1} s, load {}",
        c.waiting,
        held_label(queued),
        mib(c.sample.map(|s| s.rss_kib)),
        mib(c.sample.map(|s| s.hwm_kib)),
        per_task_kib(c, baseline),
        c.took.as_secs_f64(),
        c.load.map_or("-".to_owned(), |l| format!("{l:.2}")),
    )
}

/// RSS over the baseline per waiting task, in KiB.
fn per_task_kib(c: &Checkpoint, baseline: Option<ProcSample>) -> String {
    match (c.sample, baseline) {
        (Some(now), Some(base)) if c.waiting > 0 => format!(
            "{:.2}",
            now.rss_kib.saturating_sub(base.rss_kib) as f64 / c.waiting as f64
        ),
        _ => "-".to_owned(),
    }
}

impl IdleReport {
    /// The Markdown table of the checkpoints.
    pub(crate) fn markdown(&self) -> String {
        let held = held_label(self.queued);
        let mut out = format!(
            "| store | {held} tasks | RSS MiB | peak RSS MiB | KiB/task over idle | time to reach s | load avg |\n\
             |---|--:|--:|--:|--:|--:|--:|\n",
        );
        let _ = writeln!(
            out,
            "| {} | 0 | {} | {} | - | - | - |",
            self.store,
            mib(self.baseline.map(|s| s.rss_kib)),
            mib(self.baseline.map(|s| s.hwm_kib)),
        );
        for c in &self.checkpoints {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.1} | {} |",
                self.store,
                c.waiting,
                mib(c.sample.map(|s| s.rss_kib)),
                mib(c.sample.map(|s| s.hwm_kib)),
                per_task_kib(c, self.baseline),
                c.took.as_secs_f64(),
                c.load.map_or("-".to_owned(), |l| format!("{l:.2}")),
            );
        }
        let _ = writeln!(
            out,
            "\nCancelling them all took {:.1} s; errors: {}.",
            self.cancel_took.as_secs_f64(),
            errors_text(&self.errors.errors)
        );
        out
    }
}
