//! Budgets (docs/tasks.md, Budgets): usage notes a worker writes are folded
//! into its attempt; past `max_tokens` or `max_cost_usd` the attempt is
//! stopped, fails `budget_exceeded` and is not retried, and a task whose
//! earlier attempts spent the budget does not start again.

use std::sync::atomic::Ordering;

use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::{AttemptOutcome, PolicyOverrides, RetryOn, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner};
use swarmd_output_store::OutputEvent;

use super::{WAIT, engine_for, spawned, spec};

fn usage(note: &str) -> Vec<OutputEvent> {
    vec![OutputEvent::Progress {
        stage: "usage".into(),
        note: Some(note.to_owned()),
    }]
}

async fn report(
    engine: &swarmd_engine::Engine,
    spawner: &ScriptedSpawner,
    task: TaskId,
    note: &str,
) {
    let credential = spawner.credential(task).unwrap();
    let auth = engine
        .authenticate_worker(credential.handle(), Verb::EmitOutput)
        .unwrap();
    engine
        .worker_output(&auth, None, usage(note))
        .await
        .unwrap();
}

fn retried_policy() -> PolicyOverrides {
    PolicyOverrides {
        max_attempts: Some(3),
        retry_on: Some(vec![RetryOn::Failed]),
        retry_backoff_ms: Some(0),
        ..PolicyOverrides::default()
    }
}

#[tokio::test(start_paused = true)]
async fn passing_the_token_budget_stops_the_attempt_and_is_not_retried() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_tokens: Some(100),
        ..retried_policy()
    };
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let note = r#"{"cli":"claude","session_id":"s-1","input_tokens":40,"output_tokens":20,
        "models":{"m-1":{"input_tokens":40,"output_tokens":20}}}"#;
    report(&engine, &spawner, t.id, note).await;
    let running = engine.get_task(t.id).await.unwrap().unwrap();
    assert_eq!(running.status(), TaskStatus::Running, "60 of 100 tokens");
    // The next note is a running total: 70 + 31 tokens, one past the budget.
    report(
        &engine,
        &spawner,
        t.id,
        r#"{"input_tokens":70,"output_tokens":31,"turns":2}"#,
    )
    .await;

    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(
        t.reason.as_deref(),
        Some("budget_exceeded: 101 tokens used, policy.max_tokens is 100")
    );
    assert_eq!(t.attempt, 1, "a budget stop is never retried");
    assert_eq!(spawner.spawned().len(), 1);
    assert_eq!(t.usage.tokens(), 101, "the task adds up its attempts");
    let attempts = engine.attempts(t.id).await.unwrap();
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Failed));
    let usage = &attempts[0].usage;
    assert_eq!(usage.session_id.as_deref(), Some("s-1"));
    assert_eq!(usage.turns, Some(2));
    assert_eq!(
        (usage.totals.input_tokens, usage.totals.output_tokens),
        (70, 31)
    );
    let meter = &engine.stats().usage;
    assert_eq!(meter.budget_stops_tokens.load(Ordering::Relaxed), 1);
    let by_model = meter.by_agent_model();
    assert_eq!(by_model.len(), 1);
    assert_eq!(by_model[0].0, ("a".to_owned(), "m-1".to_owned()));
    assert_eq!(
        by_model[0].1.tokens(),
        101,
        "running totals are not counted twice"
    );
}

#[tokio::test(start_paused = true)]
async fn passing_the_cost_budget_fails_the_attempt() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_cost_usd: Some(0.5),
        ..retried_policy()
    };
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    report(&engine, &spawner, t.id, r#"{"cost_usd":0.25}"#).await;
    report(&engine, &spawner, t.id, r#"{"cost_usd":0.75}"#).await;

    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(t.result, None);
    let reason = t.reason.unwrap();
    assert!(
        reason.starts_with("budget_exceeded: $0.7500 spent"),
        "{reason}"
    );
    assert!(reason.contains("policy.max_cost_usd is 0.5"), "{reason}");
    assert_eq!(spawner.spawned().len(), 1);
    let stops = engine
        .stats()
        .usage
        .budget_stops_cost
        .load(Ordering::Relaxed);
    assert_eq!(stops, 1);
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_attempts_spent_the_budget_does_not_start_again() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_tokens: Some(100),
        attempt_timeout_secs: Some(5),
        ..retried_policy()
    };
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    // Exactly the budget: the attempt runs on, and its lease runs out.
    report(&engine, &spawner, t.id, r#"{"input_tokens":100}"#).await;

    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(
        t.reason.as_deref(),
        Some("budget_exceeded: 100 tokens used before this attempt, policy.max_tokens is 100")
    );
    assert_eq!(spawner.spawned().len(), 1, "no second attempt started");
    let attempts = engine.attempts(t.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].reason.as_deref(), Some("lease expired"));
}

/// The open record keeps the attempt's process group when its usage is
/// written again, and a crash after a note past the budget (before the
/// attempt was settled) fails the task at recovery without a retry, an
/// in-process attempt and a delegated one alike (the latter not resumed).
#[tokio::test(start_paused = true)]
async fn recovery_fails_an_attempt_past_its_budget_without_a_retry() {
    use swarmd_engine::task::SpawnerKind;

    recover_past_budget(SpawnerKind::Process, Script::Hang).await;
    recover_past_budget(SpawnerKind::Operator, Script::AwaitPost).await;
}

async fn recover_past_budget(kind: swarmd_engine::task::SpawnerKind, script: Script) {
    use std::sync::Arc;

    use swarmd_engine::EngineConfig;
    use swarmd_engine::store::{MemoryTaskStore, TaskStore, WriteOp, commit};
    use swarmd_engine::task::ProcessGroupMark;
    use swarmd_engine::testing::{StaticResolver, engine_host, engine_with};
    use swarmd_output_store::{MemoryOutputStore, OutputStore};

    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new());
    let outputs: Arc<dyn OutputStore> = Arc::new(MemoryOutputStore::new());
    let clock = Arc::new(swarmd_engine::clock::SystemClock);
    let spawner = ScriptedSpawner::new(move |_| script.clone());
    let engine = || {
        let resolver = StaticResolver::new().with("a", kind, None, spawner.clone());
        engine_with(
            Arc::new(resolver),
            store.clone(),
            outputs.clone(),
            EngineConfig::default(),
            clock.clone(),
        )
    };
    let first = engine();
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_tokens: Some(100),
        ..retried_policy()
    };
    let t = first.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let id = swarmd_engine::ids::AttemptId::new(t.id, 1);
    let group = ProcessGroupMark {
        pgid: i32::MAX,
        leader_start_ticks: 1,
        boot_id: "not-this-boot".into(),
    };
    engine_host(&first, id).record_process_group(group.clone());
    report(&first, &spawner, t.id, r#"{"input_tokens":60}"#).await;
    let open = first.attempts(t.id).await.unwrap().remove(0);
    assert_eq!(
        open.process_group,
        Some(group),
        "the group survives a usage write"
    );
    assert_eq!(open.usage.totals.input_tokens, 60);
    drop(first);
    // The crash came after a note past the budget was stored, before the
    // attempt was settled.
    let mut past = open;
    past.usage.totals.output_tokens = 41;
    commit(store.as_ref(), vec![WriteOp::PutAttempt(past)])
        .await
        .unwrap();

    let second = engine();
    let recovered = second.recover().await.unwrap();
    assert!(recovered.delegated.is_empty(), "{kind:?}: not resumed");
    second.start_recovered();
    let t = second.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed, "{kind:?}");
    assert_eq!(
        t.reason.as_deref(),
        Some("budget_exceeded: 101 tokens used, policy.max_tokens is 100")
    );
    assert_eq!(t.usage.tokens(), 101);
    assert_eq!(second.attempts(t.id).await.unwrap().len(), 1);
    assert_eq!(
        spawner.spawned().len(),
        1,
        "{kind:?}: no retry after recovery"
    );
}
