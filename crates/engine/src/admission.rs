//! Admission control (docs/tasks.md, Admission): at most `max_running` attempts at once,
//! per-agent concurrency limits, and FIFO order across agents.
//!
//! Every queued task gets a ticket from one counter. Each agent keeps its own
//! FIFO; an agent with queued work and a free slot sits in `ready` under the
//! ticket of its head. Starting work pops the smallest ticket in `ready`, so
//! the oldest startable task goes first and a saturated agent never blocks
//! the others. All operations are O(log agents).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::ids::TaskId;

#[derive(Debug, Default)]
struct AgentQueue {
    limit: Option<usize>,
    running: usize,
    queue: VecDeque<(u64, TaskId)>,
    /// The ticket under which this agent sits in `ready`, if it does.
    ready_key: Option<u64>,
}

impl AgentQueue {
    fn has_slot(&self) -> bool {
        self.limit.is_none_or(|l| self.running < l)
    }
}

#[derive(Debug)]
pub(crate) struct Admission {
    max_running: usize,
    running: usize,
    queued: usize,
    next_ticket: u64,
    agents: HashMap<String, AgentQueue>,
    ready: BTreeMap<u64, String>,
}

impl Admission {
    pub(crate) fn new(max_running: usize) -> Self {
        Admission {
            max_running: max_running.max(1),
            running: 0,
            queued: 0,
            next_ticket: 0,
            agents: HashMap::new(),
            ready: BTreeMap::new(),
        }
    }

    pub(crate) fn running(&self) -> usize {
        self.running
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Queues `task` for `agent` and returns whatever may start now.
    pub(crate) fn enqueue(
        &mut self,
        agent: &str,
        limit: Option<usize>,
        task: TaskId,
    ) -> Vec<(TaskId, String)> {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let q = self.agents.entry(agent.to_owned()).or_default();
        q.limit = limit;
        q.queue.push_back((ticket, task));
        self.queued += 1;
        self.refresh(agent);
        self.start_ready()
    }

    /// Takes a running slot for an attempt that is already running
    /// (a delegated attempt resumed at recovery), even past the limits.
    pub(crate) fn occupy(&mut self, agent: &str, limit: Option<usize>) {
        let q = self.agents.entry(agent.to_owned()).or_default();
        q.limit = limit;
        q.running += 1;
        self.running += 1;
        self.refresh(agent);
    }

    /// Frees the slot an attempt of `agent` held; returns what may start now.
    pub(crate) fn release(&mut self, agent: &str) -> Vec<(TaskId, String)> {
        if let Some(q) = self.agents.get_mut(agent) {
            q.running = q.running.saturating_sub(1);
            self.running = self.running.saturating_sub(1);
            self.refresh(agent);
        }
        self.start_ready()
    }

    /// Drops a queued task (cancelled or timed out). Returns whether it was queued.
    pub(crate) fn remove(&mut self, agent: &str, task: TaskId) -> bool {
        let Some(q) = self.agents.get_mut(agent) else {
            return false;
        };
        let Some(pos) = q.queue.iter().position(|(_, t)| *t == task) else {
            return false;
        };
        q.queue.remove(pos);
        self.queued -= 1;
        self.refresh(agent);
        true
    }

    /// Re-files `agent` in `ready` under its current head, or takes it out.
    fn refresh(&mut self, agent: &str) {
        let Some(q) = self.agents.get_mut(agent) else {
            return;
        };
        if let Some(key) = q.ready_key.take() {
            self.ready.remove(&key);
        }
        if q.has_slot()
            && let Some(&(ticket, _)) = q.queue.front()
        {
            q.ready_key = Some(ticket);
            self.ready.insert(ticket, agent.to_owned());
        }
        if q.queue.is_empty() && q.running == 0 {
            self.agents.remove(agent);
        }
    }

    fn start_ready(&mut self) -> Vec<(TaskId, String)> {
        let mut started = Vec::new();
        while self.running < self.max_running {
            let Some((_, agent)) = self.ready.pop_first() else {
                break;
            };
            let Some(q) = self.agents.get_mut(&agent) else {
                continue;
            };
            q.ready_key = None;
            let Some((_, task)) = q.queue.pop_front() else {
                continue;
            };
            q.running += 1;
            self.running += 1;
            self.queued -= 1;
            self.refresh(&agent);
            started.push((task, agent));
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<TaskId> {
        (0..n).map(|_| TaskId::new()).collect()
    }

    fn started(v: Vec<(TaskId, String)>) -> Vec<TaskId> {
        v.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn global_limit_holds_and_release_starts_fifo() {
        let mut a = Admission::new(2);
        let t = ids(4);
        assert_eq!(started(a.enqueue("x", None, t[0])), vec![t[0]]);
        assert_eq!(started(a.enqueue("y", None, t[1])), vec![t[1]]);
        assert!(a.enqueue("x", None, t[2]).is_empty());
        assert!(a.enqueue("y", None, t[3]).is_empty());
        assert_eq!((a.running(), a.queued()), (2, 2));
        assert_eq!(
            started(a.release("y")),
            vec![t[2]],
            "oldest ticket first, any agent"
        );
        assert_eq!(started(a.release("x")), vec![t[3]]);
        assert_eq!((a.running(), a.queued()), (2, 0));
    }

    #[test]
    fn saturated_agent_does_not_block_others() {
        let mut a = Admission::new(10);
        let t = ids(4);
        assert_eq!(started(a.enqueue("slow", Some(1), t[0])), vec![t[0]]);
        assert!(a.enqueue("slow", Some(1), t[1]).is_empty());
        assert_eq!(started(a.enqueue("fast", None, t[2])), vec![t[2]]);
        assert_eq!(started(a.enqueue("fast", None, t[3])), vec![t[3]]);
        assert_eq!(started(a.release("fast")), Vec::<TaskId>::new());
        assert_eq!(started(a.release("slow")), vec![t[1]]);
    }

    #[test]
    fn remove_drops_queued_task() {
        let mut a = Admission::new(1);
        let t = ids(3);
        a.enqueue("x", None, t[0]);
        a.enqueue("x", None, t[1]);
        a.enqueue("x", None, t[2]);
        assert!(a.remove("x", t[1]));
        assert!(!a.remove("x", t[1]));
        assert_eq!(started(a.release("x")), vec![t[2]]);
        assert_eq!(a.queued(), 0);
    }
}
