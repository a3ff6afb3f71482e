//! A result retried while the first post's Final is still being written is
//! answered only once that write settles, and as the write settled: a `200`
//! always means a durable Final, even when the first request went away.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::MemoryTaskStore;
use swarmd_engine::task::{SpawnerKind, TaskSpec};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig, EngineError, ResultAck, ResultPost, body_digest};
use swarmd_output_store::{
    Durable, MemoryOutputStore, OutputEvent, OutputRecord, OutputStore, Prepared, StoreError,
    SystemClock,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// A memory output store whose Finals become durable only when the test
/// says so, and then either are or fail as a fenced node's would.
#[derive(Debug)]
struct GatedFinals {
    inner: MemoryOutputStore,
    /// `None` holds every Final's durability; `Some(ok)` settles them.
    gate: watch::Sender<Option<bool>>,
    /// How many Finals were queued.
    queued: watch::Sender<usize>,
}

impl GatedFinals {
    fn new() -> GatedFinals {
        GatedFinals {
            inner: MemoryOutputStore::new(),
            gate: watch::Sender::new(None),
            queued: watch::Sender::new(0),
        }
    }
}

#[async_trait]
impl OutputStore for GatedFinals {
    async fn append(
        &self,
        task: Uuid,
        attempt: u32,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        self.inner.append(task, attempt, producer, events).await
    }
    async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
        self.inner.prepare(events).await
    }
    fn append_at(
        &self,
        task: Uuid,
        attempt: u32,
        first_seq: u64,
        producer: &str,
        prepared: Prepared,
    ) -> (Vec<OutputRecord>, Durable) {
        let is_final = prepared.events().iter().any(OutputEvent::is_final);
        let (records, durable) = self
            .inner
            .append_at(task, attempt, first_seq, producer, prepared);
        if !is_final {
            return (records, durable);
        }
        self.queued.send_modify(|n| *n += 1);
        let mut gate = self.gate.subscribe();
        let gated: Durable = Box::pin(async move {
            durable.await?;
            let settled = gate.wait_for(Option::is_some).await.map(|g| *g);
            match settled {
                Ok(Some(true)) => Ok(()),
                _ => Err(StoreError::Fenced),
            }
        });
        (records, gated)
    }
    async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
        self.inner.last_seq(task, attempt).await
    }
    async fn tail(
        &self,
        task: Uuid,
        attempt: u32,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<OutputRecord>, StoreError> {
        self.inner.tail(task, attempt, after_seq, limit).await
    }
    async fn last_final(
        &self,
        task: Uuid,
        attempt: u32,
    ) -> Result<Option<OutputRecord>, StoreError> {
        self.inner.last_final(task, attempt).await
    }
    async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
        self.inner.list_attempts(task).await
    }
    async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
        self.inner.prune(before_ms).await
    }
    async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
        self.inner.forget(tasks).await
    }
}

/// An engine with one delegated agent, and a task of it whose attempt is
/// waiting for its result. Its worker never ends by itself, so the attempt
/// stays open after a Final is posted: the window a retry can hit.
async fn waiting_task(outputs: Arc<GatedFinals>) -> (Engine, TaskId, Arc<ScriptedSpawner>) {
    let remote = ScriptedSpawner::new(|_| Script::Hang);
    let resolver =
        StaticResolver::new().with("remote", SpawnerKind::Operator, None, remote.clone());
    let engine = engine_with(
        Arc::new(resolver),
        Arc::new(MemoryTaskStore::default()),
        outputs,
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    let spec = TaskSpec {
        agent: "remote".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    for _ in 0..1000 {
        if remote.credential(task.id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (engine, task.id, remote)
}

/// Posts the same result, with the same key, as a task of its own.
fn post(engine: &Engine, remote: &ScriptedSpawner, task: TaskId) -> JoinHandle<PostAnswer> {
    let engine = engine.clone();
    let credential = remote.credential(task).expect("the attempt was spawned");
    tokio::spawn(async move {
        let auth = engine
            .authenticate_worker(credential.handle(), Verb::PostResult)
            .unwrap();
        let value = json!({"answer": 42});
        let post = ResultPost {
            task_id: Some(task),
            attempt: None,
            value: value.clone(),
            ok: true,
            idempotency_key: Some("r-1".into()),
            body_digest: body_digest(&serde_json::to_vec(&value).unwrap()),
        };
        engine.post_result(&auth, post).await
    })
}

type PostAnswer = Result<ResultAck, EngineError>;

/// A waiting task whose first post's Final is queued and held.
struct InFlight {
    outputs: Arc<GatedFinals>,
    engine: Engine,
    task: TaskId,
    remote: Arc<ScriptedSpawner>,
    first: JoinHandle<PostAnswer>,
}

async fn first_post_in_flight() -> InFlight {
    let outputs = Arc::new(GatedFinals::new());
    let (engine, task, remote) = waiting_task(outputs.clone()).await;
    let first = post(&engine, &remote, task);
    outputs
        .queued
        .subscribe()
        .wait_for(|n| *n == 1)
        .await
        .unwrap();
    InFlight {
        outputs,
        engine,
        task,
        remote,
        first,
    }
}

/// Lets the spawned posts run until they block.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_during_the_first_write_shares_its_failure() {
    let InFlight {
        outputs,
        engine,
        task,
        remote,
        first,
    } = first_post_in_flight().await;
    let retry = post(&engine, &remote, task);
    settle().await;
    assert!(!first.is_finished(), "the first post waits for its write");
    assert!(
        !retry.is_finished(),
        "the retry is not answered while the first post's Final is in flight"
    );

    outputs.gate.send_replace(Some(false));
    let first = first.await.unwrap();
    let retry = retry.await.unwrap();
    assert!(matches!(&first, Err(e) if e.code() == retry.as_ref().unwrap_err().code()));
    assert!(
        matches!(&retry, Err(EngineError::Store(e)) if e.is_fenced()),
        "the retry is told what the first post was: {retry:?}"
    );
    assert_eq!(*outputs.queued.borrow(), 1, "the Final was queued once");
}

#[tokio::test(start_paused = true)]
async fn a_retry_during_the_first_write_replays_its_success() {
    let InFlight {
        outputs,
        engine,
        task,
        remote,
        first,
    } = first_post_in_flight().await;
    let retry = post(&engine, &remote, task);
    settle().await;
    assert!(!retry.is_finished());

    outputs.gate.send_replace(Some(true));
    let first = first.await.unwrap().expect("the first post is stored");
    let retry = retry.await.unwrap().expect("the retry replays it");
    assert_eq!(first, retry);
    assert_eq!(*outputs.queued.borrow(), 1, "the Final was queued once");
}

#[tokio::test(start_paused = true)]
async fn a_retry_outlives_a_first_request_that_went_away() {
    let InFlight {
        outputs,
        engine,
        task,
        remote,
        first,
    } = first_post_in_flight().await;
    // The first client hangs up: its request's future is dropped while its
    // Final is being written.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let retry = post(&engine, &remote, task);
    settle().await;
    assert!(
        !retry.is_finished(),
        "the retry waits for the dropped post's write"
    );

    outputs.gate.send_replace(Some(true));
    let retry = retry
        .await
        .unwrap()
        .expect("the write the retry waited on is stored");
    assert_eq!(retry.task_id, task);
    assert_eq!(*outputs.queued.borrow(), 1, "the Final was queued once");
}
