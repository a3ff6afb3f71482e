//! The base of a stack for an agent that is not configured: reachable only
//! through `operator_delegate`, so it fails when delegation is not possible.

use async_trait::async_trait;
use swarmd_engine::ids::TaskId;
use swarmd_engine::{Ctx, Engine, SpawnError, SpawnerAdapter, Worker, WorkerCredential};

/// Refuses every spawn: the task's session had no operator backend to
/// delegate to.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnconfiguredAgent;

#[async_trait]
impl SpawnerAdapter for UnconfiguredAgent {
    async fn spawn(
        &self,
        _engine: &Engine,
        ctx: Ctx,
        _task_id: TaskId,
        _attempt: u32,
        _token: WorkerCredential,
    ) -> Result<Box<dyn Worker>, SpawnError> {
        Err(SpawnError::NoOperator(ctx.agent))
    }
}
