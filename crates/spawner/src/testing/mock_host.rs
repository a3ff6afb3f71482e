//! `MockHost`: an `AttemptHost` with no engine behind it. It records what a
//! layer asks of it (outputs, audit records, events) and answers reads from
//! what it was given, so a layer can be tested alone, as a tower layer is
//! against a mock service.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::Event;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_engine::outcome::{AttemptEnd, Verdict};
use swarmd_engine::task::{ProcessGroupMark, Task, TaskSpec};
use swarmd_engine::{AttemptHost, EngineError, WorkerError};
use swarmd_output_store::{OutputEvent, OutputRecord};

/// What a layer did through the host, in order.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    pub outputs: Vec<(String, OutputEvent)>,
    pub audit: Vec<AuditRecord>,
    pub events: Vec<Event>,
}

/// A host for one attempt of `task`. Outputs a layer records become the
/// tail the host reads its last Final and verdict from.
#[derive(Debug)]
pub(crate) struct MockHost {
    task: Task,
    id: AttemptId,
    now_ms: u64,
    recorded: Mutex<Recorded>,
}

impl MockHost {
    pub(crate) fn new(task: Task, n: u32) -> MockHost {
        MockHost {
            id: AttemptId::new(task.id, n),
            task,
            now_ms: 1_000,
            recorded: Mutex::new(Recorded::default()),
        }
    }

    /// What was recorded so far.
    pub(crate) fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap()
    }

    fn record(&self, seq: u64, producer: &str, event: OutputEvent) -> OutputRecord {
        OutputRecord {
            task: self.id.task.as_uuid(),
            attempt: self.id.n,
            seq,
            ts_ms: self.now_ms,
            producer: producer.to_owned(),
            event,
        }
    }
}

#[async_trait]
impl AttemptHost for MockHost {
    fn id(&self) -> AttemptId {
        self.id
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    async fn task(&self) -> Result<Task, EngineError> {
        Ok(self.task.clone())
    }

    async fn record_output(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let mut recorded = self.recorded();
        let mut records = Vec::with_capacity(events.len());
        for event in events {
            let seq = recorded.outputs.len() as u64 + 1;
            records.push(self.record(seq, producer, event.clone()));
            recorded.outputs.push((producer.to_owned(), event));
        }
        Ok(records)
    }

    async fn last_final(&self) -> Result<Option<OutputRecord>, EngineError> {
        let recorded = self.recorded();
        let last = recorded
            .outputs
            .iter()
            .enumerate()
            .rev()
            .find(|(_, (_, event))| event.is_final());
        Ok(last.map(|(i, (producer, event))| self.record(i as u64 + 1, producer, event.clone())))
    }

    async fn posted_final(&self) {
        std::future::pending::<()>().await;
    }

    async fn verdict(&self, joined: &Result<(), WorkerError>) -> Verdict {
        let end = match joined {
            Ok(()) => AttemptEnd::Finished(self.last_final().await),
            Err(error) => AttemptEnd::WorkerFailed(error.clone()),
        };
        end.verdict()
    }

    fn audit(&self, mut record: AuditRecord) {
        record.ts_ms = self.now_ms;
        self.recorded().audit.push(record);
    }

    fn publish(&self, event: Event) {
        self.recorded().events.push(event);
    }

    fn record_process_group(&self, _group: ProcessGroupMark) {}

    async fn spawn_child(&self, _spec: TaskSpec) -> Result<Task, EngineError> {
        Err(EngineError::Draining)
    }

    async fn wait_task(&self, id: TaskId, _timeout: Duration) -> Result<Task, EngineError> {
        Err(EngineError::NotFound(format!("task {id}")))
    }

    async fn cancel_task(&self, id: TaskId, _reason: Option<String>) -> Result<Task, EngineError> {
        Err(EngineError::NotFound(format!("task {id}")))
    }
}
