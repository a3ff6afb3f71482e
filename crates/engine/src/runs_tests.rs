//! Flow runs through the engine: a run's record commits in the same batch
//! as the task it starts, a replayed creation still commits it, and only
//! run ops ride along.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use swarmd_output_store::{MemoryOutputStore, StoreError};

use super::*;
use crate::Engine;
use crate::RunWrites;
use crate::audit::AuditRecord;
use crate::clock::SystemClock;
use crate::config::EngineConfig;
use crate::event::EventRecord;
use crate::ids::{RunId, TaskId};
use crate::run::{FlowDoc, RunFilter, RunRecord, RunStatus, RunSummary};
use crate::store::{
    Done, LiveSnapshot, MemoryTaskStore, PostedFinal, TaskFilter, TaskListing, TaskStore,
};
use crate::task::{AttemptRecord, SpawnerKind, Task, TaskSpec, TaskStatus};
use crate::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};

/// A memory store that remembers which kinds of op each batch held.
#[derive(Debug, Default)]
struct Recording {
    inner: MemoryTaskStore,
    batches: Mutex<Vec<Vec<&'static str>>>,
}

impl Recording {
    fn batches(&self) -> Vec<Vec<&'static str>> {
        self.batches.lock().unwrap().clone()
    }
}

fn kind(op: &WriteOp) -> &'static str {
    match op {
        WriteOp::PutTask(_) => "task",
        WriteOp::IdempotencyKey { .. } => "key",
        WriteOp::Events(_) => "events",
        WriteOp::PutRun(_) => "run",
        WriteOp::PutFlow(_) => "flow",
        _ => "other",
    }
}

#[async_trait]
impl TaskStore for Recording {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        self.batches
            .lock()
            .unwrap()
            .push(batch.iter().map(kind).collect());
        self.inner.submit(batch, done);
    }
    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        self.inner.task(id).await
    }
    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        self.inner.attempts(id).await
    }
    async fn list_page(
        &self,
        filter: &TaskFilter,
        max_bytes: usize,
    ) -> Result<TaskListing, StoreError> {
        self.inner.list_page(filter, max_bytes).await
    }
    async fn count_by_agent(
        &self,
        status: TaskStatus,
        window: usize,
    ) -> Result<BTreeMap<String, usize>, StoreError> {
        self.inner.count_by_agent(status, window).await
    }
    async fn task_for_key(&self, key: &str) -> Result<Option<TaskId>, StoreError> {
        self.inner.task_for_key(key).await
    }
    async fn posted_final(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<PostedFinal>, StoreError> {
        self.inner.posted_final(task, attempt).await
    }
    async fn events_after(&self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events_after(after, limit).await
    }
    async fn audit(
        &self,
        task: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.audit(task, limit).await
    }
    async fn load_live(&self, now_secs: u64) -> Result<LiveSnapshot, StoreError> {
        self.inner.load_live(now_secs).await
    }
    async fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        self.inner.run(id).await
    }
    async fn run_for_key(&self, key: &str) -> Result<Option<RunId>, StoreError> {
        self.inner.run_for_key(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.open_runs().await
    }
    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        self.inner.flow_doc(hash).await
    }
    async fn prune(&self, cutoff: u64) -> Result<Vec<TaskId>, StoreError> {
        self.inner.prune(cutoff).await
    }
    async fn healthcheck(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn setup() -> (Engine, Arc<Recording>) {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let resolver = StaticResolver::new().with("coder", SpawnerKind::InProcess, None, spawner);
    let store = Arc::new(Recording::default());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    (engine, store)
}

fn run(version: u64) -> RunRecord {
    RunRecord {
        id: RunId::new(),
        flow: "review".to_owned(),
        flow_hash: "sha256:ab".to_owned(),
        status: RunStatus::Running,
        session: None,
        owner: Some("alice".to_owned()),
        idempotency_key: Some("run-key".to_owned()),
        input: json!({"pr": 7}),
        created_ms: 1,
        updated_ms: 1,
        version,
        state: json!({"nodes": {"lint": "started"}}),
        result: None,
        error: None,
    }
}

fn changed(run: &RunRecord) -> (Option<SessionId>, Event) {
    (
        run.session,
        Event::RunChanged {
            run_id: run.id,
            flow: run.flow.clone(),
            status: run.status,
            node: Some("lint".to_owned()),
            node_status: Some("started".to_owned()),
        },
    )
}

fn spec() -> TaskSpec {
    TaskSpec {
        agent: "coder".into(),
        prompt: "lint it".into(),
        idempotency_key: Some("R-node-lint".into()),
        ..TaskSpec::default()
    }
}

async fn run_changed_events(engine: &Engine) -> usize {
    let events = engine.events_after(0, 1000).await.unwrap();
    events
        .iter()
        .filter(|e| matches!(e.event, Event::RunChanged { .. }))
        .count()
}

#[tokio::test]
async fn create_task_with_commits_the_run_in_the_tasks_batch() {
    let (engine, store) = setup();
    let flow = FlowDoc {
        hash: "sha256:ab".to_owned(),
        name: "review".to_owned(),
        doc: json!({"nodes": []}),
    };
    let mut first = run(1);
    let (started, doc) = (first.clone(), flow.clone());
    let task = engine
        .create_task_with(spec(), move |task: &Task| {
            // The record names the task it starts.
            let mut first = started;
            first.state = json!({"nodes": {"lint": task.id}});
            let event = changed(&first);
            let ops = vec![
                WriteOp::PutRun(Box::new(first)),
                WriteOp::PutFlow(Box::new(doc)),
            ];
            (ops, vec![event])
        })
        .await
        .unwrap();
    first.state = json!({"nodes": {"lint": task.id}});

    let batch = store
        .batches()
        .into_iter()
        .find(|b| b.contains(&"task"))
        .unwrap();
    assert!(
        batch.contains(&"run") && batch.contains(&"flow") && batch.contains(&"events"),
        "{batch:?}"
    );
    assert_eq!(engine.get_task(task.id).await.unwrap().unwrap().id, task.id);
    assert_eq!(engine.get_run(first.id).await.unwrap(), Some(first.clone()));
    assert_eq!(engine.run_for_key("run-key").await.unwrap(), Some(first.id));
    assert_eq!(engine.flow_doc(&flow.hash).await.unwrap(), Some(flow));
    assert_eq!(engine.open_runs().await.unwrap(), vec![first.clone()]);
    assert_eq!(run_changed_events(&engine).await, 1);

    // A replay returns the same task, given to `extra`, and still commits
    // its ops and events, in a batch of their own.
    let mut second = first.clone();
    second.version = 2;
    let replayed = second.clone();
    let seen = Arc::new(Mutex::new(None));
    let given = Arc::clone(&seen);
    let before = store.batches().len();
    let again = engine
        .create_task_with(spec(), move |task: &Task| {
            *given.lock().unwrap() = Some(task.id);
            let event = changed(&replayed);
            (vec![WriteOp::PutRun(Box::new(replayed))], vec![event])
        })
        .await
        .unwrap();
    assert_eq!(again.id, task.id);
    assert_eq!(*seen.lock().unwrap(), Some(task.id));
    let batches = store.batches();
    assert_eq!(batches.len(), before + 1, "{batches:?}");
    assert_eq!(batches[before], vec!["run", "events"]);
    assert_eq!(engine.get_run(first.id).await.unwrap(), Some(second));
    assert_eq!(run_changed_events(&engine).await, 2);
}

#[tokio::test]
async fn write_run_is_accepted_while_draining_and_takes_only_run_ops() {
    let (engine, _store) = setup();
    engine.start_draining();
    let mut cancelled = run(3);
    cancelled.status = RunStatus::Cancelled;
    engine
        .write_run(
            vec![WriteOp::PutRun(Box::new(cancelled.clone()))],
            vec![changed(&cancelled)],
        )
        .await
        .unwrap();
    assert_eq!(engine.get_run(cancelled.id).await.unwrap(), Some(cancelled));
    assert!(engine.open_runs().await.unwrap().is_empty());
    let filter = RunFilter {
        status: Some(RunStatus::Cancelled),
        limit: 10,
        ..RunFilter::default()
    };
    assert_eq!(engine.list_runs(&filter).await.unwrap().len(), 1);
    // A draining engine still creates no task.
    let draining = engine
        .create_task_with(spec(), |_: &Task| RunWrites::default())
        .await;
    assert!(
        matches!(draining, Err(EngineError::Draining)),
        "{draining:?}"
    );
}

#[tokio::test]
async fn only_run_ops_ride_along_and_a_refusal_leaves_nothing() {
    let (engine, store) = setup();
    let task = Task::new(TaskId::new(), TaskSpec::default(), Default::default(), 0, 1);
    let stray = || vec![WriteOp::PutTask(Box::new(task.clone()))];
    let refused = engine.write_run(stray(), Vec::new()).await.unwrap_err();
    assert!(matches!(refused, EngineError::BadRequest(_)), "{refused:?}");
    let refused = engine
        .create_task_with(spec(), |_: &Task| (stray(), Vec::new()))
        .await
        .unwrap_err();
    assert!(matches!(refused, EngineError::BadRequest(_)), "{refused:?}");
    assert!(store.batches().is_empty(), "{:?}", store.batches());
    assert_eq!(engine.live_tasks(), 0);

    // The refused creation's key stays free.
    let created = engine
        .create_task_with(spec(), |_: &Task| RunWrites::default())
        .await
        .unwrap();
    assert_eq!(
        engine.get_task(created.id).await.unwrap().unwrap().id,
        created.id
    );
    // A replay whose writes are refused writes nothing either.
    let before = store.batches().len();
    let refused = engine
        .create_task_with(spec(), |_: &Task| (stray(), Vec::new()))
        .await
        .unwrap_err();
    assert!(matches!(refused, EngineError::BadRequest(_)), "{refused:?}");
    assert_eq!(store.batches().len(), before);
    assert_eq!(engine.get_task(task.id).await.unwrap(), None);
}
