//! Continuation rules at creation, and what is read from the previous
//! task's last attempt; what the attempt after one a restart interrupted
//! resumes, and how that counts against `max_attempts`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_output_store::{ContentRef, OutputEvent};

use super::*;
use crate::Engine;
use crate::ErrorCode;
use crate::config::EngineConfig;
use crate::ids::SessionId;
use crate::store::{MemoryTaskStore, TaskStore};
use crate::task::{SpawnerKind, TaskStatus};
use crate::testing::{Script, ScriptedSpawner, StaticResolver, engine_with, memory_engine};

const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

fn engine() -> Engine {
    let spawner = ScriptedSpawner::new(|ctx| {
        if ctx.agent == "slow" {
            Script::Hang
        } else {
            Script::Final {
                value: json!("done"),
                ok: true,
            }
        }
    });
    let resolver = StaticResolver::new()
        .with("coder", SpawnerKind::InProcess, None, spawner.clone())
        .with("other", SpawnerKind::InProcess, None, spawner.clone())
        .with("slow", SpawnerKind::InProcess, None, spawner);
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

fn spec(agent: &str, continue_from: Option<TaskId>) -> TaskSpec {
    TaskSpec {
        agent: agent.into(),
        prompt: "p".into(),
        continue_from,
        ..TaskSpec::default()
    }
}

async fn finished(engine: &Engine, agent: &str) -> Task {
    let task = engine.create_task(spec(agent, None)).await.unwrap();
    let task = engine
        .wait_task(task.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(task.status().is_terminal(), "{task:?}");
    task
}

/// Appends to the task's last attempt as a worker and the worktree module would.
async fn emit(engine: &Engine, task: &Task, producer: &str, events: Vec<OutputEvent>) {
    engine
        .outputs()
        .append(task.id.as_uuid(), task.attempt, producer, events)
        .await
        .unwrap();
}

fn note(stage: &str, note: &str) -> OutputEvent {
    OutputEvent::Progress {
        stage: stage.into(),
        note: Some(note.into()),
    }
}

fn worktree(head: &str) -> OutputEvent {
    OutputEvent::Artifact {
        name: WORKTREE_ARTIFACT.into(),
        content: ContentRef::Inline {
            value: json!({"branch": "swarmd/x-1", "head": head}),
        },
    }
}

#[tokio::test]
async fn a_continuation_takes_the_agent_session_and_branch_of_the_last_attempt() {
    let engine = engine();
    let first = finished(&engine, "coder").await;
    emit(
        &engine,
        &first,
        "process",
        vec![
            note("init", "session old-session, model m"),
            note("usage", r#"{"cli":"claude","session_id":"S-1234"}"#),
        ],
    )
    .await;
    // A worker's own "worktree" artifact names no branch: only the module's does.
    emit(&engine, &first, "worker", vec![worktree(&"f".repeat(40))]).await;
    emit(&engine, &first, WORKTREE_PRODUCER, vec![worktree(HEAD)]).await;

    let next = engine.create_task(spec("", Some(first.id))).await.unwrap();
    assert_eq!(
        next.agent, "coder",
        "the agent defaults to the previous task's"
    );
    assert_eq!(next.continued_from, Some(first.id));
    assert_eq!(next.parent, None, "a continuation is no sub-task");
    let resume = next.resume.clone().unwrap();
    assert_eq!(resume.attempt, 1);
    assert_eq!(resume.session_id.as_deref(), Some("S-1234"));
    assert_eq!(
        resume.branch.as_deref(),
        Some("swarmd/x-1"),
        "the branch the module's artifact names"
    );
    assert_eq!(resume.head.as_deref(), Some(HEAD));
    let stored = engine.get_task(next.id).await.unwrap().unwrap();
    assert_eq!(stored.continued_from, Some(first.id));
    assert_eq!(stored.resume, Some(resume));
}

#[tokio::test]
async fn the_init_note_names_the_session_when_no_usage_note_does() {
    let engine = engine();
    let first = finished(&engine, "coder").await;
    emit(
        &engine,
        &first,
        "process",
        vec![note("init", "thread th-9")],
    )
    .await;
    let next = engine
        .create_task(spec("coder", Some(first.id)))
        .await
        .unwrap();
    let resume = next.resume.unwrap();
    assert_eq!(resume.session_id.as_deref(), Some("th-9"));
    assert_eq!(resume.branch, None, "no worktree artifact, no branch");
}

#[tokio::test]
async fn a_session_id_that_could_pass_for_an_option_is_not_passed_on() {
    let engine = engine();
    let first = finished(&engine, "coder").await;
    emit(
        &engine,
        &first,
        "process",
        vec![
            note("init", "session --dangerously-skip-permissions, model m"),
            note("usage", r#"{"session_id":"a b"}"#),
        ],
    )
    .await;
    let next = engine
        .create_task(spec("coder", Some(first.id)))
        .await
        .unwrap();
    assert_eq!(next.resume.unwrap().session_id, None);
    assert!(valid_session_id("0199a213-81c0-7800-8aa1-bbab2a035a53"));
    assert!(!valid_session_id(&"a".repeat(MAX_SESSION_ID + 1)));
    assert!(!valid_session_id(""));
}

#[tokio::test]
async fn bad_continuations_are_refused_with_their_codes() {
    let engine = engine();
    let unknown = engine
        .create_task(spec("coder", Some(TaskId::new())))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::NotFound, "{unknown}");

    let running = engine.create_task(spec("slow", None)).await.unwrap();
    let early = engine
        .create_task(spec("slow", Some(running.id)))
        .await
        .unwrap_err();
    assert_eq!(early.code(), ErrorCode::TaskNotFinished, "{early}");
    assert_eq!(ErrorCode::TaskNotFinished.http_status(), 409);

    let first = finished(&engine, "coder").await;
    let other = engine
        .create_task(spec("other", Some(first.id)))
        .await
        .unwrap_err();
    assert_eq!(other.code(), ErrorCode::BadRequest);
    assert!(other.to_string().contains("agent `coder`"), "{other}");

    let nameless = engine.create_task(spec("", None)).await.unwrap_err();
    assert_eq!(nameless.code(), ErrorCode::BadRequest);
    assert!(nameless.to_string().contains("continue_from"), "{nameless}");

    // A worker may continue only its own sub-tasks.
    let mut by_worker = spec("coder", Some(first.id));
    let refused = engine
        .continuations()
        .continuing(first.id, &mut by_worker, Some(running.id))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::Forbidden);
    engine.cancel_task(running.id, None).await.unwrap();
    assert_eq!(
        engine.get_task(running.id).await.unwrap().unwrap().status(),
        TaskStatus::Cancelled
    );
}

#[tokio::test]
async fn a_retried_continuation_with_its_key_is_the_same_task() {
    let engine = engine();
    let first = finished(&engine, "coder").await;
    let keyed = |from| TaskSpec {
        idempotency_key: Some("k".into()),
        ..spec("coder", from)
    };
    let a = engine.create_task(keyed(Some(first.id))).await.unwrap();
    let b = engine.create_task(keyed(Some(first.id))).await.unwrap();
    assert_eq!(a.id, b.id);
    let conflict = engine.create_task(keyed(None)).await.unwrap_err();
    assert_eq!(conflict.code(), ErrorCode::IdempotencyConflict);
}

#[tokio::test]
async fn a_session_continues_only_its_own_tasks_and_the_admin_any() {
    let engine = engine();
    let (owner, other) = (SessionId::new(), SessionId::new());
    let owned = |session, from| TaskSpec {
        session,
        ..spec("coder", from)
    };
    let first = engine.create_task(owned(Some(owner), None)).await.unwrap();
    let first = engine
        .wait_task(first.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(first.status().is_terminal(), "{first:?}");

    // Another session's task is an unknown task, word for word.
    let foreign = engine
        .create_task(owned(Some(other), Some(first.id)))
        .await
        .unwrap_err();
    let absent = TaskId::new();
    let unknown = engine
        .create_task(owned(Some(other), Some(absent)))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), ErrorCode::NotFound, "{foreign}");
    assert_eq!(
        foreign.to_string().replace(&first.id.to_string(), "ID"),
        unknown.to_string().replace(&absent.to_string(), "ID")
    );
    // The owner continues it, and so does a task no session owns.
    for session in [Some(owner), None] {
        let next = engine
            .create_task(owned(session, Some(first.id)))
            .await
            .unwrap();
        assert_eq!(next.continued_from, Some(first.id));
    }
    // A task no session owns is no session's to continue.
    let admins = finished(&engine, "coder").await;
    let refused = engine
        .create_task(owned(Some(owner), Some(admins.id)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::NotFound, "{refused}");
}

/// An engine on `store` and `outputs` whose `coder` hangs in attempt 1
/// and in later ones passes (`ok`) or fails, as the daemon's process
/// after a restart.
fn restarted_engine(
    store: &Arc<dyn TaskStore>,
    outputs: &Arc<dyn swarmd_output_store::OutputStore>,
    ok: bool,
) -> (Engine, Arc<ScriptedSpawner>) {
    let spawner = ScriptedSpawner::new(move |ctx| {
        if ctx.id.n == 1 {
            Script::Hang
        } else if ok {
            Script::Final {
                value: json!("resumed"),
                ok,
            }
        } else {
            Script::Error("broke".into())
        }
    });
    let resolver = StaticResolver::new().with("coder", SpawnerKind::Process, None, spawner.clone());
    let engine = engine_with(
        Arc::new(resolver),
        Arc::clone(store),
        Arc::clone(outputs),
        EngineConfig::default(),
        Arc::new(crate::clock::SystemClock),
    );
    (engine, spawner)
}

/// Starts a task on a first engine that hangs in attempt 1, records what
/// the attempt left (`events` as the worker and the worktree module
/// would), drops that engine as a crash does, and recovers a second one.
async fn interrupted_then_restarted(
    policy_attempts: u32,
    events: Vec<(&str, OutputEvent)>,
    ok: bool,
) -> (Engine, Arc<ScriptedSpawner>, TaskId, crate::RecoveryReport) {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new());
    let outputs: Arc<dyn swarmd_output_store::OutputStore> =
        Arc::new(swarmd_output_store::MemoryOutputStore::new());
    let (first, spawner) = restarted_engine(&store, &outputs, ok);
    let mut task = spec("coder", None);
    task.policy.max_attempts = Some(policy_attempts);
    task.policy.retry_backoff_ms = Some(0);
    let task = first.create_task(task).await.unwrap();
    for _ in 0..5_000 {
        if !spawner.spawned().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(spawner.spawned().len(), 1, "attempt 1 started");
    for (producer, event) in events {
        outputs
            .append(task.id.as_uuid(), 1, producer, vec![event])
            .await
            .unwrap();
    }
    drop(first);
    let (second, spawner) = restarted_engine(&store, &outputs, ok);
    let mut report = second.recover().await.unwrap();
    second.resume_interrupted(&mut report).await.unwrap();
    second.start_recovered();
    (second, spawner, task.id, report)
}

#[tokio::test]
async fn an_interrupted_attempt_with_a_session_and_a_branch_is_resumed_uncounted() {
    let (engine, spawner, id, report) = interrupted_then_restarted(
        1,
        vec![
            ("process", note("init", "session S-1, model m")),
            (WORKTREE_PRODUCER, worktree(HEAD)),
        ],
        true,
    )
    .await;
    assert_eq!((report.interrupted, report.continued), (1, 1), "{report:?}");
    let done = engine.wait_task(id, Duration::from_secs(5)).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Pass, "{done:?}");
    assert_eq!(done.attempt, 2);
    assert_eq!(done.restarts, 1);
    let restart = done.restart.clone().unwrap();
    assert_eq!(
        restart,
        Restart {
            attempt: 1,
            worktree: 1,
            session_id: "S-1".into(),
            branch: "swarmd/x-1".into(),
            head: Some(HEAD.into()),
        }
    );
    assert_eq!(done.restart_for(2), Some(&restart));
    assert_eq!(done.restart_for(3), None, "only the attempt right after");
    assert_eq!(done.resume_session(2).as_deref(), Some("S-1"));
    assert_eq!(done.resume_session(3), None);
    assert_eq!(
        spawner.spawned().len(),
        1,
        "attempt 2 ran on the second engine"
    );
    let attempts = engine.attempts(id).await.unwrap();
    assert_eq!(
        attempts[0].outcome,
        Some(crate::task::AttemptOutcome::Failed)
    );
    assert_eq!(
        attempts[0].reason.as_deref(),
        Some(crate::recovery::RESUMED_REASON)
    );
}

#[tokio::test]
async fn a_failing_resumed_attempt_retries_within_the_user_budget() {
    // max_attempts 2: the resumed attempt is not counted, so after it
    // fails one retry is left, which starts over.
    let (engine, _, id, _) = interrupted_then_restarted(
        2,
        vec![
            ("process", note("usage", r#"{"session_id":"S-2"}"#)),
            (WORKTREE_PRODUCER, worktree(HEAD)),
        ],
        false,
    )
    .await;
    let done = engine.wait_task(id, Duration::from_secs(15)).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Failed, "{done:?}");
    assert_eq!(done.attempt, 3, "{done:?}");
    assert_eq!(done.counted_attempts(done.attempt), 2);
}

#[tokio::test]
async fn without_a_session_or_a_branch_an_interrupted_attempt_fails_as_before() {
    for events in [
        vec![(WORKTREE_PRODUCER, worktree(HEAD))],
        vec![("process", note("init", "session S-3, model m"))],
        // A worker's own artifact names no branch.
        vec![
            ("process", note("init", "session S-3, model m")),
            ("worker", worktree(HEAD)),
        ],
    ] {
        let (engine, spawner, id, report) = interrupted_then_restarted(1, events, true).await;
        assert_eq!(report.continued, 0, "{report:?}");
        let done = engine.wait_task(id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Failed, "{done:?}");
        assert_eq!(done.reason.as_deref(), Some("interrupted"));
        assert_eq!(done.restart, None);
        assert!(spawner.spawned().is_empty());
    }
}
