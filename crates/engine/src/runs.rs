//! Flow runs through the engine (docs/flows.md): the runner records a run's
//! state and pins its flow document only through the engine's write
//! batches, so a run's change can commit with the task it starts
//! (`Engine::create_task_with`, in `create`); the façade reads them back
//! from the store.

use crate::error::EngineError;
use crate::event::Event;
use crate::ids::SessionId;
use crate::ledger::Ledger;
use crate::store::WriteOp;

/// Commits a run's `PutRun`/`PutFlow` ops and events as one batch
/// (`Engine::write_run`).
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

/// Refuses any op but a flow run's or a flow document's: every other
/// record is written by the engine's own paths, under their locks.
pub(crate) fn check_run_ops(ops: &[WriteOp]) -> Result<(), EngineError> {
    if ops
        .iter()
        .all(|op| matches!(op, WriteOp::PutRun(_) | WriteOp::PutFlow(_)))
    {
        Ok(())
    } else {
        Err(EngineError::BadRequest(
            "only PutRun and PutFlow ops ride with a run's write".to_owned(),
        ))
    }
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
