//! Engine behaviour end to end with scripted in-process workers and memory
//! stores: outcomes, retries, leases, cancel, queueing, late writes and
//! recovery (`restart`). Timers run on paused tokio time.

mod budget;
mod restart;
mod waiting;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::event::Event;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::MemoryTaskStore;
use swarmd_engine::task::{
    AttemptOutcome, PolicyOverrides, RetryOn, SpawnerKind, TaskSpec, TaskStatus,
};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with, memory_engine};
use swarmd_engine::{Engine, EngineConfig, EngineError, ErrorCode, ResultPost, body_digest};
use swarmd_output_store::MemoryOutputStore;

const WAIT: Duration = Duration::from_secs(3600);

fn spec(agent: &str) -> TaskSpec {
    TaskSpec {
        agent: agent.into(),
        prompt: "do it".into(),
        ..TaskSpec::default()
    }
}

fn engine_for(spawner: Arc<ScriptedSpawner>, concurrency: Option<usize>) -> Engine {
    let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, concurrency, spawner);
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

fn post(task: TaskId, value: serde_json::Value, key: Option<&str>) -> ResultPost {
    let body = serde_json::to_vec(&value).unwrap();
    ResultPost {
        task_id: Some(task),
        attempt: None,
        value,
        ok: true,
        idempotency_key: key.map(str::to_owned),
        body_digest: body_digest(&body),
    }
}

/// Waits (on paused time) until the spawner has seen `n` spawns of `task`.
async fn spawned(spawner: &ScriptedSpawner, task: TaskId, n: usize) {
    for _ in 0..10_000 {
        if spawner.spawned().iter().filter(|s| s.0 == task).count() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("task {task} was not spawned {n} times");
}

/// The attempt the task's `task_finished` event names.
async fn finished_attempt(engine: &Engine, task: TaskId) -> u32 {
    let events = engine.events_after(0, 10_000).await.unwrap();
    events
        .iter()
        .find_map(|e| match e.event {
            Event::TaskFinished {
                task_id, attempt, ..
            } if task_id == task => Some(attempt),
            _ => None,
        })
        .expect("no task_finished")
}

#[tokio::test(start_paused = true)]
async fn final_ok_passes_and_events_are_gapless() {
    let spawner = ScriptedSpawner::new(|_| Script::Final {
        value: json!("done"),
        ok: true,
    });
    let engine = engine_for(spawner, None);
    let mut events = engine.subscribe();
    let task = engine.create_task(spec("a")).await.unwrap();
    let done = engine.wait_task(task.id, WAIT).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(done.result.unwrap().value, json!("done"));

    let mut kinds = Vec::new();
    let mut last_seq = 0;
    while let Ok(rec) = events.try_recv() {
        assert_eq!(rec.seq, last_seq + 1, "no gaps, no reordering");
        last_seq = rec.seq;
        kinds.push(rec.event.kind());
    }
    assert_eq!(
        kinds,
        [
            "task_created",
            "task_queued",
            "attempt_started",
            "output",
            "attempt_finished",
            "task_finished"
        ]
    );
    let logged = engine.events_after(0, 100).await.unwrap();
    assert_eq!(
        logged.len(),
        kinds.len(),
        "the log and the broadcast carry the same list"
    );
}

#[tokio::test(start_paused = true)]
async fn final_not_ok_blocks_and_missing_final_fails() {
    let spawner = ScriptedSpawner::new(|ctx| match ctx.agent.as_str() {
        _ if ctx.id.task.to_string().is_empty() => unreachable!(),
        _ => Script::NoFinal,
    });
    let engine = engine_for(spawner, None);
    let t = engine.create_task(spec("a")).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert!(t.reason.unwrap().contains("without a final"));

    let spawner = ScriptedSpawner::new(|_| Script::Final {
        value: json!({"why": "no"}),
        ok: false,
    });
    let engine = engine_for(spawner, None);
    let t = engine.create_task(spec("a")).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Blocked);
    assert!(!t.result.unwrap().ok);
}

#[tokio::test(start_paused = true)]
async fn retry_after_failure_then_pass() {
    let spawner = ScriptedSpawner::new(|ctx| {
        if ctx.id.n == 1 {
            Script::Error("boom".into())
        } else {
            Script::Final {
                value: json!(ctx.id.n),
                ok: true,
            }
        }
    });
    let engine = engine_for(spawner, None);
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_attempts: Some(3),
        ..PolicyOverrides::default()
    };
    let t = engine.create_task(s).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
    assert_eq!(t.attempt, 2);
    assert_eq!(finished_attempt(&engine, t.id).await, 2);
    let attempts = engine.attempts(t.id).await.unwrap();
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [Some(AttemptOutcome::Failed), Some(AttemptOutcome::Pass)]
    );
    assert_eq!(attempts[0].reason.as_deref(), Some("boom"));
}

#[tokio::test(start_paused = true)]
async fn blocked_is_retried_only_when_the_policy_says_so() {
    let spawner = ScriptedSpawner::new(|ctx| Script::Final {
        value: json!(ctx.id.n),
        ok: ctx.id.n > 1,
    });
    let engine = engine_for(spawner, None);
    let mut s = spec("a");
    s.policy.max_attempts = Some(2);
    let t = engine.create_task(s.clone()).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!((t.status(), t.attempt), (TaskStatus::Blocked, 1));

    s.policy.retry_on = Some(vec![RetryOn::Blocked]);
    let t = engine.create_task(s).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!((t.status(), t.attempt), (TaskStatus::Pass, 2));
}

#[tokio::test(start_paused = true)]
async fn lease_expiry_fails_the_attempt() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner, None);
    let mut s = spec("a");
    s.policy.attempt_timeout_secs = Some(5);
    let t = engine.create_task(s).await.unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(t.reason.as_deref(), Some("lease expired"));
}

#[tokio::test(start_paused = true)]
async fn worker_activity_extends_the_lease() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy.attempt_timeout_secs = Some(10);
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let handle = spawner.credential(t.id).unwrap().handle().to_owned();
    let auth = engine
        .authenticate_worker(&handle, Verb::Heartbeat)
        .unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(8)).await;
        engine.heartbeat(&auth, None).await.unwrap();
    }
    assert_eq!(
        engine.get_task(t.id).await.unwrap().unwrap().status(),
        TaskStatus::Running
    );
    let auth = engine
        .authenticate_worker(&handle, Verb::PostResult)
        .unwrap();
    engine
        .post_result(&auth, post(t.id, json!("ok"), None))
        .await
        .unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
}

#[tokio::test(start_paused = true)]
async fn cancel_fences_the_attempt_and_late_results_get_410() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), None);
    let t = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let cred = spawner.credential(t.id).unwrap();
    let cancelled = engine.cancel_task(t.id, Some("stop".into())).await.unwrap();
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);
    let auth = engine
        .authenticate_worker(cred.token(), Verb::PostResult)
        .unwrap();
    let err = engine
        .post_result(&auth, post(t.id, json!(1), None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::TaskTerminal);
    // The attempt ends as cancelled once the worker stopped.
    engine.wait_task(t.id, WAIT).await.unwrap();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts = engine.attempts(t.id).await.unwrap();
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Cancelled));
    assert_eq!(engine.load(), (0, 0), "the slot was given back");
    assert_eq!(
        finished_attempt(&engine, t.id).await,
        1,
        "the cancelled attempt"
    );
    // Cancelling again is a no-op.
    assert_eq!(
        engine.cancel_task(t.id, None).await.unwrap().status(),
        TaskStatus::Cancelled
    );
}

#[tokio::test(start_paused = true)]
async fn worker_output_names_and_stages_are_bounded() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let t = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let fresh = engine
        .authenticate_worker(spawner.credential(t.id).unwrap().token(), Verb::EmitOutput)
        .unwrap();
    // An artifact is named in 1 to MAX_ARTIFACT_NAME bytes, whichever
    // route brought it.
    let artifact = |name: String| {
        vec![swarmd_output_store::OutputEvent::Artifact {
            name,
            content: swarmd_output_store::ContentRef::Inline { value: json!("a") },
        }]
    };
    let bound = swarmd_output_store::MAX_ARTIFACT_NAME;
    for name in [String::new(), "n".repeat(bound + 1)] {
        let err = engine
            .worker_output(&fresh, None, artifact(name))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::BadRequest);
    }
    engine
        .worker_output(&fresh, None, artifact("n".repeat(bound)))
        .await
        .unwrap();
    // So is a progress stage, kept inline as names are.
    let long_stage = vec![swarmd_output_store::OutputEvent::Progress {
        stage: "s".repeat(300),
        note: None,
    }];
    let err = engine
        .worker_output(&fresh, None, long_stage)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadRequest);
}

#[tokio::test(start_paused = true)]
async fn stale_token_after_retry_is_superseded() {
    let spawner = ScriptedSpawner::new(|ctx| {
        if ctx.id.n == 1 {
            Script::Hang
        } else {
            Script::AwaitPost
        }
    });
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy.max_attempts = Some(2);
    s.policy.attempt_timeout_secs = Some(5);
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let old = spawner.credential(t.id).unwrap();
    spawned(&spawner, t.id, 2).await;
    let new = spawner.credential(t.id).unwrap();

    let stale = engine
        .authenticate_worker(old.handle(), Verb::PostResult)
        .unwrap();
    let err = engine
        .post_result(&stale, post(t.id, json!(1), None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AttemptSuperseded);
    let out = vec![swarmd_output_store::OutputEvent::Progress {
        stage: "x".into(),
        note: None,
    }];
    let err = engine
        .worker_output(&stale, None, out.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AttemptSuperseded);

    let fresh = engine
        .authenticate_worker(new.token(), Verb::EmitOutput)
        .unwrap();
    engine.worker_output(&fresh, None, out).await.unwrap();
    // A stale credential may still read the prompt, but its time is up.
    let reader = engine
        .authenticate_worker(old.handle(), Verb::FetchPrompt)
        .unwrap();
    assert_eq!(reader.attempt.n, 1);
    let prompt = engine.fetch_prompt(&reader, None).await.unwrap();
    assert!(prompt.lease_deadline_ms <= engine.clock().now_ms());

    // A body naming the current attempt does not lend it to a stale
    // credential, and the error names the credential's attempt.
    let naming = |attempt| ResultPost {
        attempt: Some(attempt),
        ..post(t.id, json!(1), None)
    };
    let err = engine.post_result(&stale, naming(2)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AttemptSuperseded);
    assert_eq!(
        err.to_string(),
        "attempt 1 is no longer current (current: 2)"
    );

    let fresh = engine
        .authenticate_worker(new.token(), Verb::PostResult)
        .unwrap();
    let err = engine.post_result(&fresh, naming(1)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadRequest);
    engine
        .post_result(&fresh, post(t.id, json!(2), None))
        .await
        .unwrap();
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!((t.status(), t.attempt), (TaskStatus::Pass, 2));
}

#[tokio::test(start_paused = true)]
async fn duplicate_results_conflict_unless_idempotent_replay() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let t = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let cred = spawner.credential(t.id).unwrap();
    let auth = engine
        .authenticate_worker(cred.handle(), Verb::PostResult)
        .unwrap();

    let first = engine
        .post_result(&auth, post(t.id, json!("v"), Some("k1")))
        .await
        .unwrap();
    let replay = engine
        .post_result(&auth, post(t.id, json!("v"), Some("k1")))
        .await
        .unwrap();
    assert_eq!(first, replay);
    let err = engine
        .post_result(&auth, post(t.id, json!("other"), Some("k1")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyFinal);
    let err = engine
        .post_result(&auth, post(t.id, json!("v"), None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyFinal);

    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
    // After the task is terminal the replay still answers the same.
    let again = engine
        .post_result(&auth, post(t.id, json!("v"), Some("k1")))
        .await
        .unwrap();
    assert_eq!(again, first);
    let finals = engine
        .outputs()
        .tail(t.id.as_uuid(), 1, 0, 100)
        .await
        .unwrap();
    assert_eq!(finals.len(), 1, "nothing was appended twice");
}

#[tokio::test(start_paused = true)]
async fn per_agent_concurrency_queues_fifo() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), Some(1));
    let a = engine.create_task(spec("a")).await.unwrap();
    let b = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, a.id, 1).await;
    assert_eq!(
        engine.get_task(b.id).await.unwrap().unwrap().status(),
        TaskStatus::Queued
    );
    assert_eq!(engine.load(), (1, 1));
    engine.cancel_task(a.id, None).await.unwrap();
    spawned(&spawner, b.id, 1).await;
    assert_eq!(
        engine.get_task(b.id).await.unwrap().unwrap().status(),
        TaskStatus::Running
    );
}

#[tokio::test(start_paused = true)]
async fn queue_timeout_fails_a_task_that_never_started() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner.clone(), Some(1));
    let _running = engine.create_task(spec("a")).await.unwrap();
    let mut s = spec("a");
    s.policy.queue_timeout_secs = Some(2);
    let waiting = engine.create_task(s).await.unwrap();
    let t = engine.wait_task(waiting.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(t.reason.as_deref(), Some("queue timeout"));
    assert_eq!(t.attempt, 0);
    assert_eq!(finished_attempt(&engine, t.id).await, 0, "no attempt ran");
}

#[tokio::test(start_paused = true)]
async fn spawn_is_idempotent_and_validates() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let engine = engine_for(spawner, None);
    let mut s = spec("a");
    s.idempotency_key = Some("key-1".into());
    let one = engine.create_task(s.clone()).await.unwrap();
    let two = engine.create_task(s.clone()).await.unwrap();
    assert_eq!(one.id, two.id);
    s.prompt = "something else".into();
    let err = engine.create_task(s).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::IdempotencyConflict);

    let err = engine.create_task(spec("nobody")).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    let err = engine.create_task(spec("")).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadRequest);
    let mut deep = spec("a");
    deep.parent = Some(TaskId::new());
    assert_eq!(
        engine.create_task(deep).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[tokio::test(start_paused = true)]
async fn spawn_depth_is_limited() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner);
    let config = EngineConfig {
        max_spawn_depth: 1,
        ..EngineConfig::default()
    };
    let engine = memory_engine(Arc::new(resolver), config);
    let root = engine.create_task(spec("a")).await.unwrap();
    let mut child = spec("a");
    child.parent = Some(root.id);
    let child = engine.create_task(child).await.unwrap();
    assert_eq!(child.depth, 1);
    let mut grandchild = spec("a");
    grandchild.parent = Some(child.id);
    let err = engine.create_task(grandchild).await.unwrap_err();
    assert!(matches!(
        err,
        EngineError::DepthExceeded { depth: 2, limit: 1 }
    ));
}

#[tokio::test(start_paused = true)]
async fn credentials_are_bound_to_their_task_and_verb() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let a = engine.create_task(spec("a")).await.unwrap();
    let b = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, a.id, 1).await;
    let cred = spawner.credential(a.id).unwrap();

    for bearer in [cred.token(), cred.handle()] {
        let auth = engine
            .authenticate_worker(bearer, Verb::FetchPrompt)
            .unwrap();
        let prompt = engine.fetch_prompt(&auth, Some(a.id)).await.unwrap();
        assert_eq!(prompt.prompt, "do it");
        let err = engine.fetch_prompt(&auth, Some(b.id)).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::TaskMismatch);
    }
    // Worker credentials carry only worker verbs.
    let err = engine
        .authenticate_worker(cred.token(), Verb::CancelTask)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Forbidden);
    let err = engine
        .authenticate_worker(cred.handle(), Verb::ReadOutput)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Forbidden);
    // A mutated token or an unknown handle is refused with one uniform code.
    let mut bad = cred.token().to_owned();
    bad.pop();
    assert_eq!(
        engine
            .authenticate_worker(&bad, Verb::FetchPrompt)
            .unwrap_err()
            .code(),
        ErrorCode::Unauthorized
    );
    let unknown = format!("wh-{}", "0".repeat(32));
    assert_eq!(
        engine
            .authenticate_worker(&unknown, Verb::FetchPrompt)
            .unwrap_err()
            .code(),
        ErrorCode::Unauthorized
    );
    let huge = "x".repeat(4096);
    assert_eq!(
        engine
            .authenticate_worker(&huge, Verb::FetchPrompt)
            .unwrap_err()
            .code(),
        ErrorCode::Unauthorized
    );
}

/// An engine on a manual clock whose worker tokens live 300 s, with one
/// attempt started (it lives much longer): the engine, its clock and the
/// attempt's credential.
async fn started_with_short_tokens() -> (
    Engine,
    Arc<swarmd_engine::clock::ManualClock>,
    swarmd_engine::spawn::WorkerCredential,
) {
    let clock = Arc::new(swarmd_engine::clock::ManualClock::new(1_000_000_000));
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner.clone());
    let config = EngineConfig {
        worker_token_ttl_secs: 300,
        ..EngineConfig::default()
    };
    let engine = engine_with(
        Arc::new(resolver),
        Arc::new(MemoryTaskStore::new()),
        Arc::new(MemoryOutputStore::new()),
        config,
        clock.clone(),
    );
    let mut s = spec("a");
    s.policy.attempt_timeout_secs = Some(100_000);
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let cred = spawner.credential(t.id).unwrap();
    (engine, clock, cred)
}

#[tokio::test(start_paused = true)]
async fn heartbeat_remints_near_expiry_and_handles_expire() {
    let (engine, clock, cred) = started_with_short_tokens().await;
    let auth = engine
        .authenticate_worker(cred.handle(), Verb::Heartbeat)
        .unwrap();
    let ack = engine.heartbeat(&auth, None).await.unwrap();
    assert!(ack.token.is_none(), "plenty of lifetime left");

    clock.advance_ms(250_000);
    let auth = engine
        .authenticate_worker(cred.handle(), Verb::Heartbeat)
        .unwrap();
    let ack = engine.heartbeat(&auth, None).await.unwrap();
    let fresh = ack.token.expect("re-minted with less than a third left");
    assert!(ack.handle_expires >= 1_000_000 + 250 + 300);

    clock.advance_ms(200_000);
    // The old token is past exp + leeway; the handle moved with the new token.
    assert_eq!(
        engine
            .authenticate_worker(cred.token(), Verb::Heartbeat)
            .unwrap_err()
            .code(),
        ErrorCode::TokenExpired
    );
    engine
        .authenticate_worker(cred.handle(), Verb::Heartbeat)
        .unwrap();
    engine.authenticate_worker(&fresh, Verb::Heartbeat).unwrap();

    clock.advance_ms(400_000);
    let err = engine
        .authenticate_worker(cred.handle(), Verb::Heartbeat)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::HandleExpired);
}

#[tokio::test(start_paused = true)]
async fn a_token_whose_renewal_was_lost_is_renewed_again() {
    let (engine, clock, cred) = started_with_short_tokens().await;
    clock.advance_ms(250_000);
    let auth = engine
        .authenticate_worker(cred.token(), Verb::Heartbeat)
        .unwrap();
    // The answer with the fresh token is lost on its way (the worker's
    // connection dropped): the worker asks again with its old token.
    let lost = engine.heartbeat(&auth, None).await.unwrap();
    assert!(
        lost.token.is_some(),
        "re-minted with less than a third left"
    );
    let again = engine.heartbeat(&auth, None).await.unwrap();
    let fresh = again
        .token
        .expect("the old token's holder gets a token again");
    clock.advance_ms(200_000);
    engine.authenticate_worker(&fresh, Verb::Heartbeat).unwrap();
}

#[tokio::test(start_paused = true)]
async fn only_agents_that_allow_subtasks_get_spawn_task() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let leaf = swarmd_engine::AgentProfile {
        kind: SpawnerKind::InProcess,
        concurrency: None,
        allow_subtasks: false,
        credential_leaves: false,
    };
    let parent = swarmd_engine::AgentProfile {
        allow_subtasks: true,
        credential_leaves: false,
        ..leaf.clone()
    };
    let resolver = StaticResolver::new()
        .with_profile("parent", parent, spawner.clone())
        .with_profile("leaf", leaf, spawner.clone());
    let engine = memory_engine(Arc::new(resolver), EngineConfig::default());
    let parent = engine.create_task(spec("parent")).await.unwrap();
    let leaf = engine.create_task(spec("leaf")).await.unwrap();
    spawned(&spawner, parent.id, 1).await;
    spawned(&spawner, leaf.id, 1).await;

    let cred = spawner.credential(parent.id).unwrap();
    for bearer in [cred.token(), cred.handle()] {
        let auth = engine.authenticate_worker(bearer, Verb::SpawnTask).unwrap();
        assert_eq!(auth.attempt.task, parent.id);
    }
    let cred = spawner.credential(leaf.id).unwrap();
    for bearer in [cred.token(), cred.handle()] {
        let err = engine
            .authenticate_worker(bearer, Verb::SpawnTask)
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Forbidden);
    }
}

/// A cancel that arrives after a posted Final was accepted, but before the
/// attempt was decided, loses: the result decides the task, and the cancel
/// is told `already_final` rather than quietly discarding the result.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_cancel_after_an_accepted_result_loses_and_is_told() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let t = engine.create_task(spec("a")).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let cred = spawner.credential(t.id).unwrap();
    let auth = engine
        .authenticate_worker(cred.handle(), Verb::PostResult)
        .unwrap();
    engine
        .post_result(&auth, post(t.id, json!("v"), Some("k1")))
        .await
        .unwrap();
    // On this one thread the attempt's task has not run since the post:
    // the Final is accepted and the attempt not decided yet.
    let err = engine.cancel_task(t.id, None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyFinal);
    let t = engine.wait_task(t.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
}

/// A replayed result of an attempt that was superseded (its blocked Final
/// led to a retry) answers its first `200`, not `attempt_superseded`.
#[tokio::test(start_paused = true)]
async fn a_replay_for_a_superseded_attempt_answers_its_first_answer() {
    let spawner = ScriptedSpawner::new(|_| Script::AwaitPost);
    let engine = engine_for(spawner.clone(), None);
    let mut s = spec("a");
    s.policy = PolicyOverrides {
        max_attempts: Some(2),
        retry_on: Some(vec![RetryOn::Blocked]),
        retry_backoff_ms: Some(0),
        ..PolicyOverrides::default()
    };
    let t = engine.create_task(s).await.unwrap();
    spawned(&spawner, t.id, 1).await;
    let cred = spawner.credential(t.id).unwrap();
    let auth = engine
        .authenticate_worker(cred.handle(), Verb::PostResult)
        .unwrap();
    let mut blocked = post(t.id, json!("no"), Some("k1"));
    blocked.ok = false;
    let first = engine.post_result(&auth, blocked.clone()).await.unwrap();
    spawned(&spawner, t.id, 2).await;
    let replay = engine.post_result(&auth, blocked).await.unwrap();
    assert_eq!(replay, first);
    let err = engine
        .post_result(&auth, post(t.id, json!("yes"), Some("k2")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyFinal);
}
