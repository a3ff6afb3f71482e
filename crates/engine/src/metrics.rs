//! Counters and latency histograms the engine keeps with atomics; the server
//! renders them as Prometheus text. Nothing here allocates on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::task::{AttemptOutcome, TaskStatus};

/// Upper bounds (seconds) of the latency buckets; the last bucket is +Inf.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

/// A fixed-bucket histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let idx = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[idx].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Per-bucket (non-cumulative) counts, the +Inf bucket last.
    pub fn counts(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    pub fn sum_secs(&self) -> f64 {
        self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }
}

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
    fn histogram_buckets_and_sum() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(100));
        let c = h.counts();
        assert_eq!(c[0], 1);
        assert_eq!(c[3], 1);
        assert_eq!(c[LATENCY_BUCKETS.len()], 1);
        assert!((h.sum_secs() - 100.0031).abs() < 1e-6);
    }

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
