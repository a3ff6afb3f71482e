//! Counters and latency histograms the engine keeps with atomics; the server
//! renders them as Prometheus text. Nothing here allocates on the hot path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

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
    /// Finished tasks by agent: statuses and durations.
    pub agents: AgentStats,
}

/// Upper bounds (seconds) of task durations, creation to finish: from a
/// millisecond to an hour, each about twice the one before. The last
/// bucket is +Inf.
pub const TASK_BUCKETS: [f64; 22] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];

/// Agents counted by name; tasks of further names are not counted.
pub const MAX_COUNTED_AGENTS: usize = 1024;

/// One agent's finished tasks since the daemon started.
#[derive(Debug)]
pub struct AgentCounters {
    by_status: [AtomicU64; 4],
    /// From the task's creation to its finish.
    pub durations: Histogram,
}

impl Default for AgentCounters {
    fn default() -> AgentCounters {
        AgentCounters {
            by_status: Default::default(),
            durations: Histogram::new(&TASK_BUCKETS),
        }
    }
}

impl AgentCounters {
    fn add(&self, idx: usize, took: std::time::Duration) {
        self.by_status[idx].fetch_add(1, Ordering::Relaxed);
        self.durations.observe(took);
    }

    /// Finished tasks by status: pass, blocked, failed, cancelled.
    pub fn by_status(&self) -> [u64; 4] {
        self.by_status.each_ref().map(|c| c.load(Ordering::Relaxed))
    }
}

/// Finished tasks by agent. Counting takes a read lock and two atomic adds;
/// the write lock is taken once per agent name, the first time it finishes
/// a task.
#[derive(Debug, Default)]
pub struct AgentStats {
    by_agent: RwLock<HashMap<String, Arc<AgentCounters>>>,
}

impl AgentStats {
    fn count(&self, agent: &str, idx: usize, duration_ms: u64) {
        let took = std::time::Duration::from_millis(duration_ms);
        {
            let map = self.by_agent.read().unwrap_or_else(|e| e.into_inner());
            if let Some(counters) = map.get(agent) {
                counters.add(idx, took);
                return;
            }
        }
        let mut map = self.by_agent.write().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(agent) && map.len() >= MAX_COUNTED_AGENTS {
            return;
        }
        map.entry(agent.to_owned()).or_default().add(idx, took);
    }

    /// The counters of `agent`, if it finished a task since start.
    pub fn get(&self, agent: &str) -> Option<Arc<AgentCounters>> {
        let map = self.by_agent.read().unwrap_or_else(|e| e.into_inner());
        map.get(agent).cloned()
    }
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

    /// Counts a task of `agent` that became terminal `duration_ms` after
    /// its creation.
    pub(crate) fn finished(&self, agent: &str, status: TaskStatus, duration_ms: u64) {
        let idx = match status {
            TaskStatus::Pass => 0,
            TaskStatus::Blocked => 1,
            TaskStatus::Failed => 2,
            TaskStatus::Cancelled => 3,
            TaskStatus::Queued | TaskStatus::Running => return,
        };
        self.tasks_by_status[idx].fetch_add(1, Ordering::Relaxed);
        self.agents.count(agent, idx, duration_ms);
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
        s.finished("a", TaskStatus::Pass, 3);
        s.finished("a", TaskStatus::Running, 3);
        assert_eq!(s.attempts_finished()[1], (AttemptOutcome::Blocked, 1));
        assert_eq!(s.tasks_finished()[0], (TaskStatus::Pass, 1));
        assert_eq!(s.tasks_finished().iter().map(|x| x.1).sum::<u64>(), 1);
    }

    #[test]
    fn agents_are_counted_apart_with_their_durations() {
        let s = EngineStats::default();
        s.finished("coder", TaskStatus::Pass, 3);
        s.finished("coder", TaskStatus::Failed, 4_000);
        s.finished("coder", TaskStatus::Pass, 4);
        s.finished("review", TaskStatus::Blocked, 1);
        let coder = s.agents.get("coder").unwrap();
        assert_eq!(coder.by_status(), [2, 0, 1, 0]);
        let counts = coder.durations.counts();
        // 3 and 4 ms are ≤ 5 ms (the third bound), 4 s is ≤ 5 s (the twelfth).
        assert_eq!((counts[2], counts[11]), (2, 1));
        assert_eq!(s.agents.get("review").unwrap().by_status(), [0, 1, 0, 0]);
        assert!(s.agents.get("nobody").is_none());
    }

    #[test]
    fn agent_names_past_the_cap_are_not_counted() {
        let s = EngineStats::default();
        for i in 0..MAX_COUNTED_AGENTS + 3 {
            s.finished(&format!("a{i}"), TaskStatus::Pass, 1);
        }
        assert!(s.agents.get("a0").is_some());
        assert!(s.agents.get(&format!("a{}", MAX_COUNTED_AGENTS)).is_none());
        s.finished("a0", TaskStatus::Pass, 1);
        assert_eq!(s.agents.get("a0").unwrap().by_status()[0], 2);
        // The task totals count every name.
        assert_eq!(s.tasks_finished()[0].1, MAX_COUNTED_AGENTS as u64 + 4);
    }
}
