//! Recovery after reopening a SQLite store mid-attempt: the daemon's
//! restart, at library level (the black-box suite kills the real binary).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::SqliteTaskStore;
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
use swarmd_engine::{Engine, EngineConfig, ResultPost, body_digest};
use swarmd_output_store::{OutputEvent, SqliteDb, SqliteOptions, SqliteOutputStore};

const WAIT: Duration = Duration::from_secs(30);

fn open(dir: &std::path::Path, resolver: Arc<StaticResolver>) -> (Engine, SqliteDb) {
    let db = SqliteDb::open(SqliteOptions::new(dir.join("swarmd.db"))).unwrap();
    let store = SqliteTaskStore::open(db.clone()).unwrap();
    let outputs = SqliteOutputStore::open(db.clone(), dir.join("blobs"), 256 * 1024).unwrap();
    let engine = engine_with(
        resolver,
        Arc::new(store),
        Arc::new(outputs),
        EngineConfig::default(),
        Arc::new(SystemClock),
    );
    (engine, db)
}

fn spec(agent: &str) -> TaskSpec {
    TaskSpec {
        agent: agent.into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    }
}

async fn spawned(spawner: &ScriptedSpawner, task: TaskId, n: usize) {
    for _ in 0..3000 {
        if spawner.spawned().iter().filter(|s| s.0 == task).count() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("task {task} was not spawned {n} times");
}

#[tokio::test]
async fn reopened_store_resumes_delegated_work_and_keeps_finished_work() {
    let dir = tempfile::tempdir().unwrap();
    let local = ScriptedSpawner::new(|ctx| {
        if ctx.agent == "done" {
            Script::Final {
                value: json!("kept"),
                ok: true,
            }
        } else {
            Script::Hang
        }
    });
    let remote = ScriptedSpawner::new(|_| Script::AwaitPost);
    let resolver = Arc::new(
        StaticResolver::new()
            .with("done", SpawnerKind::Process, None, local.clone())
            .with("local", SpawnerKind::Process, None, local.clone())
            .with("remote", SpawnerKind::Operator, None, remote.clone()),
    );

    let (first, db) = open(dir.path(), resolver.clone());
    let finished = first.create_task(spec("done")).await.unwrap();
    let finished = first.wait_task(finished.id, WAIT).await.unwrap();
    assert_eq!(finished.status(), TaskStatus::Pass);
    let interrupted = first.create_task(spec("local")).await.unwrap();
    let delegated = first.create_task(spec("remote")).await.unwrap();
    spawned(&local, interrupted.id, 1).await;
    spawned(&remote, delegated.id, 1).await;
    let old_handle = remote.credential(delegated.id).unwrap().handle().to_owned();
    let emit = first
        .authenticate_worker(&old_handle, Verb::EmitOutput)
        .unwrap();
    let progress = OutputEvent::Progress {
        stage: "before restart".into(),
        note: None,
    };
    let seq = first
        .worker_output(&emit, Some(delegated.id), vec![progress])
        .await
        .unwrap();
    assert_eq!(seq, 1);
    // The process goes away mid-attempt: nothing more reaches this file.
    db.close().unwrap();
    drop(first);

    let (second, _db) = open(dir.path(), resolver);
    let report = second.recover().await.unwrap();
    assert_eq!((report.interrupted, report.resumed), (1, 1));
    second.start_recovered();

    let t = second.wait_task(interrupted.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    assert_eq!(t.reason.as_deref(), Some("interrupted"));

    let kept = second.get_task(finished.id).await.unwrap().unwrap();
    assert_eq!(kept.result.unwrap().value, json!("kept"));
    let outputs = second
        .outputs()
        .tail(finished.id.as_uuid(), 1, 0, 10)
        .await
        .unwrap();
    assert_eq!(outputs.len(), 1, "the finished task's output survived");

    let auth = second
        .authenticate_worker(&old_handle, Verb::PostResult)
        .unwrap();
    let body = br#""after restart""#;
    let post = ResultPost {
        task_id: Some(delegated.id),
        attempt: None,
        value: json!("after restart"),
        ok: true,
        idempotency_key: None,
        body_digest: body_digest(body),
    };
    second.post_result(&auth, post).await.unwrap();
    let t = second.wait_task(delegated.id, WAIT).await.unwrap();
    assert_eq!(t.status(), TaskStatus::Pass);
    assert_eq!(t.attempt, 1, "the same attempt finished, no new one");
    let stream = second
        .outputs()
        .tail(delegated.id.as_uuid(), 1, 0, 10)
        .await
        .unwrap();
    let seqs: Vec<u64> = stream.iter().map(|r| r.seq).collect();
    assert_eq!(
        seqs,
        [1, 2],
        "the Final follows the output stored before the restart"
    );
    assert!(stream[1].event.is_final());
    // In the log, the Final's `output` comes before `task_finished`.
    let kinds: Vec<&str> = second
        .events_after(0, 1000)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.event.task_id() == Some(delegated.id))
        .map(|r| r.event.kind())
        .collect();
    let output = kinds.iter().rposition(|k| *k == "output").unwrap();
    let finished = kinds.iter().position(|k| *k == "task_finished").unwrap();
    assert!(output < finished, "{kinds:?}");
}
