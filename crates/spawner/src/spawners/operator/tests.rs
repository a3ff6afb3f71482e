//! The operator spawner through the engine, with a fake spawn channel: every way a
//! delegated attempt can complete.

use std::time::Duration;

use serde_json::json;
use swarmd_engine::Engine;
use swarmd_engine::ids::AttemptId;
use swarmd_engine::store::SessionKind;

use crate::operator::SpawnReply;
use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskStatus};

use super::*;
use crate::testing::{
    FakeChannel, FakeDirectory, engine_with_directory, post_with_handle, session, spawn_owned,
};

const BASE_URL: &str = "http://192.0.2.7:7700";

struct Setup {
    engine: Engine,
    channel: Arc<FakeChannel>,
}

fn setup() -> Setup {
    let channel = Arc::new(FakeChannel::default());
    let directory = Arc::new(FakeDirectory::default());
    let mut info = session(SessionKind::MainAi);
    info.spawn_channel = Some(channel.clone());
    directory.add(&["main-ai"], info);
    let target = OperatorTarget {
        worker_binding: Some(json!({"subagent_type": "reviewer", "tools": ["Read"]})),
        system_prompt: Some("You review code.".into()),
    };
    let spawner = Arc::new(OperatorSpawner::new(
        Some("main-ai"),
        target,
        BASE_URL,
        directory.clone(),
    ));
    let orphan = Arc::new(OperatorSpawner::new(
        Some("nobody"),
        OperatorTarget::default(),
        BASE_URL,
        directory.clone(),
    ));
    let anyone = Arc::new(OperatorSpawner::new(
        None,
        OperatorTarget::default(),
        BASE_URL,
        directory.clone(),
    ));
    let engine = engine_with_directory(
        vec![
            ("review", SpawnerKind::Operator, spawner),
            ("orphan", SpawnerKind::Operator, orphan),
            ("anyone", SpawnerKind::Operator, anyone),
        ],
        directory,
    );
    Setup { engine, channel }
}

async fn start(s: &Setup, policy: PolicyOverrides) -> Task {
    spawn_owned(&s.engine, "review", None, policy).await
}

async fn finish(s: &Setup, task: &Task) -> Task {
    s.engine
        .wait_task(task.id, Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_frame_carries_credential_binding_and_a_real_directive() {
    let s = setup();
    let task = start(&s, PolicyOverrides::default()).await;
    let frame = s.channel.frame(0).await;
    assert_eq!(frame.attempt, AttemptId::new(task.id, 1));
    assert_eq!(frame.agent, "review");
    assert_eq!(frame.base_url, BASE_URL);
    assert!(frame.lease_deadline_ms > 0);
    assert_eq!(
        frame.worker_binding,
        Some(
            json!({"subagent_type": "reviewer", "tools": ["Read"], "system_prompt": "You review code."})
        )
    );
    assert!(frame.credential.handle().starts_with("wh-"));
    assert!(
        frame
            .directive
            .contains(&format!("worker_handle: {}", frame.credential.handle()))
    );
    assert!(frame.directive.contains(&format!(
        "GET {BASE_URL}/v1/worker/prompt?task_id={}",
        task.id
    )));
    // A SubAgent posting with the handle completes the attempt.
    post_with_handle(
        &s.engine,
        frame.credential.handle(),
        json!("reviewed"),
        true,
    )
    .await;
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(done.result.unwrap().value, json!("reviewed"));
}

#[tokio::test]
async fn an_ack_with_a_value_becomes_the_final() {
    let s = setup();
    let task = start(&s, PolicyOverrides::default()).await;
    s.channel.frame(0).await;
    s.channel.reply(
        0,
        SpawnReply::Ack {
            value: json!({"summary": "ok"}),
            ok: false,
            error: None,
            stats: None,
        },
    );
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Blocked);
    assert_eq!(done.result.unwrap().value, json!({"summary": "ok"}));
}

#[tokio::test]
async fn an_ack_after_a_posted_final_appends_nothing() {
    let s = setup();
    let task = start(&s, PolicyOverrides::default()).await;
    let frame = s.channel.frame(0).await;
    // The session goes quiet: the reply channel closes, the post still counts.
    s.channel.drop_reply(0);
    post_with_handle(
        &s.engine,
        frame.credential.handle(),
        json!("from http"),
        true,
    )
    .await;
    let done = finish(&s, &task).await;
    assert_eq!(done.result.unwrap().value, json!("from http"));
}

#[tokio::test]
async fn an_empty_ack_fails_and_a_halt_is_a_graceful_pass() {
    let s = setup();
    let task = start(&s, PolicyOverrides::default()).await;
    s.channel.frame(0).await;
    s.channel.reply(
        0,
        SpawnReply::Ack {
            value: json!(null),
            ok: true,
            error: None,
            stats: None,
        },
    );
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Failed);
    assert!(done.reason.unwrap().contains("spawn_ack without a value"));

    let task = start(&s, PolicyOverrides::default()).await;
    s.channel.frame(1).await;
    s.channel.reply(
        1,
        SpawnReply::Halt {
            value: Some(json!(3)),
            reason: Some("enough".into()),
        },
    );
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(
        done.result.unwrap().value,
        json!({"halted": true, "reason": "enough", "value": 3})
    );
}

#[tokio::test]
async fn cancel_sends_a_cancel_frame_for_the_spawn() {
    let s = setup();
    let task = start(&s, PolicyOverrides::default()).await;
    s.channel.frame(0).await;
    s.engine.cancel_task(task.id, None).await.unwrap();
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Cancelled);
    for _ in 0..100 {
        if !s.channel.cancels.lock().unwrap().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        *s.channel.cancels.lock().unwrap(),
        [("r-1".to_owned(), "cancelled".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn lease_expiry_cancels_the_spawn() {
    let s = setup();
    let policy = PolicyOverrides {
        attempt_timeout_secs: Some(5),
        ..PolicyOverrides::default()
    };
    let task = start(&s, policy).await;
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Failed);
    assert_eq!(done.reason.as_deref(), Some("lease expired"));
    assert_eq!(s.channel.cancels.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn no_session_for_the_role_fails_the_spawn() {
    let s = setup();
    let task = spawn_owned(&s.engine, "orphan", None, PolicyOverrides::default()).await;
    let done = finish(&s, &task).await;
    assert_eq!(done.status(), TaskStatus::Failed);
    assert!(
        done.reason
            .unwrap()
            .contains("no live operator session for `nobody`")
    );
}

#[tokio::test]
async fn an_agent_without_a_role_goes_to_a_main_ai_session() {
    let s = setup();
    let task = spawn_owned(&s.engine, "anyone", None, PolicyOverrides::default()).await;
    let frame = s.channel.frame(0).await;
    assert_eq!(frame.attempt, AttemptId::new(task.id, 1));
    assert_eq!(frame.agent, "anyone");
}

#[tokio::test]
async fn without_a_main_ai_session_an_agent_without_a_role_fails_the_spawn() {
    let directory = Arc::new(FakeDirectory::default());
    directory.add(&["bot"], session(SessionKind::Automate));
    let anyone = Arc::new(OperatorSpawner::new(
        None,
        OperatorTarget::default(),
        BASE_URL,
        directory.clone(),
    ));
    let engine = engine_with_directory(vec![("anyone", SpawnerKind::Operator, anyone)], directory);
    let task = spawn_owned(&engine, "anyone", None, PolicyOverrides::default()).await;
    let done = engine
        .wait_task(task.id, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Failed);
    assert!(
        done.reason.unwrap().contains("any MainAI session"),
        "an automate session is not a MainAI"
    );
}
