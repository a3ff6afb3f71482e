//! What the engine's verb modules share of it: an attempt's Final posted
//! over HTTP, an event's publication, the resolver behind its guard,
//! admission's start, and the narrow handles a verb is given instead of
//! the engine (`ending`, `workers`, `appends`, `continuations`,
//! `retention`).

use crate::Engine;
use crate::cancel;
use crate::event::Event;
use crate::ids::{AttemptId, TaskId};
use crate::spawn::SpawnerResolver;

impl Engine {
    /// Resolves once a worker posted a Final for this attempt over HTTP, or
    /// at once if it already has or the attempt is no longer current.
    pub(crate) async fn posted_final(&self, id: AttemptId) {
        let rx = {
            let Some(cell) = self.inner.held.live.get(&id.task) else {
                return;
            };
            let state = cell.lock();
            match state.run.as_ref() {
                Some(run) if run.attempt == id.n => run.posted_tx.subscribe(),
                _ => return,
            }
        };
        let mut rx = rx;
        let _ = rx.wait_for(|posted| *posted).await;
    }

    /// Publishes an event (durable, then broadcast).
    pub(crate) fn publish(&self, event: Event) {
        let session = event
            .task_id()
            .and_then(|id| self.inner.held.live.get(&id))
            .and_then(|cell| cell.lock().task.session);
        self.inner.ledger.publish(session, event);
    }

    /// The handles ending a task from outside its attempt needs (`cancel`).
    pub(crate) fn ending(&self) -> cancel::Ending<'_> {
        cancel::Ending {
            held: &self.inner.held,
            ledger: &self.inner.ledger,
            clock: &*self.inner.clock,
            stats: &self.inner.stats,
        }
    }

    /// The handles reading a finished task's leavings needs
    /// (`continuation`).
    pub(crate) fn continuations(&self) -> crate::continuation::Continuations<'_> {
        crate::continuation::Continuations {
            held: &self.inner.held,
            ledger: &self.inner.ledger,
        }
    }

    /// The handles appending an attempt's output needs (`output`).
    pub(crate) fn appends(&self) -> crate::output::Appends<'_> {
        self.workers().appends()
    }

    /// The handles pruning and sweeping need (`retention`).
    pub(crate) fn retention(&self) -> crate::retention::Retention<'_> {
        crate::retention::Retention {
            ledger: &self.inner.ledger,
            held: &self.inner.held,
            stats: &self.inner.stats,
            clock: &*self.inner.clock,
            tokens: &self.inner.tokens,
        }
    }

    /// The handles the worker-side operations need (`worker_api`).
    pub(crate) fn workers(&self) -> crate::worker_api::Workers<'_> {
        crate::worker_api::Workers {
            held: &self.inner.held,
            ledger: &self.inner.ledger,
            tokens: &self.inner.tokens,
            clock: &*self.inner.clock,
            config: &self.inner.config,
            stats: &self.inner.stats,
        }
    }

    /// The resolver. It is never asked under a task's lock (the lock order
    /// in `engine.rs`); debug builds assert that.
    pub(crate) fn resolver(&self) -> &dyn SpawnerResolver {
        debug_assert!(
            !crate::live::task_lock_held(),
            "the resolver is asked under a task's lock"
        );
        &*self.inner.resolver
    }

    /// The agent's concurrency limit (none when it no longer resolves).
    pub(crate) fn agent_limit(&self, agent: &str, layers: &[String]) -> Option<usize> {
        self.resolver()
            .profile(agent, layers)
            .ok()
            .and_then(|p| p.concurrency)
    }

    /// Queues a task for admission and starts whatever may start.
    pub(crate) fn admit(&self, agent: &str, limit: Option<usize>, id: TaskId) {
        let start = self.inner.held.admission().enqueue(agent, limit, id);
        self.start(start);
    }

    pub(crate) fn start(&self, started: Vec<(TaskId, String)>) {
        for (id, agent) in started {
            let engine = self.clone();
            self.inner
                .tracker
                .spawn(async move { engine.dispatch_attempt(id, agent).await });
        }
    }
}
