//! The merge agent's spawner: each attempt reads its task's input, runs the
//! merge, and appends the [`MergeRecord`](super::MergeRecord) as a passed
//! Final. A conflict passes too (the record names it); a refused input or a
//! git failure fails the attempt with the reason.

use std::sync::Arc;

use async_trait::async_trait;
use swarmd_engine::ids::WorkerId;
use swarmd_engine::task::Task;
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker, WorkerError};
use swarmd_output_store::OutputEvent;
use tokio_util::sync::CancellationToken;

use super::apply::{MergeTask, Merger};
use super::{MergeError, MergeRequest, MergeSpec};
use crate::HostEnv;

const PRODUCER: &str = "merge";

/// Runs one merge agent's attempts in its repository.
#[derive(Debug, Clone)]
pub struct MergeSpawner {
    spec: Arc<MergeSpec>,
    merger: Merger,
}

impl MergeSpawner {
    /// A spawner for `spec`, running git with the host's `PATH` and `HOME`.
    pub fn new(spec: MergeSpec, host: &HostEnv) -> MergeSpawner {
        MergeSpawner {
            spec: Arc::new(spec),
            merger: Merger::new(host),
        }
    }
}

#[async_trait]
impl SpawnerAdapter for MergeSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let Attempt { host, .. } = attempt;
        let task = host
            .task()
            .await
            .map_err(|e| SpawnError::Failed(format!("cannot read task {}: {e}", host.id().task)))?;
        Ok(Box::new(MergeWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            host,
            task,
            spec: Arc::clone(&self.spec),
            merger: self.merger.clone(),
        }))
    }
}

#[derive(Debug)]
struct MergeWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    task: Task,
    spec: Arc<MergeSpec>,
    merger: Merger,
}

impl MergeWorker {
    async fn run(&self) -> Result<serde_json::Value, MergeError> {
        let request = MergeRequest::parse(
            self.task.input.as_ref(),
            &self.task.prompt,
            self.spec.max_branches,
        )?;
        let task = MergeTask {
            id: self.task.id.to_string(),
            created_ms: self.task.created_ms,
        };
        let record = self.merger.merge(&self.spec, &request, &task).await?;
        serde_json::to_value(record).map_err(|e| MergeError::BadInput(e.to_string()))
    }
}

#[async_trait]
impl Worker for MergeWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        // A cancel drops the merge, which kills the git it is running: a
        // half-made merge leaves objects only, or the new branch whole.
        let value = tokio::select! {
            () = self.cancel.cancelled() => return Err(WorkerError::Cancelled),
            merged = self.run() => merged.map_err(|e| WorkerError::Failed(format!("merge: {e}")))?,
        };
        self.host
            .record_output(PRODUCER, vec![OutputEvent::inline_final(value, true)])
            .await
            .map(|_| ())
            .map_err(|e| WorkerError::Failed(format!("recording the final failed: {e}")))
    }
}
