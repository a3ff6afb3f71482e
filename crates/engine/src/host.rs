//! `AttemptHost`: everything a spawner layer or base spawner may ask of the
//! engine about the one attempt it was handed, and nothing else. The engine
//! implements it (`EngineHost`); layer tests implement it with a recording
//! mock, as tower layers are tested against a mock service.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use swarmd_output_store::{OutputEvent, OutputRecord};

use crate::Engine;
use crate::audit::AuditRecord;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{AttemptId, TaskId};
use crate::outcome::Verdict;
use crate::spawn::WorkerError;
use crate::task::{ProcessGroupMark, Task, TaskSpec};

/// The engine as one attempt's stack sees it. Every method is about the
/// attempt the host was made for, except the three that manage a child task
/// (`spawn_child`, `wait_task`, `cancel_task`), which the senior layer uses
/// to ask its question as a sub-task.
#[async_trait]
pub trait AttemptHost: Send + Sync + fmt::Debug {
    /// The attempt this host serves.
    fn id(&self) -> AttemptId;
    /// Now, in unix ms, on the engine's clock.
    fn now_ms(&self) -> u64;
    /// The attempt's task as it is now.
    async fn task(&self) -> Result<Task, EngineError>;
    /// Appends `events` to the attempt's tail as `producer`, and publishes
    /// them. Refused once the attempt is decided or superseded.
    async fn record_output(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError>;
    /// Appends `events`, none of them a Final, to the attempt's tail even
    /// once it is closed (`epilogue`): what the attempt left behind, such as
    /// its `worktree` artifact. By default, as `record_output`.
    async fn record_epilogue(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.record_output(producer, events).await
    }
    /// The tail's last Final so far: the one that decides the attempt.
    async fn last_final(&self) -> Result<Option<OutputRecord>, EngineError>;
    /// Resolves once a worker posted a Final for the attempt over the worker
    /// API, or at once if it already has or the attempt is no longer current.
    async fn posted_final(&self);
    /// What the attempt's end decides, given how its worker's join ended:
    /// the engine's own rule (`outcome`), so a layer reports the task's
    /// outcome and no other.
    async fn verdict(&self, joined: &Result<(), WorkerError>) -> Verdict;
    /// Writes a durable audit record; its `ts_ms` is set here.
    fn audit(&self, record: AuditRecord);
    /// Publishes an event (durable, then broadcast, also to the task's session).
    fn publish(&self, event: Event);
    /// Records the host process group the attempt's worker runs in, so that
    /// recovery can stop it if the daemon dies first.
    fn record_process_group(&self, group: ProcessGroupMark);
    /// Creates a task whose parent is the attempt's task. Not fenced by the
    /// agent's `allow_subtasks`: that fence is for workers, not layers.
    async fn spawn_child(&self, spec: TaskSpec) -> Result<Task, EngineError>;
    /// Waits until a task is terminal or `timeout` passes; returns it either way.
    async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError>;
    /// Cancels a task.
    async fn cancel_task(&self, id: TaskId, reason: Option<String>) -> Result<Task, EngineError>;
}

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
        self.engine.record_output(self.id, producer, events).await
    }

    async fn record_epilogue(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.engine.record_epilogue(self.id, producer, events).await
    }

    async fn last_final(&self) -> Result<Option<OutputRecord>, EngineError> {
        self.engine.last_final(self.id).await
    }

    async fn posted_final(&self) {
        self.engine.posted_final(self.id).await;
    }

    async fn verdict(&self, joined: &Result<(), WorkerError>) -> Verdict {
        self.engine
            .attempt_end(self.id, joined.clone())
            .await
            .verdict()
    }

    fn audit(&self, mut record: AuditRecord) {
        record.ts_ms = self.now_ms();
        self.engine.audit(record);
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
