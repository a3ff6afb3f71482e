//! What the `mcp` command prints: a latency spread per path of the round
//! trips (mean and nearest-rank percentiles), the MCP overhead as the
//! difference to the direct paths, and one row per fan-out run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::stats::{errors_text, percentile};

/// Mean, percentiles and maximum of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Spread {
    /// The spread of `samples`; `None` when there are none.
    pub(crate) fn of(samples: &[Duration]) -> Option<Spread> {
        let mut micros: Vec<u64> = samples
            .iter()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .collect();
        micros.sort_unstable();
        let total: u128 = samples.iter().map(Duration::as_micros).sum();
        let count = samples.len();
        let mean = u64::try_from(total / u128::try_from(count.max(1)).ok()?).ok()?;
        Some(Spread {
            count,
            mean: Duration::from_micros(mean),
            p50: percentile(&micros, 50.0)?,
            p90: percentile(&micros, 90.0)?,
            p99: percentile(&micros, 99.0)?,
            max: Duration::from_micros(*micros.last()?),
        })
    }
}

/// The round trips of one path.
#[derive(Debug, Clone)]
pub(crate) struct PathRow {
    /// `MCP spawn + wait`, `WS spawn_task → task_done`, …
    pub path: String,
    pub spread: Option<Spread>,
    pub errors: BTreeMap<String, u64>,
    /// A path the MCP one is compared with (the first row is MCP's).
    pub direct: bool,
}

/// One fan-out run.
#[derive(Debug, Clone)]
pub(crate) struct FanoutRow {
    /// `sequential`, or `C=8`.
    pub shape: String,
    pub tasks: usize,
    /// Tasks that ended `pass`.
    pub passed: usize,
    pub calls: usize,
    pub wall: Duration,
    /// Time of the `spawn_many` calls in all, and of the `wait` calls.
    pub spawn_time: Duration,
    pub wait_time: Duration,
    /// The slowest call and its tool.
    pub slowest: (Duration, &'static str),
    pub errors: BTreeMap<String, u64>,
    /// Daemon CPU seconds (user + system) over the run, with `--pid` or a
    /// started daemon.
    pub server_cpu: Option<f64>,
}

impl FanoutRow {
    /// Daemon CPU milliseconds per task.
    pub(crate) fn server_cpu_per_task(&self) -> Option<f64> {
        (self.tasks > 0).then_some(self.server_cpu? * 1000.0 / self.tasks as f64)
    }

    /// Tasks passed per second of wall time.
    pub(crate) fn tasks_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.passed as f64 / secs
        } else {
            0.0
        }
    }
}

/// The round-trip table, with the overhead lines under it.
pub(crate) fn round_trips(rows: &[PathRow]) -> String {
    let mut out = String::from(
        "| path | round trips | mean ms | p50 ms | p90 ms | p99 ms | max ms | errors |\n\
         |---|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for row in rows {
        let cell = |pick: fn(&Spread) -> Duration| {
            row.spread.as_ref().map_or("-".to_owned(), |s| ms(pick(s)))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.path,
            row.spread.map_or(0, |s| s.count),
            cell(|s| s.mean),
            cell(|s| s.p50),
            cell(|s| s.p90),
            cell(|s| s.p99),
            cell(|s| s.max),
            errors_text(&row.errors),
        );
    }
    if let Some(mcp) = rows.first().and_then(|r| r.spread) {
        for row in rows.iter().filter(|row| row.direct) {
            if let Some(direct) = row.spread {
                let _ = writeln!(
                    out,
                    "\nMCP overhead over {}: mean {} ms, p50 {} ms, p90 {} ms, p99 {} ms.",
                    row.path,
                    diff(mcp.mean, direct.mean),
                    diff(mcp.p50, direct.p50),
                    diff(mcp.p90, direct.p90),
                    diff(mcp.p99, direct.p99),
                );
            }
        }
    }
    out
}

/// The fan-out table.
pub(crate) fn fanouts(rows: &[FanoutRow]) -> String {
    let mut out = String::from(
        "| fan-out | tasks | passed | calls | wall s | tasks/s | spawn calls s | wait calls s \
         | slowest call ms | srv CPU ms/task | errors |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.3} | {:.0} | {:.3} | {:.3} | {} ({}) | {} | {} |",
            row.shape,
            row.tasks,
            row.passed,
            row.calls,
            row.wall.as_secs_f64(),
            row.tasks_per_sec(),
            row.spawn_time.as_secs_f64(),
            row.wait_time.as_secs_f64(),
            ms(row.slowest.0),
            row.slowest.1,
            row.server_cpu_per_task()
                .map_or("-".to_owned(), |ms| format!("{ms:.3}")),
            errors_text(&row.errors),
        );
    }
    out
}

fn ms(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1000.0)
}

/// `a - b` in ms, signed.
fn diff(a: Duration, b: Duration) -> String {
    let delta = a.as_secs_f64() - b.as_secs_f64();
    format!("{:+.2}", delta * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn the_spread_has_the_mean_and_nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(us).collect();
        let spread = Spread::of(&samples).expect("samples");
        assert_eq!(spread.count, 100);
        assert_eq!(spread.mean, us(50), "5050 / 100, truncated to the µs");
        assert_eq!(
            (spread.p50, spread.p90, spread.p99),
            (us(50), us(90), us(99))
        );
        assert_eq!(spread.max, us(100));
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn the_overhead_is_mcp_minus_each_direct_path() {
        let row = |path: &str, base: u64, direct: bool| PathRow {
            path: path.to_owned(),
            spread: Spread::of(&[us(base), us(base + 1000)]),
            errors: BTreeMap::new(),
            direct,
        };
        let table = round_trips(&[
            row("MCP", 3000, false),
            row("WS", 1000, true),
            row("HTTP", 4000, true),
            row("spawn alone", 500, false),
        ]);
        assert!(!table.contains("over spawn alone"), "{table}");
        assert!(
            table.contains("MCP overhead over WS: mean +2.00 ms, p50 +2.00 ms"),
            "{table}"
        );
        assert!(
            table.contains("MCP overhead over HTTP: mean -1.00 ms"),
            "{table}"
        );
        let lines: Vec<&str> = table.lines().take(6).collect();
        let columns = |line: &str| line.matches('|').count();
        assert!(
            lines[..6].iter().all(|l| columns(l) == columns(lines[0])),
            "{table}"
        );
    }

    #[test]
    fn a_fanout_row_counts_passed_tasks_per_wall_second() {
        let row = FanoutRow {
            shape: "sequential".to_owned(),
            tasks: 1000,
            passed: 1000,
            calls: 20,
            wall: Duration::from_millis(500),
            spawn_time: Duration::from_millis(200),
            wait_time: Duration::from_millis(300),
            slowest: (Duration::from_millis(40), "wait"),
            errors: BTreeMap::new(),
            server_cpu: Some(0.25),
        };
        assert!((row.tasks_per_sec() - 2000.0).abs() < 1e-9);
        let table = fanouts(&[row]);
        assert!(
            table.contains("| sequential | 1000 | 1000 | 20 | 0.500 | 2000 | 0.200 | 0.300 | 40.00 (wait) | 0.250 | 0 |"),
            "{table}"
        );
    }
}
