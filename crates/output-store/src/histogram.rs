//! A fixed-bucket latency histogram kept with atomics: observing never
//! allocates or locks, and the server renders it as a Prometheus histogram.
//! It lives in this crate, the lowest of the workspace, so that the store's
//! own timings (the WAL syncs) and the engine's share one type.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of request-scale latencies: dispatch, settle,
/// appends. The last bucket is +Inf.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

/// Upper bounds (seconds) of disk-scale latencies, the WAL syncs and the
/// writer's commits: an `fdatasync` takes a tenth of a millisecond on a
/// fast disk and tens of milliseconds when it stalls. The last bucket is +Inf.
pub const SYNC_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.0,
];

/// A histogram of durations over fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the +Inf bucket.
    counts: Box<[AtomicU64]>,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (seconds, ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let idx = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[idx].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The buckets' upper bounds (seconds); the +Inf bucket is implied.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
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

/// Request-scale buckets (`LATENCY_BUCKETS`).
impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new(&LATENCY_BUCKETS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(100));
        let c = h.counts();
        assert_eq!(c.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!(c[0], 1);
        assert_eq!(c[3], 2, "3 ms and 5 ms (a bound is inclusive)");
        assert_eq!(c[LATENCY_BUCKETS.len()], 1, "past the last bound: +Inf");
        assert!((h.sum_secs() - 100.008_1).abs() < 1e-6);
    }

    #[test]
    fn sync_buckets_tell_tenths_of_a_millisecond_apart() {
        let h = Histogram::new(&SYNC_BUCKETS);
        h.observe(Duration::from_micros(90));
        h.observe(Duration::from_micros(165));
        h.observe(Duration::from_micros(400));
        assert_eq!(h.bounds(), &SYNC_BUCKETS);
        assert_eq!(&h.counts()[..4], [1, 1, 1, 0]);
    }
}
