//! A result retried while the first post's Final is still being written is
//! answered only once that write settles, and as the write settled: a `200`
//! always means a durable Final, even when the first request went away.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::MemoryTaskStore;
use swarmd_engine::task::{SpawnerKind, TaskSpec};
use swarmd_engine::testing::{GatedOutputs, Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig, EngineError, ResultAck, ResultPost, body_digest};
use swarmd_output_store::SystemClock;
use tokio::task::JoinHandle;

/// An engine with one delegated agent, and a task of it whose attempt is
/// waiting for its result. Its worker never ends by itself, so the attempt
/// stays open after a Final is posted: the window a retry can hit.
async fn waiting_task(outputs: Arc<GatedOutputs>) -> (Engine, TaskId, Arc<ScriptedSpawner>) {
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
    outputs: Arc<GatedOutputs>,
    engine: Engine,
    task: TaskId,
    remote: Arc<ScriptedSpawner>,
    first: JoinHandle<PostAnswer>,
}

async fn first_post_in_flight() -> InFlight {
    let outputs = Arc::new(GatedOutputs::default());
    outputs.settle_finals(None);
    let (engine, task, remote) = waiting_task(outputs.clone()).await;
    let first = post(&engine, &remote, task);
    outputs.finals_queued().wait_for(|n| *n == 1).await.unwrap();
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

    outputs.settle_finals(Some(false));
    let first = first.await.unwrap();
    let retry = retry.await.unwrap();
    assert!(matches!(&first, Err(e) if e.code() == retry.as_ref().unwrap_err().code()));
    assert!(
        matches!(&retry, Err(EngineError::Store(e)) if e.is_fenced()),
        "the retry is told what the first post was: {retry:?}"
    );
    assert_eq!(
        *outputs.finals_queued().borrow(),
        1,
        "the Final was queued once"
    );
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

    outputs.settle_finals(Some(true));
    let first = first.await.unwrap().expect("the first post is stored");
    let retry = retry.await.unwrap().expect("the retry replays it");
    assert_eq!(first, retry);
    assert_eq!(
        *outputs.finals_queued().borrow(),
        1,
        "the Final was queued once"
    );
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

    outputs.settle_finals(Some(true));
    let retry = retry
        .await
        .unwrap()
        .expect("the write the retry waited on is stored");
    assert_eq!(retry.task_id, task);
    assert_eq!(
        *outputs.finals_queued().borrow(),
        1,
        "the Final was queued once"
    );
}
