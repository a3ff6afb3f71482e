//! The overview's recent history (docs/dashboard.md, Overview): every
//! `EVERY` a background task reads the daemon's own counters (tasks created
//! and finished, the dispatch latency histogram, the store's WAL syncs) and
//! keeps what changed in that interval, the newest `KEEP` intervals only.
//! `GET /v1/metrics/history` serves them, so a freshly opened overview shows
//! the last minutes at once. Nothing here touches the hot path: the
//! counters are the atomics `/metrics` reads, read once per interval.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;
use swarmd_engine::Engine;
use swarmd_output_store::SqliteDb;
use swarmd_output_store::histogram::{LATENCY_BUCKETS, SYNC_BUCKETS};
use swarmd_postgres::PgDb;
use tokio_util::sync::CancellationToken;

/// How often a sample is taken.
pub(crate) const EVERY: Duration = Duration::from_secs(5);
/// Samples kept: fifteen minutes' worth (about 40 KB).
pub(crate) const KEEP: usize = 180;

/// The counters at one instant, since the daemon started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub created: u64,
    pub finished: u64,
    /// Per-bucket counts of `LATENCY_BUCKETS`, then +Inf.
    pub dispatch: Vec<u64>,
    /// Per-bucket counts of `SYNC_BUCKETS`, then +Inf: SQLite's WAL syncs,
    /// or PostgreSQL's group commits; empty with neither.
    pub sync: Vec<u64>,
}

impl Totals {
    /// The engine's counters and the durable store's share of an
    /// acknowledgement: SQLite's WAL syncs, or PostgreSQL's group commits
    /// (`BEGIN` to the answer of `COMMIT`, the server's WAL flush included).
    pub fn read(engine: &Engine, db: Option<&SqliteDb>, pg: Option<&PgDb>) -> Totals {
        let stats = engine.stats();
        Totals {
            created: stats.tasks_created.load(Relaxed),
            finished: stats.tasks_finished().iter().map(|(_, n)| n).sum(),
            dispatch: stats.dispatch_latency.counts(),
            sync: match (db, pg) {
                (Some(db), _) => db.stats().sync_latency().counts(),
                (None, Some(pg)) => pg.stats().commit_latency().counts(),
                (None, None) => Vec::new(),
            },
        }
    }
}

/// What changed during one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// The interval's end (unix ms).
    pub at_ms: u64,
    /// Its length in milliseconds.
    pub span_ms: u64,
    pub created: u64,
    pub finished: u64,
    /// Dispatches observed, per bucket of `dispatch_bounds`, +Inf last.
    pub dispatch: Vec<u64>,
    /// WAL syncs observed, per bucket of `sync_bounds`, +Inf last.
    pub sync: Vec<u64>,
}

/// The ring of samples and the totals the next one is measured from.
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    samples: VecDeque<Sample>,
    last: Option<(u64, Totals)>,
}

/// `GET /v1/metrics/history`.
#[derive(Debug, Serialize)]
pub struct HistoryPage {
    pub every_ms: u64,
    pub dispatch_bounds: &'static [f64],
    pub sync_bounds: &'static [f64],
    /// Oldest first.
    pub samples: Vec<Sample>,
}

fn minus(now: &[u64], then: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, n)| n.saturating_sub(then.get(i).copied().unwrap_or(0)))
        .collect()
}

impl History {
    /// Records the totals read at `at_ms`: the first call only sets the
    /// baseline; every later one adds the difference as a sample.
    pub(crate) fn record(&self, at_ms: u64, totals: Totals) {
        let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((then_ms, then)) = &ring.last {
            let sample = Sample {
                at_ms,
                span_ms: at_ms.saturating_sub(*then_ms),
                created: totals.created.saturating_sub(then.created),
                finished: totals.finished.saturating_sub(then.finished),
                dispatch: minus(&totals.dispatch, &then.dispatch),
                sync: minus(&totals.sync, &then.sync),
            };
            if ring.samples.len() == KEEP {
                ring.samples.pop_front();
            }
            ring.samples.push_back(sample);
        }
        ring.last = Some((at_ms, totals));
    }

    /// Every kept sample, oldest first.
    pub(crate) fn page(&self) -> HistoryPage {
        let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        HistoryPage {
            every_ms: u64::try_from(EVERY.as_millis()).unwrap_or(u64::MAX),
            dispatch_bounds: &LATENCY_BUCKETS,
            sync_bounds: &SYNC_BUCKETS,
            samples: ring.samples.iter().cloned().collect(),
        }
    }

    /// Samples `read` every `EVERY` until `stop` fires; `now_ms` is the
    /// clock samples are stamped with.
    pub async fn sample(
        &self,
        stop: CancellationToken,
        now_ms: impl Fn() -> u64,
        read: impl Fn() -> Totals,
    ) {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.record(now_ms(), read()),
                () = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use swarmd_output_store::histogram::Histogram;

    use super::*;

    /// Per-bucket counts of these dispatch latencies.
    fn counts_of(observe: &[Duration]) -> Vec<u64> {
        let histogram = Histogram::default();
        for d in observe {
            histogram.observe(*d);
        }
        histogram.counts()
    }

    fn totals(created: u64, finished: u64, dispatch: &[Duration]) -> Totals {
        Totals {
            created,
            finished,
            dispatch: counts_of(dispatch),
            sync: Vec::new(),
        }
    }

    #[test]
    fn each_sample_is_the_difference_from_the_one_before() {
        let history = History::default();
        history.record(1_000, totals(10, 5, &[Duration::from_millis(1)]));
        assert!(
            history.page().samples.is_empty(),
            "the first read is the baseline"
        );
        let two_ms = Duration::from_millis(2);
        history.record(
            6_000,
            totals(60, 40, &[Duration::from_millis(1), two_ms, two_ms]),
        );
        let page = history.page();
        assert_eq!(page.samples.len(), 1);
        let sample = &page.samples[0];
        assert_eq!((sample.at_ms, sample.span_ms), (6_000, 5_000));
        assert_eq!((sample.created, sample.finished), (50, 35));
        // 2 ms is the third bound (0.5, 1, 2 ms): two new dispatches there.
        assert_eq!(sample.dispatch[2], 2);
        assert_eq!(sample.dispatch.iter().sum::<u64>(), 2);
        assert_eq!(page.dispatch_bounds.len() + 1, sample.dispatch.len());
    }

    #[test]
    fn the_ring_keeps_the_newest_samples_only() {
        let history = History::default();
        for i in 0..=(KEEP as u64 + 20) {
            history.record(i * 5_000, totals(i, i, &[]));
        }
        let samples = history.page().samples;
        assert_eq!(samples.len(), KEEP);
        assert_eq!(samples[KEEP - 1].at_ms, (KEEP as u64 + 20) * 5_000);
        assert_eq!(samples[0].at_ms, 21 * 5_000);
    }

    /// On paused time: one sample per `EVERY`, each the tasks counted in it.
    #[tokio::test(start_paused = true)]
    async fn the_sampler_takes_one_sample_per_interval() {
        let history = Arc::new(History::default());
        let created = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let sampler = {
            let (history, created, stop) = (history.clone(), created.clone(), stop.clone());
            tokio::spawn(async move {
                let now_ms = move || u64::try_from(start.elapsed().as_millis()).unwrap();
                let read = move || totals(created.load(Ordering::Relaxed), 0, &[]);
                history.sample(stop, now_ms, read).await;
            })
        };
        // The first tick is at once (the baseline); then 7 tasks per interval.
        for _ in 0..4 {
            tokio::task::yield_now().await;
            created.fetch_add(7, Ordering::Relaxed);
            tokio::time::sleep(EVERY).await;
        }
        tokio::task::yield_now().await;
        let samples = history.page().samples;
        assert_eq!(samples.len(), 4, "{samples:?}");
        assert!(
            samples.iter().all(|s| s.created == 7 && s.span_ms == 5_000),
            "{samples:?}"
        );
        stop.cancel();
        sampler.await.unwrap();
    }
}
