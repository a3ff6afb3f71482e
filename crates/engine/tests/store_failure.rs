//! A task whose record cannot be written is never acknowledged, never
//! reaches a worker, and leaves nothing behind that blocks a retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::EventRecord;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::{RunId, TaskId};
use swarmd_engine::run::{FlowDoc, RunFilter, RunRecord};
use swarmd_engine::store::{
    Done, LiveSnapshot, MemoryTaskStore, PostedFinal, TaskFilter, TaskStore, WriteOp,
};
use swarmd_engine::task::{AttemptRecord, SpawnerKind, Task, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{EngineConfig, EngineError, ResultPost, body_digest};
use swarmd_output_store::{MemoryOutputStore, StoreError, SystemClock};

/// A memory store whose writes fail while `failing` is set.
#[derive(Debug, Default)]
struct FlakyStore {
    inner: MemoryTaskStore,
    failing: AtomicBool,
}

#[async_trait]
impl TaskStore for FlakyStore {
    fn submit(&self, batch: Vec<WriteOp>, done: Done) {
        if self.failing.load(Ordering::SeqCst) {
            let disk = std::io::Error::other("disk unavailable");
            done(Err(StoreError::Io(disk)));
        } else {
            self.inner.submit(batch, done);
        }
    }
    async fn task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        self.inner.task(id).await
    }
    async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        self.inner.attempts(id).await
    }
    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        self.inner.list_tasks(filter).await
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
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.open_runs().await
    }
    async fn flow_doc(&self, hash: &str) -> Result<Option<FlowDoc>, StoreError> {
        self.inner.flow_doc(hash).await
    }
    async fn prune(&self, before_ms: u64) -> Result<Vec<TaskId>, StoreError> {
        self.inner.prune(before_ms).await
    }
    async fn healthcheck(&self) -> Result<(), StoreError> {
        self.inner.healthcheck().await
    }
}

#[tokio::test(start_paused = true)]
async fn an_unrecorded_task_is_refused_and_its_key_stays_free() {
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver =
        StaticResolver::new().with("remote", SpawnerKind::Operator, None, remote.clone());
    let store = Arc::new(FlakyStore::default());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let spec = TaskSpec {
        agent: "remote".into(),
        prompt: "p".into(),
        idempotency_key: Some("k".into()),
        ..TaskSpec::default()
    };

    store.failing.store(true, Ordering::SeqCst);
    let refused = engine.create_task(spec.clone()).await;
    assert!(matches!(refused, Err(EngineError::Store(_))), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.live_tasks(), 0, "the task left memory");
    assert!(remote.spawned().is_empty(), "no worker was launched");

    // The disk is back: the same key creates a task that runs to the end.
    store.failing.store(false, Ordering::SeqCst);
    let task = engine.create_task(spec).await.unwrap();
    for _ in 0..1000 {
        if remote.credential(task.id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let credential = remote.credential(task.id).expect("the retry was spawned");
    let auth = engine
        .authenticate_worker(credential.handle(), Verb::PostResult)
        .unwrap();
    let value = json!("done");
    let post = ResultPost {
        task_id: Some(task.id),
        attempt: None,
        value: value.clone(),
        ok: true,
        idempotency_key: None,
        body_digest: body_digest(&serde_json::to_vec(&value).unwrap()),
    };
    engine.post_result(&auth, post).await.unwrap();
    let done = engine
        .wait_task(task.id, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(store.task_for_key("k").await.unwrap(), Some(task.id));
}

#[tokio::test(start_paused = true)]
async fn a_credential_that_leaves_the_daemon_is_handed_out_only_once_recorded() {
    // A remote agent's attempt (its credential goes to a pool, which may
    // show it to another node) against a process agent's (its child dies
    // with the daemon), both of kind `process`.
    let pooled = ScriptedSpawner::new(|_| Script::AwaitPost);
    let local = ScriptedSpawner::new(|_| Script::AwaitPost);
    let profile = |credential_leaves| swarmd_engine::AgentProfile {
        kind: SpawnerKind::Process,
        concurrency: None,
        allow_subtasks: false,
        credential_leaves,
    };
    let resolver = StaticResolver::new()
        .with_profile("pooled", profile(true), pooled.clone())
        .with_profile("local", profile(false), local.clone());
    let store = Arc::new(FlakyStore::default());
    let engine = engine_with(
        Arc::new(resolver),
        store.clone(),
        Arc::new(MemoryOutputStore::new()),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let spec = |agent: &str| TaskSpec {
        agent: agent.into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let pooled_task = engine.create_task(spec("pooled")).await.unwrap();
    let local_task = engine.create_task(spec("local")).await.unwrap();
    // The disk fails before either first attempt's record is written.
    store.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        local.credential(local_task.id).is_some(),
        "a local child starts while its record is written"
    );
    assert!(
        pooled.credential(pooled_task.id).is_none(),
        "a pool's credential waits for its record, which failed"
    );
}
