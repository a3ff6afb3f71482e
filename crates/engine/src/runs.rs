//! Flow runs through the engine (docs/flows.md): the runner records a run's
//! state and pins its flow document only through the engine's write
//! batches, so a run's change can commit with the task it starts
//! (`Engine::create_task_with`, in `create`), and reads them back here.

use crate::Engine;
use crate::create::check_run_ops;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{RunId, SessionId};
use crate::run::{FlowDoc, RunFilter, RunRecord};
use crate::store::WriteOp;

impl Engine {
    /// Commits `ops` (`PutRun` and `PutFlow` only) and `events` as one
    /// batch; returns once it is durable. Accepted while draining too, so
    /// that a run can record its cancel during a drain.
    pub async fn write_run(
        &self,
        ops: Vec<WriteOp>,
        events: Vec<(Option<SessionId>, Event)>,
    ) -> Result<(), EngineError> {
        check_run_ops(&ops)?;
        if ops.is_empty() && events.is_empty() {
            return Ok(());
        }
        self.submit_and_wait(ops, events).await
    }

    pub async fn get_run(&self, id: RunId) -> Result<Option<RunRecord>, EngineError> {
        Ok(self.inner.store.run(id).await?)
    }

    /// The run an idempotency key names.
    pub async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, EngineError> {
        Ok(self.inner.store.run_for_key(key).await?)
    }

    /// Newest first, as `RunFilter` says.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, EngineError> {
        Ok(self.inner.store.list_runs(filter).await?)
    }

    /// Every run not terminal, oldest first: what the runner resumes at boot.
    pub async fn open_runs(&self) -> Result<Vec<RunRecord>, EngineError> {
        Ok(self.inner.store.open_runs().await?)
    }

    pub async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, EngineError> {
        Ok(self.inner.store.flow_doc(hash).await?)
    }
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
