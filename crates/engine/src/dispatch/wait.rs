//! Waiting for somewhere to run (docs/tasks.md, Operator agents): when the
//! resolver says a task's next attempt cannot start now (no session to take
//! it), no attempt is opened. The task gives its slot back, keeps its status
//! (`queued` before its first attempt), and asks again shortly, up to its
//! `queue_timeout_secs`, or the engine's `unavailable_wait` when it sets
//! none; then it fails with the resolver's reason. It asks again every
//! [`RECHECK`], and at once when the server says somewhere to run may have
//! appeared (`Engine::wake_waiting`: a session logged in or connected).

use std::sync::Arc;
use std::time::Duration;

use crate::Engine;
use crate::ids::TaskId;
use crate::live::TaskCell;
use crate::task::TaskStatus;

/// How often a waiting task asks again.
pub(super) const RECHECK: Duration = Duration::from_millis(500);

/// Whether the next attempt may start.
pub(super) enum Place {
    Ready,
    Wait,
    GaveUp(String),
}

impl Engine {
    /// Asks again after [`RECHECK`], or as soon as `wake_waiting` fires.
    pub(super) async fn recheck_place(&self, id: TaskId) {
        tokio::select! {
            () = tokio::time::sleep(RECHECK) => {}
            () = self.inner.place_changed.notified() => {}
            () = self.inner.shutdown.cancelled() => return,
        }
        self.readmit(id);
    }

    /// Whether the task's next attempt waits or gives up, given why the
    /// resolver has nowhere to run it now, and keeps the time the task began
    /// to wait (`prepare` clears it when an attempt opens). A task that
    /// ended meanwhile is `Ready`: `prepare` then opens nothing.
    pub(super) fn place(&self, cell: &Arc<TaskCell>, reason: &str) -> Place {
        let now_ms = self.inner.clock.now_ms();
        let mut state = cell.lock();
        let task = &state.task;
        if task.status().is_terminal() {
            return Place::Ready;
        }
        let queue_timeout = task.policy.queue_timeout_secs;
        let never_started = task.status() == TaskStatus::Queued;
        let since = *state.waiting_since_ms.get_or_insert_with(|| {
            tracing::info!(%reason, "waiting for somewhere to run");
            now_ms
        });
        if queue_timeout.is_some() && never_started {
            // The queue timeout ends the wait of a task that never started.
            return Place::Wait;
        }
        let limit = queue_timeout.map_or(self.inner.config.unavailable_wait, Duration::from_secs);
        let waited = Duration::from_millis(now_ms.saturating_sub(since));
        if waited >= limit {
            return Place::GaveUp(format!("{reason} (waited {} s)", waited.as_secs()));
        }
        Place::Wait
    }
}
