//! Flow runs through the engine (docs/flows.md): the runner records a run's
//! state and pins its flow document only through the engine's write
//! batches, so a run's change can commit with the task it starts
//! (`Engine::create_task_with`, in `create`), and reads them back here.

use crate::create::check_run_ops;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{RunId, SessionId};
use crate::ledger::Ledger;
use crate::run::{FlowDoc, RunFilter, RunRecord};
use crate::store::WriteOp;

pub(crate) async fn write_run(
    ledger: &Ledger,
    ops: Vec<WriteOp>,
    events: Vec<(Option<SessionId>, Event)>,
) -> Result<(), EngineError> {
    check_run_ops(&ops)?;
    if ops.is_empty() && events.is_empty() {
        return Ok(());
    }
    ledger.submit_and_wait(ops, events).await
}

pub(crate) async fn get_run(ledger: &Ledger, id: RunId) -> Result<Option<RunRecord>, EngineError> {
    Ok(ledger.store.run(id).await?)
}

pub(crate) async fn run_for_key(ledger: &Ledger, key: &str) -> Result<Option<RunId>, EngineError> {
    Ok(ledger.store.run_for_key(key).await?)
}

pub(crate) async fn list_runs(
    ledger: &Ledger,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>, EngineError> {
    Ok(ledger.store.list_runs(filter).await?)
}

pub(crate) async fn open_runs(ledger: &Ledger) -> Result<Vec<RunRecord>, EngineError> {
    Ok(ledger.store.open_runs().await?)
}

pub(crate) async fn flow_doc(ledger: &Ledger, hash: &str) -> Result<Option<FlowDoc>, EngineError> {
    Ok(ledger.store.flow_doc(hash).await?)
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
