//! The fan-out through one MCP session: N tasks created with `spawn_many`
//! (calls of at most 100) and then collected with `wait` in mode `all`
//! (groups of at most 100), one call after another, as a MainAI fanning
//! work out would; optionally also C concurrent loops of `spawn` + `wait`
//! of one task each on the same session. A task counts when `wait` says it
//! passed; a refused call, a refused entry, a task that did not pass and a
//! `wait` that timed out are errors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::client::McpClient;
use super::overhead::PROMPT;
use super::report::FanoutRow;
use crate::measure::split;

/// The sizes of the calls that cover `total` tasks, `size` at most each.
pub(crate) fn batches(total: usize, size: usize) -> Vec<usize> {
    let size = size.max(1);
    (0..total.div_ceil(size))
        .map(|index| size.min(total - index * size))
        .collect()
}

/// Calls made so far: how many, their time per tool, the slowest.
#[derive(Debug, Default)]
struct Calls {
    count: usize,
    spawn_time: Duration,
    wait_time: Duration,
    slowest: (Duration, &'static str),
    errors: BTreeMap<String, u64>,
    passed: usize,
}

impl Calls {
    fn timed(&mut self, tool: &'static str, took: Duration) {
        self.count += 1;
        match tool {
            "wait" => self.wait_time += took,
            _ => self.spawn_time += took,
        }
        if took > self.slowest.0 {
            self.slowest = (took, tool);
        }
    }

    fn error(&mut self, code: String) {
        *self.errors.entry(code).or_default() += 1;
    }

    /// Counts the statuses of a `wait` answer.
    fn statuses<'a>(&mut self, statuses: impl Iterator<Item = &'a str>) {
        for status in statuses {
            match status {
                "pass" => self.passed += 1,
                other => self.error(format!("task_{other}")),
            }
        }
    }

    fn merge(&mut self, other: Calls) {
        self.count += other.count;
        self.spawn_time += other.spawn_time;
        self.wait_time += other.wait_time;
        if other.slowest.0 > self.slowest.0 {
            self.slowest = other.slowest;
        }
        for (code, count) in other.errors {
            *self.errors.entry(code).or_default() += count;
        }
        self.passed += other.passed;
    }

    fn row(self, shape: String, tasks: usize, wall: Duration) -> FanoutRow {
        FanoutRow {
            shape,
            tasks,
            passed: self.passed,
            calls: self.count,
            wall,
            spawn_time: self.spawn_time,
            wait_time: self.wait_time,
            slowest: self.slowest,
            errors: self.errors,
            server_cpu: None,
        }
    }
}

/// `tasks` tasks: every `spawn_many` first, then every `wait`.
pub(crate) async fn sequential(
    mcp: &McpClient,
    agent: &str,
    tasks: usize,
    batch: usize,
) -> FanoutRow {
    let mut calls = Calls::default();
    let start = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for size in batches(tasks, batch) {
        let sent = Instant::now();
        let answer = mcp.spawn_many(agent, PROMPT, size).await;
        calls.timed("spawn_many", sent.elapsed());
        match answer {
            Ok(results) => {
                for result in results {
                    match result {
                        Ok(id) => ids.push(id),
                        Err(code) => calls.error(code),
                    }
                }
            }
            Err(code) => calls.error(format!("spawn_many:{code}")),
        }
    }
    for group in ids.chunks(batch.max(1)) {
        let sent = Instant::now();
        let answer = mcp.wait_all(group).await;
        calls.timed("wait", sent.elapsed());
        match answer {
            Ok(waited) => calls.statuses(waited.iter().map(|t| t.status.as_str())),
            Err(code) => calls.error(format!("wait:{code}")),
        }
    }
    let wall = start.elapsed();
    calls.row(format!("sequential, {batch} per call"), tasks, wall)
}

/// `tasks` tasks over `loops` concurrent loops of `spawn` + `wait`.
pub(crate) async fn concurrent(
    mcp: &McpClient,
    agent: &str,
    tasks: usize,
    loops: usize,
) -> FanoutRow {
    let loops = loops.max(1);
    let start = Instant::now();
    let runs = (0..loops).map(|index| {
        let share = split(tasks as u64, loops, index);
        one_loop(mcp, agent, share)
    });
    let mut calls = Calls::default();
    for done in join_all(runs).await {
        calls.merge(done);
    }
    let wall = start.elapsed();
    calls.row(format!("C={loops} loops of spawn + wait"), tasks, wall)
}

async fn one_loop(mcp: &McpClient, agent: &str, share: u64) -> Calls {
    let mut calls = Calls::default();
    for _ in 0..share {
        let sent = Instant::now();
        let spawned = mcp.spawn(agent, PROMPT).await;
        calls.timed("spawn", sent.elapsed());
        let id = match spawned {
            Ok(id) => id,
            Err(code) => {
                calls.error(format!("spawn:{code}"));
                continue;
            }
        };
        let sent = Instant::now();
        let answer = mcp.wait_all(std::slice::from_ref(&id)).await;
        calls.timed("wait", sent.elapsed());
        match answer {
            Ok(waited) => calls.statuses(waited.iter().map(|t| t.status.as_str())),
            Err(code) => calls.error(format!("wait:{code}")),
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_tasks_are_ten_calls_of_a_hundred() {
        assert_eq!(batches(1000, 100), vec![100; 10]);
        assert_eq!(batches(250, 100), vec![100, 100, 50]);
        assert_eq!(batches(99, 100), vec![99]);
        assert!(batches(0, 100).is_empty());
        assert_eq!(batches(3, 0), vec![1, 1, 1], "a zero size counts as one");
    }

    #[test]
    fn the_slowest_call_and_the_time_per_tool_are_kept() {
        let mut calls = Calls::default();
        calls.timed("spawn_many", Duration::from_millis(5));
        calls.timed("wait", Duration::from_millis(9));
        calls.timed("wait", Duration::from_millis(2));
        calls.statuses(["pass", "pass", "failed"].into_iter());
        let mut other = Calls::default();
        other.timed("spawn", Duration::from_millis(20));
        other.error("wait:tool:not_found".to_owned());
        calls.merge(other);
        let row = calls.row("x".to_owned(), 3, Duration::from_secs(1));
        assert_eq!(row.calls, 4);
        assert_eq!(row.slowest, (Duration::from_millis(20), "spawn"));
        assert_eq!(row.spawn_time, Duration::from_millis(25));
        assert_eq!(row.wait_time, Duration::from_millis(11));
        assert_eq!(row.passed, 2);
        assert_eq!(row.errors.values().sum::<u64>(), 2);
    }
}
