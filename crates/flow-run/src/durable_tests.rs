//! A verb's change to a run is durable or not made: an answer whose caller
//! goes away mid-verb still lands and moves the run on, and an answer the
//! store refuses is refused to its caller and leaves the wait open, and a
//! move the store refused is written once it takes writes again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::testing::{GatedStore, engine_over};
use swarmd_engine::{EngineConfig, RunStatus};

use crate::RunError;
use crate::tests::{resolver, runner, start, step};

/// A run waiting on `ok`, then a `build` step; the engine over `store`.
async fn waiting_run(store: &Arc<GatedStore>) -> (crate::Runner, swarmd_engine::RunId) {
    let engine = engine_over(Arc::new(resolver()), store.clone(), EngineConfig::default());
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "seq", "children": [
        {"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}},
        step("build", "b {{ ok }}", "$.b")]}),
    )
    .await;
    assert_eq!(run.status, RunStatus::Waiting, "{run:?}");
    (runner, run.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_caller_goes_away_still_lands() {
    let store = Arc::new(GatedStore::default());
    let (runner, id) = waiting_run(&store).await;
    // The answer stops at the next step's key claim, as on a cluster's
    // database; its caller (an HTTP handler whose client hung up) is
    // dropped there.
    store.hold_claims(true);
    let answering = tokio::spawn({
        let runner = runner.clone();
        async move { runner.answer(id, "ok", json!(1), None).await }
    });
    for _ in 0..2_000 {
        if store.claim_waiting() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(store.claim_waiting(), "the answer never reached the claim");
    answering.abort();
    let _ = answering.await;
    store.hold_claims(false);
    let done = runner.wait_for(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["ok"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_store_refuses_is_refused_and_the_wait_stays_open() {
    let store = Arc::new(GatedStore::default());
    let (runner, id) = waiting_run(&store).await;
    store.fail_writes(true);
    let refused = runner.answer(id, "ok", json!(1), None).await;
    assert!(matches!(refused, Err(RunError::Engine(_))), "{refused:?}");
    store.fail_writes(false);
    // Nothing of the refused answer stayed behind: the wait takes the
    // next one, and the run goes on from it.
    runner.answer(id, "ok", json!(2), None).await.unwrap();
    let done = runner.wait_for(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["ok"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_the_store_refused_is_written_once_it_takes_writes_again() {
    let store = Arc::new(GatedStore::default());
    let engine = engine_over(Arc::new(resolver()), store.clone(), EngineConfig::default());
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "wait", "name": "ok", "timeout_secs": 1,
               "out": {"op": "path", "at": "$.ok"}}),
    )
    .await;
    // The wait times out while the store refuses: the run's failure is
    // not written then, and is once writes go through again.
    store.fail_writes(true);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let stored = engine.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Waiting, "{stored:?}");
    store.fail_writes(false);
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Failed, "{done:?}");
    let stored = engine.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Failed, "{stored:?}");
}
