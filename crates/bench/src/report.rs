//! One row per run, printed as a Markdown table ready for
//! `docs/benchmarks.md`, plus a one-line summary on stderr while a sweep
//! goes on.

use std::fmt::Write as _;
use std::time::Duration;

use crate::measure::Usage;
use crate::stats::Summary;

/// The result of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    /// `ws-delegated`, `http true`, …
    pub workload: String,
    pub store: String,
    /// MainAI sessions (ws) or `-`.
    pub sessions: String,
    /// `C=32` (closed loop) or `1000/s` (open loop).
    pub load_shape: String,
    pub summary: Summary,
    pub usage: Usage,
}

impl RunReport {
    /// Daemon CPU seconds per 1 000 finished tasks.
    pub(crate) fn server_cpu_per_1k(&self) -> Option<f64> {
        per_1k(self.usage.server_cpu, self.summary.completed)
    }

    /// The line printed after each run.
    pub(crate) fn one_line(&self) -> String {
        format!(
            "{} [{}] {} m={}: {:.0} tasks/s, p50 {} p99 {} max {}, engine p50 {} p99 {}, \
             send lag p99 {}, errors {}, srv CPU {} s/1k, gen CPU {} s/1k, peak RSS {} MiB, load {}, \
             frames in/task {}",
            self.workload,
            self.store,
            self.load_shape,
            self.sessions,
            self.summary.tasks_per_sec,
            ms(self.summary.p50),
            ms(self.summary.p99),
            ms(self.summary.max),
            ms(self.summary.overhead_p50),
            ms(self.summary.overhead_p99),
            ms(self.summary.send_lag_p99),
            self.summary.errors_text(),
            opt(self.server_cpu_per_1k(), 3),
            opt(per_1k(self.usage.generator_cpu, self.summary.completed), 3),
            mib(self.usage.server_hwm_kib),
            opt(self.usage.load, 2),
            opt(self.summary.frames_per_task, 1),
        )
    }
}

/// The Markdown table of `reports`.
pub(crate) fn markdown(reports: &[RunReport]) -> String {
    let mut out = String::from(
        "| workload | store | load | M | tasks | tasks/s | p50 ms | p90 ms | p99 ms | max ms \
         | engine p50 ms | engine p99 ms | send lag p99 ms \
         | errors | srv CPU s/1k | child CPU s/1k | gen CPU s/1k | peak RSS MiB | load avg |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|\n",
    );
    for r in reports {
        let s = &r.summary;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.store,
            r.load_shape,
            r.sessions,
            s.completed,
            s.tasks_per_sec,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max),
            ms(s.overhead_p50),
            ms(s.overhead_p99),
            ms(s.send_lag_p99),
            s.errors_text(),
            opt(r.server_cpu_per_1k(), 3),
            opt(per_1k(r.usage.children_cpu, s.completed), 3),
            opt(per_1k(r.usage.generator_cpu, s.completed), 3),
            mib(r.usage.server_hwm_kib),
            opt(r.usage.load, 2),
        );
    }
    out
}

fn per_1k(secs: Option<f64>, tasks: u64) -> Option<f64> {
    (tasks > 0).then_some(secs? * 1000.0 / tasks as f64)
}

fn ms(duration: Option<Duration>) -> String {
    match duration {
        Some(d) => format!("{:.2}", d.as_secs_f64() * 1000.0),
        None => "-".to_owned(),
    }
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_owned(),
    }
}

/// KiB as MiB, one decimal.
pub(crate) fn mib(kib: Option<u64>) -> String {
    match kib {
        Some(k) => format!("{:.1}", k as f64 / 1024.0),
        None => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn report() -> RunReport {
        RunReport {
            workload: "ws-delegated".into(),
            store: "memory".into(),
            sessions: "4".into(),
            load_shape: "C=32".into(),
            summary: Summary {
                completed: 2000,
                window_secs: 1.0,
                tasks_per_sec: 2000.0,
                p50: Some(Duration::from_micros(1500)),
                p90: Some(Duration::from_micros(2500)),
                p99: Some(Duration::from_micros(4000)),
                max: Some(Duration::from_millis(12)),
                overhead_p50: Some(Duration::from_micros(700)),
                overhead_p99: None,
                send_lag_p99: None,
                errors: BTreeMap::new(),
                frames_per_task: None,
            },
            usage: Usage {
                server_cpu: Some(1.0),
                children_cpu: Some(0.0),
                generator_cpu: Some(0.5),
                server_hwm_kib: Some(51_200),
                load: Some(1.5),
            },
        }
    }

    #[test]
    fn a_row_has_every_column_of_the_header() {
        let table = markdown(&[report()]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        let columns = |line: &str| line.matches('|').count();
        assert_eq!(columns(lines[0]), columns(lines[1]));
        assert_eq!(columns(lines[0]), columns(lines[2]));
        assert!(
            lines[2].contains("| 2000 | 1.50 | 2.50 | 4.00 | 12.00 | 0.70 | - | - | 0 | 0.500 |"),
            "{}",
            lines[2]
        );
        assert!(lines[2].ends_with("| 50.0 | 1.50 |"), "{}", lines[2]);
    }

    #[test]
    fn cpu_per_1k_needs_tasks_and_a_reading() {
        let mut r = report();
        assert_eq!(r.server_cpu_per_1k(), Some(0.5));
        r.usage.server_cpu = None;
        assert_eq!(r.server_cpu_per_1k(), None);
        r.summary.completed = 0;
        assert_eq!(per_1k(Some(1.0), 0), None);
    }
}
