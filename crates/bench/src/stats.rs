//! Counting a run: each worker keeps its own `Tally` (completion times,
//! latencies, errors by code) without locks; the tallies are merged at the
//! end and summarised over the measurement window.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Errors printed in full per worker.
const SHOWN_ERRORS: u64 = 3;

/// What one worker saw.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    /// `(done, latency)` in µs; `done` counts from the run's start.
    samples: Vec<(u64, u64)>,
    /// `(done, engine overhead)` in µs, where a workload can tell the
    /// daemon's share of a task's latency from its SubAgent's.
    overheads: Vec<(u64, u64)>,
    /// `(sent, lag)` in µs (open loop): how long after its scheduled time
    /// a request went out.
    lags: Vec<(u64, u64)>,
    /// Errors by code.
    pub errors: BTreeMap<String, u64>,
    /// WebSocket frames received from the daemon.
    pub frames_in: u64,
}

impl Tally {
    /// A task finished at `done` after `latency`; `start` is the run's start.
    pub(crate) fn record(&mut self, start: Instant, done: Instant, latency: Duration) {
        let at = micros(done.saturating_duration_since(start));
        self.samples.push((at, micros(latency)));
    }

    /// The engine's share of a task that finished at `done`: its latency
    /// minus the time its SubAgent spent (see `ws_delegated`).
    pub(crate) fn record_overhead(&mut self, start: Instant, done: Instant, overhead: Duration) {
        let at = micros(done.saturating_duration_since(start));
        self.overheads.push((at, micros(overhead)));
    }

    /// Open loop: a request due earlier went out at `sent`, `lag` late.
    pub(crate) fn record_lag(&mut self, start: Instant, sent: Instant, lag: Duration) {
        let at = micros(sent.saturating_duration_since(start));
        self.lags.push((at, micros(lag)));
    }

    /// One error with this code.
    pub(crate) fn error(&mut self, code: impl Into<String>) {
        self.errors_by(code, 1);
    }

    /// One error with this code; the first few are also printed with their
    /// message, to tell what went wrong.
    pub(crate) fn error_with(&mut self, code: impl Into<String>, message: &str) {
        let code = code.into();
        if self.error_count() < SHOWN_ERRORS {
            eprintln!("swarmd-bench: error {code}: {message}");
        }
        self.error(code);
    }

    /// `count` errors with this code.
    pub(crate) fn errors_by(&mut self, code: impl Into<String>, count: u64) {
        if count > 0 {
            *self.errors.entry(code.into()).or_default() += count;
        }
    }

    /// Adds another worker's tally to this one.
    pub(crate) fn merge(&mut self, other: Tally) {
        self.samples.extend(other.samples);
        self.overheads.extend(other.overheads);
        self.lags.extend(other.lags);
        self.frames_in += other.frames_in;
        for (code, count) in other.errors {
            self.errors_by(code, count);
        }
    }

    /// Errors so far.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The end of the last finished task, from the run's start.
    pub(crate) fn last_done(&self) -> Duration {
        let last = self.samples.iter().map(|(done, _)| *done).max();
        Duration::from_micros(last.unwrap_or(0))
    }

    /// Writes every sample as a `done_ms,latency_us` line, in completion
    /// order, for plotting a run's latency over time.
    pub(crate) fn write_csv(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut samples = self.samples.clone();
        samples.sort_unstable();
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(out, "done_ms,latency_us")?;
        for (done, latency) in samples {
            writeln!(out, "{:.3},{latency}", done as f64 / 1000.0)?;
        }
        out.flush()
    }

    /// The summary over `window`: throughput counts the tasks finished
    /// inside it; latencies are those of every task finished from its start.
    pub(crate) fn summarize(&self, window: Window) -> Summary {
        let from = micros(window.from);
        let to = micros(window.to);
        let in_window = self
            .samples
            .iter()
            .filter(|(done, _)| (from..=to).contains(done))
            .count();
        let mut latencies: Vec<u64> = self
            .samples
            .iter()
            .filter(|(done, _)| *done >= from)
            .map(|(_, latency)| *latency)
            .collect();
        latencies.sort_unstable();
        let mut overheads: Vec<u64> = self
            .overheads
            .iter()
            .filter(|(done, _)| *done >= from)
            .map(|(_, overhead)| *overhead)
            .collect();
        overheads.sort_unstable();
        let mut lags: Vec<u64> = self
            .lags
            .iter()
            .filter(|(sent, _)| (from..=to).contains(sent))
            .map(|(_, lag)| *lag)
            .collect();
        lags.sort_unstable();
        let secs = window.to.saturating_sub(window.from).as_secs_f64();
        Summary {
            completed: in_window as u64,
            window_secs: secs,
            tasks_per_sec: if secs > 0.0 {
                in_window as f64 / secs
            } else {
                0.0
            },
            p50: percentile(&latencies, 50.0),
            p90: percentile(&latencies, 90.0),
            p99: percentile(&latencies, 99.0),
            max: latencies.last().copied().map(Duration::from_micros),
            overhead_p50: percentile(&overheads, 50.0),
            overhead_p99: percentile(&overheads, 99.0),
            send_lag_p99: percentile(&lags, 99.0),
            errors: self.errors.clone(),
            frames_per_task: (self.frames_in > 0 && !self.samples.is_empty())
                .then(|| self.frames_in as f64 / self.samples.len() as f64),
        }
    }
}

/// The measured part of a run, from the run's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    pub from: Duration,
    pub to: Duration,
}

/// Throughput, latency percentiles and errors of a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    /// Tasks finished inside the window.
    pub completed: u64,
    pub window_secs: f64,
    pub tasks_per_sec: f64,
    pub p50: Option<Duration>,
    pub p90: Option<Duration>,
    pub p99: Option<Duration>,
    pub max: Option<Duration>,
    /// The engine's share of the latency (ws-delegated only): the task's
    /// latency minus its SubAgent's span, from the `spawn` frame's arrival
    /// to the answer to its last HTTP call.
    pub overhead_p50: Option<Duration>,
    pub overhead_p99: Option<Duration>,
    /// Open loop: how late the generator sent its requests, at p99. The
    /// latencies count from the scheduled time and include it; the
    /// engine's share does not.
    pub send_lag_p99: Option<Duration>,
    pub errors: BTreeMap<String, u64>,
    /// WebSocket frames received per finished task (ws workloads).
    pub frames_per_task: Option<f64>,
}

impl Summary {
    /// All errors, whatever their code.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// `code×n, …`, or `0`.
    pub(crate) fn errors_text(&self) -> String {
        errors_text(&self.errors)
    }
}

/// Errors by code as `code×n, …`, or `0`.
pub(crate) fn errors_text(errors: &BTreeMap<String, u64>) -> String {
    if errors.is_empty() {
        return "0".to_owned();
    }
    let parts: Vec<String> = errors
        .iter()
        .map(|(code, count)| format!("{code}×{count}"))
        .collect();
    parts.join(", ")
}

/// Nearest-rank percentile of sorted values (µs).
pub(crate) fn percentile(sorted: &[u64], pct: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (pct / 100.0 * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Some(Duration::from_micros(sorted[index]))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50.0), Some(Duration::from_micros(50)));
        assert_eq!(percentile(&values, 99.0), Some(Duration::from_micros(99)));
        assert_eq!(percentile(&values, 100.0), Some(Duration::from_micros(100)));
        assert_eq!(percentile(&[7], 1.0), Some(Duration::from_micros(7)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn throughput_counts_only_the_window_and_latency_skips_the_warmup() {
        let start = Instant::now();
        let mut tally = Tally::default();
        // Warm-up: done at 0.5 s, slow.
        tally.record(start, start + ms(500), ms(900));
        // Window [1 s, 3 s]: four tasks.
        for (done, latency) in [(1000, 1), (1500, 2), (2000, 3), (3000, 4)] {
            tally.record(start, start + ms(done), ms(latency));
        }
        // Drain: after the window, still a latency sample.
        tally.record(start, start + ms(3500), ms(5));
        tally.record_overhead(start, start + ms(3500), ms(2));
        tally.record_overhead(start, start + ms(100), ms(1));
        // Send lags count where the request went out: only inside the window.
        tally.record_lag(start, start + ms(200), ms(9));
        tally.record_lag(start, start + ms(1200), ms(3));
        tally.record_lag(start, start + ms(3200), ms(8));
        let summary = tally.summarize(Window {
            from: ms(1000),
            to: ms(3000),
        });
        assert_eq!(summary.completed, 4);
        assert!((summary.tasks_per_sec - 2.0).abs() < 1e-9);
        assert_eq!(summary.max, Some(ms(5)), "the warm-up's 900 ms is left out");
        assert_eq!(summary.p50, Some(ms(3)));
        assert_eq!(
            summary.overhead_p99,
            Some(ms(2)),
            "the warm-up's 1 ms is left out"
        );
        assert_eq!(summary.send_lag_p99, Some(ms(3)));
        assert_eq!(tally.last_done(), ms(3500));
    }

    #[test]
    fn the_csv_lists_samples_in_completion_order() {
        let start = Instant::now();
        let mut tally = Tally::default();
        tally.record(start, start + ms(20), ms(3));
        tally.record(start, start + ms(10), ms(2));
        let file = tempfile::NamedTempFile::new().unwrap();
        tally.write_csv(file.path()).unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert_eq!(text, "done_ms,latency_us\n10.000,2000\n20.000,3000\n");
    }

    #[test]
    fn merged_tallies_add_samples_and_errors() {
        let start = Instant::now();
        let mut a = Tally::default();
        a.record(start, start + ms(1), ms(1));
        a.error("not_found");
        let mut b = Tally::default();
        b.record(start, start + ms(2), ms(2));
        b.error("not_found");
        b.errors_by("ws_closed", 3);
        b.errors_by("never", 0);
        a.merge(b);
        assert_eq!(a.error_count(), 5);
        let summary = a.summarize(Window {
            from: ms(0),
            to: ms(10),
        });
        assert_eq!(summary.completed, 2);
        assert_eq!(summary.errors_text(), "not_found×2, ws_closed×3");
    }
}
