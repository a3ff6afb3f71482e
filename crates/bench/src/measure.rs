//! The time frame of a run and the resources used in it: a run either lasts
//! a warm-up plus a measured duration, or a fixed count of tasks; the
//! daemon's and the generator's CPU time are read at the start and the end
//! of the measured part, the daemon's peak RSS at the end.

use std::time::{Duration, Instant};

use crate::cli::Bound;
use crate::procfs::{ProcSample, load_average};
use crate::stats::{Tally, Window};

/// When a run sends and what it measures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunClock {
    pub start: Instant,
    /// Duration mode: `(warm-up end, measured end)`; count mode: `None`.
    pub window: Option<(Instant, Instant)>,
    /// Count mode: tasks to run in all.
    pub count: Option<u64>,
    pub drain: Duration,
}

impl RunClock {
    /// A clock starting now.
    pub(crate) fn new(bound: &Bound) -> RunClock {
        let start = Instant::now();
        let window = match bound.count {
            Some(_) => None,
            None => {
                let from = start + bound.warmup;
                Some((from, from + bound.duration))
            }
        };
        RunClock {
            start,
            window,
            count: bound.count,
            drain: bound.drain,
        }
    }

    /// When sending stops (duration mode).
    pub(crate) fn stop_at(&self) -> Option<Instant> {
        self.window.map(|(_, to)| to)
    }

    /// The measured window of a finished run, relative to its start.
    pub(crate) fn measured(&self, tally: &Tally) -> Window {
        match self.window {
            Some((from, to)) => Window {
                from: from - self.start,
                to: to - self.start,
            },
            None => Window {
                from: Duration::ZERO,
                to: tally.last_done(),
            },
        }
    }

    /// The count each of `parts` workers runs (count mode), remainder first.
    pub(crate) fn share(&self, parts: usize, index: usize) -> Option<u64> {
        self.count.map(|count| split(count, parts, index))
    }
}

/// `total` split over `parts`, the remainder to the first ones.
pub(crate) fn split(total: u64, parts: usize, index: usize) -> u64 {
    let parts = parts.max(1) as u64;
    let index = index as u64;
    total / parts + u64::from(index < total % parts)
}

/// Resources used during the measured part.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Usage {
    /// Daemon CPU seconds (user + system).
    pub server_cpu: Option<f64>,
    /// CPU seconds of the daemon's children (process agents).
    pub children_cpu: Option<f64>,
    /// Generator CPU seconds.
    pub generator_cpu: Option<f64>,
    /// Daemon peak RSS since it started, KiB.
    pub server_hwm_kib: Option<u64>,
    /// 1-minute load average at the end.
    pub load: Option<f64>,
}

/// CPU readings taken at the start of the measured part.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sampler {
    pid: Option<u32>,
    server: Option<ProcSample>,
    generator: Option<ProcSample>,
}

impl Sampler {
    /// Reads now.
    pub(crate) fn begin(pid: Option<u32>) -> Sampler {
        Sampler {
            pid,
            server: pid.and_then(ProcSample::read),
            generator: ProcSample::read_self(),
        }
    }

    /// Reads again and returns the difference.
    pub(crate) fn end(&self) -> Usage {
        let server_now = self.pid.and_then(ProcSample::read);
        let generator_now = ProcSample::read_self();
        let delta = |a: Option<ProcSample>, b: Option<ProcSample>, f: fn(&ProcSample) -> f64| {
            Some(f(&b?) - f(&a?))
        };
        Usage {
            server_cpu: delta(self.server, server_now, |s| s.cpu_secs),
            children_cpu: delta(self.server, server_now, |s| s.children_cpu_secs),
            generator_cpu: delta(self.generator, generator_now, |s| s.cpu_secs),
            server_hwm_kib: server_now.map(|s| s.hwm_kib),
            load: load_average(),
        }
    }

    /// Samples over the clock's window: a task that reads at the window's
    /// start and end (duration mode); `None` in count mode, where the
    /// caller reads at its own start and end.
    pub(crate) fn over_window(
        pid: Option<u32>,
        clock: &RunClock,
    ) -> Option<tokio::task::JoinHandle<Usage>> {
        let (from, to) = clock.window?;
        Some(tokio::spawn(async move {
            tokio::time::sleep_until(from.into()).await;
            let sampler = Sampler::begin(pid);
            tokio::time::sleep_until(to.into()).await;
            sampler.end()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_split_with_the_remainder_first() {
        let shares: Vec<u64> = (0..4).map(|i| split(10, 4, i)).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        assert_eq!(split(3, 0, 0), 3, "zero parts count as one");
    }

    #[test]
    fn a_count_run_measures_until_its_last_task() {
        let bound = Bound {
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            count: Some(10),
            drain: Duration::from_secs(1),
        };
        let clock = RunClock::new(&bound);
        assert!(clock.stop_at().is_none());
        let mut tally = Tally::default();
        tally.record(
            clock.start,
            clock.start + Duration::from_millis(40),
            Duration::from_millis(1),
        );
        let window = clock.measured(&tally);
        assert_eq!(
            (window.from, window.to),
            (Duration::ZERO, Duration::from_millis(40))
        );
    }
}
