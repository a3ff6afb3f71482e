//! The base of a stack for an agent that is not configured: reachable only
//! through `operator_delegate`, so it fails when delegation is not possible.

use async_trait::async_trait;
use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};

/// Refuses every spawn: the task's session had no operator channel to
/// delegate to.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnconfiguredAgent;

#[async_trait]
impl SpawnerAdapter for UnconfiguredAgent {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        Err(SpawnError::NoOperator(attempt.ctx.agent))
    }
}
