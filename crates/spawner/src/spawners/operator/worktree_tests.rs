//! The operator spawner with a worktree, through the engine with a fake
//! spawn channel and real `git`: the frame names the checkout, and every
//! end (a posted Final, an ack, a cancel, a lease that runs out after the
//! session is gone) records its `worktree` artifact and releases the
//! directory.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::Engine;
use swarmd_engine::store::SessionKind;
use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskStatus};

use super::*;
use crate::operator::SpawnReply;
use crate::process::HostEnv;
use crate::testing::git::{git, repo};
use crate::testing::{
    FakeChannel, FakeDirectory, engine_with_directory, post_with_handle, session, spawn_owned,
};
use swarmd_git::worktree::KeepRule;
use swarmd_git::worktree::naming::branch_name;
use swarmd_output_store::{ContentRef, OutputEvent};

struct Setup {
    engine: Engine,
    channel: Arc<FakeChannel>,
    repo: PathBuf,
    _temp: tempfile::TempDir,
}

fn setup() -> Setup {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let host = HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")]);
    let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host));
    let spec = WorktreeSpec {
        repo: repo.clone(),
        base: "main".into(),
        keep: KeepRule::Never,
        bootstrap: Default::default(),
    };
    let channel = Arc::new(FakeChannel::default());
    let directory = Arc::new(FakeDirectory::default());
    let mut info = session(SessionKind::MainAi);
    info.spawn_channel = Some(channel.clone());
    directory.add(&["main-ai"], info);
    let spawner = OperatorSpawner::new(
        Some("main-ai"),
        OperatorTarget::default(),
        "http://192.0.2.7:7700",
        directory.clone(),
    )
    .with_worktree(trees, spec);
    let engine = engine_with_directory(
        vec![("coder", SpawnerKind::Operator, Arc::new(spawner))],
        directory,
    );
    Setup {
        engine,
        channel,
        repo,
        _temp: temp,
    }
}

/// The `worktree` artifact of attempt 1 of `task`, once recorded.
async fn artifact(engine: &Engine, task: &Task) -> Value {
    for _ in 0..500 {
        let records = engine
            .outputs()
            .tail(task.id.as_uuid(), 1, 0, 100)
            .await
            .unwrap();
        let found = records.into_iter().find_map(|r| match r.event {
            OutputEvent::Artifact { name, content } if name == "worktree" => Some(content),
            _ => None,
        });
        if let Some(ContentRef::Inline { value }) = found {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no worktree artifact");
}

async fn finish(engine: &Engine, task: &Task) -> Task {
    engine
        .wait_task(task.id, Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_posted_final_ends_the_worktree_the_frame_named() {
    let s = setup();
    let task = spawn_owned(&s.engine, "coder", None, PolicyOverrides::default()).await;
    let frame = s.channel.frame(0).await;
    let worktree = frame
        .worktree
        .clone()
        .expect("the frame names the worktree");
    let dir = PathBuf::from(&worktree.path);
    assert_eq!(
        worktree.branch,
        branch_name(&task.id.to_string(), 1, Some(&task.prompt))
    );
    assert_eq!(worktree.base, git(&s.repo, &["rev-parse", "main"]));
    assert!(
        frame.directive.contains(&worktree.path),
        "{}",
        frame.directive
    );
    std::fs::write(dir.join("notes.txt"), "first\nsecond\n").unwrap();

    post_with_handle(&s.engine, frame.credential.handle(), json!("done"), true).await;
    assert_eq!(finish(&s.engine, &task).await.status(), TaskStatus::Pass);
    let value = artifact(&s.engine, &task).await;
    assert_eq!(value["files"], json!(["notes.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true);
    assert!(!dir.exists(), "released");
}

#[tokio::test]
async fn an_ack_and_a_cancel_each_end_the_worktree_too() {
    let s = setup();
    let acked = spawn_owned(&s.engine, "coder", None, PolicyOverrides::default()).await;
    let frame = s.channel.frame(0).await;
    let dir = PathBuf::from(frame.worktree.unwrap().path);
    std::fs::write(dir.join("acked.txt"), "x\n").unwrap();
    s.channel.reply(
        0,
        SpawnReply::Ack {
            value: json!("ok"),
            ok: true,
            error: None,
            stats: None,
        },
    );
    assert_eq!(finish(&s.engine, &acked).await.status(), TaskStatus::Pass);
    assert_eq!(
        artifact(&s.engine, &acked).await["files"],
        json!(["acked.txt"])
    );

    let cancelled = spawn_owned(&s.engine, "coder", None, PolicyOverrides::default()).await;
    let frame = s.channel.frame(1).await;
    let dir = PathBuf::from(frame.worktree.unwrap().path);
    std::fs::write(dir.join("cancelled.txt"), "x\n").unwrap();
    s.engine.cancel_task(cancelled.id, None).await.unwrap();
    let value = artifact(&s.engine, &cancelled).await;
    assert_eq!(value["files"], json!(["cancelled.txt"]), "{value}");
    assert_eq!(s.channel.cancels.lock().unwrap().len(), 1);
    for _ in 0..500 {
        if !dir.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!dir.exists(), "released");
}

#[tokio::test]
async fn a_lost_session_s_attempt_ends_its_worktree_when_the_lease_runs_out() {
    let s = setup();
    let policy = PolicyOverrides {
        max_attempts: Some(1),
        attempt_timeout_secs: Some(1),
        ..PolicyOverrides::default()
    };
    let task = spawn_owned(&s.engine, "coder", None, policy).await;
    let frame = s.channel.frame(0).await;
    let dir = PathBuf::from(frame.worktree.unwrap().path);
    std::fs::write(dir.join("lost.txt"), "x\n").unwrap();
    // The session goes away: its reply sender is dropped, nobody posts.
    s.channel.drop_reply(0);
    let done = finish(&s.engine, &task).await;
    assert_eq!(done.status(), TaskStatus::Failed, "{done:?}");
    let value = artifact(&s.engine, &task).await;
    assert_eq!(value["files"], json!(["lost.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true, "{value}");
}
