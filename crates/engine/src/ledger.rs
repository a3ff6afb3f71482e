//! The engine's ledger: the task store, the output store and the event bus,
//! the one place a change becomes durable and its events are broadcast.
//! Every write is queued here (`submit`); a verb that needs nothing else of
//! the engine is handed a `&Ledger` alone.

use std::future::Future;
use std::sync::Arc;

use swarmd_output_store::{OutputStore, StoreError};
use tokio::sync::oneshot;

use crate::bus::EventBus;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{SessionId, TaskId};
use crate::store::{TaskStore, WriteOp};
use crate::task::Task;

/// What resolves once a queued write is durable (or failed).
pub(crate) type Committed = oneshot::Receiver<Result<(), StoreError>>;

/// The stores and the bus that orders their writes.
#[derive(Debug)]
pub(crate) struct Ledger {
    pub store: Arc<dyn TaskStore>,
    pub outputs: Arc<dyn OutputStore>,
    pub bus: EventBus,
}

impl Ledger {
    /// The task as stored, or `NotFound`: for a task no longer live.
    pub(crate) async fn stored_task(&self, id: TaskId) -> Result<Task, EngineError> {
        self.store
            .task(id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("task {id}")))
    }

    /// Queues the write now; the returned receiver resolves once it is durable.
    pub(crate) fn submit(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
    ) -> Committed {
        let (tx, rx) = oneshot::channel();
        self.bus.submit(
            ops,
            events,
            Some(Box::new(move |res| {
                let _ = tx.send(res);
            })),
        );
        rx
    }

    pub(crate) async fn submit_and_wait(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
    ) -> Result<(), EngineError> {
        wait_commit(self.submit(ops, events)).await
    }

    /// Publishes an event for `session` (durable, then broadcast), waiting
    /// for nothing.
    pub(crate) fn publish(&self, session: Option<SessionId>, event: Event) {
        self.bus.submit(Vec::new(), vec![(session, event)], None);
    }
}

/// Waits for a queued write: `Ok` once it is durable.
pub(crate) async fn wait_commit(rx: Committed) -> Result<(), EngineError> {
    commit_answer(rx.await)
}

/// What a queued write's answer means: `Ok` once it is durable.
fn commit_answer(
    answer: Result<Result<(), StoreError>, oneshot::error::RecvError>,
) -> Result<(), EngineError> {
    answer
        .map_err(|_| EngineError::Store(StoreError::Closed))?
        .map_err(EngineError::Store)
}

/// Waits for a queued write, then runs `then`, told whether the write is
/// durable: `Ok` once it is, after `then` ran. The wait holds the write in
/// a guard (`Committing`): dropped before the commit answers (the verb's
/// HTTP client went away), the guard hands both to a task of its own, so
/// what follows still happens; the normal path neither spawns nor yields.
/// The guard is built when the wait is first polled: await it at once.
pub(crate) async fn wait_then<F, Fut>(committed: Committed, then: F) -> Result<(), EngineError>
where
    F: FnOnce(bool) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut guard = Committing {
        committed: None,
        then: Some(then),
    };
    let answer = guard.committed.insert(committed).await;
    guard.committed = None;
    let result = commit_answer(answer);
    if let Some(then) = guard.then.take() {
        then(result.is_ok()).await;
    }
    result
}

/// A queued write's commit and what must follow it while `wait_then`
/// waits; its `Drop` finishes both when the wait is dropped first.
struct Committing<F, Fut>
where
    F: FnOnce(bool) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    committed: Option<Committed>,
    then: Option<F>,
}

impl<F, Fut> Drop for Committing<F, Fut>
where
    F: FnOnce(bool) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn drop(&mut self) {
        let (Some(committed), Some(then)) = (self.committed.take(), self.then.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move { then(wait_commit(committed).await.is_ok()).await });
    }
}
