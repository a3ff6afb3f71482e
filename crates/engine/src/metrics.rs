//! Counters and latency histograms the engine keeps with atomics; the server
//! renders them as Prometheus text. Nothing here allocates on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::task::{AttemptOutcome, TaskStatus};

pub use swarmd_output_store::histogram::{Histogram, LATENCY_BUCKETS};

/// The engine's counters.
#[derive(Debug, Default)]
pub struct EngineStats {
    pub tasks_created: AtomicU64,
    pub attempts_started: AtomicU64,
    attempts_by_outcome: [AtomicU64; 4],
    tasks_by_status: [AtomicU64; 4],
    /// From admission to the worker being spawned.
    pub dispatch_latency: Histogram,
    /// From an output append (any producer) to its durable commit.
    pub store_append_latency: Histogram,
    /// From the worker's end (its Final posted, its exit, cancel or lease)
    /// to the attempt's outcome being durable and published.
    pub settle_latency: Histogram,
    /// Spilled blob files the retention sweep deleted, and their bytes.
    pub blobs_swept: AtomicU64,
    pub blob_bytes_swept: AtomicU64,
    /// Output writes refused because their attempt's budget was spent.
    pub output_budget_refusals: AtomicU64,
    /// Tokens and cost reported by workers, and budget stops.
    pub usage: crate::budget::UsageMeter,
}

impl EngineStats {
    pub(crate) fn attempt_finished(&self, outcome: AttemptOutcome) {
        let idx = match outcome {
            AttemptOutcome::Pass => 0,
            AttemptOutcome::Blocked => 1,
            AttemptOutcome::Failed => 2,
            AttemptOutcome::Cancelled => 3,
        };
        self.attempts_by_outcome[idx].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn finished(&self, status: TaskStatus) {
        let idx = match status {
            TaskStatus::Pass => 0,
            TaskStatus::Blocked => 1,
            TaskStatus::Failed => 2,
            TaskStatus::Cancelled => 3,
            TaskStatus::Queued | TaskStatus::Running => return,
        };
        self.tasks_by_status[idx].fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts finished, by outcome.
    pub fn attempts_finished(&self) -> [(AttemptOutcome, u64); 4] {
        [
            AttemptOutcome::Pass,
            AttemptOutcome::Blocked,
            AttemptOutcome::Failed,
            AttemptOutcome::Cancelled,
        ]
        .map(|o| {
            let idx = o as usize;
            (o, self.attempts_by_outcome[idx].load(Ordering::Relaxed))
        })
    }

    /// Tasks that became terminal in this process, by status.
    pub fn tasks_finished(&self) -> [(TaskStatus, u64); 4] {
        let statuses = [
            TaskStatus::Pass,
            TaskStatus::Blocked,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ];
        let mut out = [(TaskStatus::Pass, 0); 4];
        for (i, s) in statuses.into_iter().enumerate() {
            out[i] = (s, self.tasks_by_status[i].load(Ordering::Relaxed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_by_label() {
        let s = EngineStats::default();
        s.attempt_finished(AttemptOutcome::Blocked);
        s.finished(TaskStatus::Pass);
        s.finished(TaskStatus::Running);
        assert_eq!(s.attempts_finished()[1], (AttemptOutcome::Blocked, 1));
        assert_eq!(s.tasks_finished()[0], (TaskStatus::Pass, 1));
        assert_eq!(s.tasks_finished().iter().map(|x| x.1).sum::<u64>(), 1);
    }
}
