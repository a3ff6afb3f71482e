//! A bounded memory of recently posted results, so that a retried
//! `post_result` with the same `Idempotency-Key` and body replays its first
//! answer even after the task became terminal and left memory (SPEC §6.5).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ids::TaskId;
use crate::live::PostedFinal;

/// How many posted results are remembered; older ones are forgotten first.
const CAPACITY: usize = 65_536;

#[derive(Debug, Default)]
pub(crate) struct RecentFinals {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<(TaskId, u32), PostedFinal>,
    order: VecDeque<(TaskId, u32)>,
}

impl RecentFinals {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn remember(&self, task: TaskId, attempt: u32, posted: PostedFinal) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.map.insert((task, attempt), posted).is_none() {
            inner.order.push_back((task, attempt));
        }
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
    }

    pub(crate) fn get(&self, task: TaskId, attempt: u32) -> Option<PostedFinal> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.map.get(&(task, attempt)).cloned()
    }
}
