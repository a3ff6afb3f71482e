//! `EngineHost`: the engine's `AttemptHost` (declared with the spawn
//! vocabulary in `spawn`), everything a spawner layer or base spawner may
//! ask of the engine about the one attempt it was handed. Layer tests
//! implement the trait with a recording mock, as tower layers are tested
//! against a mock service.

use std::time::Duration;

use async_trait::async_trait;
use swarmd_output_store::{OutputEvent, OutputRecord};

use crate::Engine;
use crate::audit::AuditRecord;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{AttemptId, TaskId};
use crate::outcome::Verdict;
use crate::spawn::{AttemptHost, WorkerError};
use crate::store::WriteOp;
use crate::task::{ProcessGroupMark, Task, TaskSpec};

/// The engine's `AttemptHost` for one attempt.
#[derive(Debug)]
pub(crate) struct EngineHost {
    pub engine: Engine,
    pub id: AttemptId,
}

#[async_trait]
impl AttemptHost for EngineHost {
    fn id(&self) -> AttemptId {
        self.id
    }

    fn now_ms(&self) -> u64 {
        self.engine.inner.clock.now_ms()
    }

    async fn task(&self) -> Result<Task, EngineError> {
        let id = self.id.task;
        self.engine
            .get_task(id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("task {id}")))
    }

    async fn record_output(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.engine
            .appends()
            .record_output(self.id, producer, events)
            .await
    }

    async fn record_epilogue(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.engine.record_epilogue(self.id, producer, events).await
    }

    async fn last_final(&self) -> Result<Option<OutputRecord>, EngineError> {
        self.engine.appends().last_final(self.id).await
    }

    async fn posted_final(&self) {
        self.engine.posted_final(self.id).await;
    }

    async fn verdict(&self, joined: &Result<(), WorkerError>) -> Verdict {
        self.engine
            .appends()
            .attempt_end(self.id, joined.clone())
            .await
            .verdict()
    }

    fn audit(&self, mut record: AuditRecord) {
        record.ts_ms = self.now_ms();
        // Durable but waited on by no one: the attempt goes on.
        let audit = vec![WriteOp::Audit(record)];
        self.engine.inner.ledger.bus.submit(audit, Vec::new(), None);
    }

    fn publish(&self, event: Event) {
        self.engine.publish(event);
    }

    fn record_process_group(&self, group: ProcessGroupMark) {
        self.engine.record_process_group(self.id, group);
    }

    async fn spawn_child(&self, mut spec: TaskSpec) -> Result<Task, EngineError> {
        spec.parent = Some(self.id.task);
        self.engine.create_task(spec).await
    }

    async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError> {
        self.engine.wait_task(id, timeout).await
    }

    async fn cancel_task(&self, id: TaskId, reason: Option<String>) -> Result<Task, EngineError> {
        self.engine.cancel_task(id, reason).await
    }
}
