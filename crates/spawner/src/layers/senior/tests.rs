//! Escalation through fake session seniors and through a real senior agent.

use std::sync::Mutex;

use swarmd_engine::Engine;
use swarmd_engine::event::Event;
use swarmd_engine::ids::AttemptId;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::SessionKind;

use crate::operator::BridgeError;
use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskStatus};
use swarmd_output_store::OutputRecord;

use super::*;
use crate::testing::{
    Act, FakeDirectory, FinalSpawner, call_log, engine_with_directory, events, outputs, session,
    spawn_owned,
};

/// Answers every question with `answer`, or never when `None`.
#[derive(Debug)]
struct FakeSenior {
    answer: Option<Value>,
    questions: Mutex<Vec<Value>>,
}

impl FakeSenior {
    fn arc(answer: Option<Value>) -> Arc<FakeSenior> {
        Arc::new(FakeSenior {
            answer,
            questions: Mutex::new(Vec::new()),
        })
    }

    fn asked(&self) -> Vec<Value> {
        self.questions.lock().unwrap().clone()
    }
}

#[async_trait]
impl SeniorBridge for FakeSenior {
    async fn ask(&self, _attempt: AttemptId, question: Value) -> Result<Value, BridgeError> {
        self.questions.lock().unwrap().push(question);
        match &self.answer {
            Some(answer) => Ok(answer.clone()),
            None => std::future::pending().await,
        }
    }
}

fn layer(agent: Option<&str>, directory: &Arc<FakeDirectory>) -> SeniorEscalationLayer {
    SeniorEscalationLayer {
        settings: SeniorSettings {
            agent: agent.map(str::to_owned),
            timeout: Duration::from_secs(60),
        },
        sessions: directory.clone(),
    }
}

/// Runs one task of agent `worker` (acting out `act`) under the layer; the
/// `senior` role session and the owning session get the given seniors.
async fn escalate(
    act: Act,
    role_senior: Option<Arc<FakeSenior>>,
    own_senior: Option<Arc<FakeSenior>>,
) -> (Engine, Task, Vec<OutputRecord>) {
    let directory = Arc::new(FakeDirectory::default());
    if let Some(senior) = role_senior {
        let mut info = session(SessionKind::Automate);
        info.senior = Some(senior);
        directory.add(&["senior"], info);
    }
    let mut owner = session(SessionKind::MainAi);
    owner.senior = own_senior.map(|s| s as Arc<dyn SeniorBridge>);
    let sid: SessionId = owner.sid;
    directory.add(&["main-ai"], owner);
    let stack = layer(None, &directory).wrap(FinalSpawner::arc(act, &call_log()));
    let engine = engine_with_directory(vec![("worker", SpawnerKind::InProcess, stack)], directory);
    let task = spawn_owned(&engine, "worker", Some(sid), PolicyOverrides::default()).await;
    let done = engine
        .wait_task(task.id, Duration::from_secs(3600))
        .await
        .unwrap();
    let tail = outputs(&engine, task.id, 1).await;
    (engine, done, tail)
}

#[tokio::test]
async fn an_answer_appends_an_ok_override_and_is_published() {
    let senior = FakeSenior::arc(Some(json!({"advice": "retry with -f"})));
    let blocked = Act::Final(json!({"reason": "disk full"}), false);
    let (engine, task, tail) = escalate(blocked, Some(senior.clone()), None).await;
    assert_eq!(task.status(), TaskStatus::Pass);
    assert_eq!(
        task.result.unwrap().value,
        json!({"original": {"reason": "disk full"}, "senior_answer": {"advice": "retry with -f"}})
    );
    assert_eq!(tail.len(), 2, "the original Final stays in the tail");
    assert_eq!(tail[1].producer, "senior_escalation");
    let question = &senior.asked()[0];
    assert_eq!(question["reason"], "disk full");
    assert_eq!(question["value"], json!({"reason": "disk full"}));
    assert_eq!(question["task"]["agent"], "worker");
    assert_eq!(question["task"]["prompt"], "do it");
    let log = events(&engine).await;
    let kinds: Vec<&str> = log.iter().map(Event::kind).collect();
    let asked = kinds.iter().position(|k| *k == "senior_asked").unwrap();
    let answered = kinds.iter().position(|k| *k == "senior_answered").unwrap();
    let finished = kinds.iter().position(|k| *k == "attempt_finished").unwrap();
    assert!(asked < answered && answered < finished, "{kinds:?}");
}

#[tokio::test]
async fn an_ok_false_answer_keeps_it_blocked() {
    let senior = FakeSenior::arc(Some(json!({"ok": false, "why": "really impossible"})));
    let (_, task, tail) = escalate(Act::Final(json!("nope"), false), Some(senior), None).await;
    assert_eq!(task.status(), TaskStatus::Blocked);
    assert_eq!(
        task.result.unwrap().value["senior_answer"]["why"],
        "really impossible"
    );
    assert_eq!(tail.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_answer_in_time_leaves_the_verdict() {
    let senior = FakeSenior::arc(None);
    let (engine, task, tail) =
        escalate(Act::Final(json!("nope"), false), Some(senior.clone()), None).await;
    assert_eq!(task.status(), TaskStatus::Blocked);
    assert_eq!(task.result.unwrap().value, json!("nope"));
    assert_eq!(tail.len(), 1);
    assert_eq!(senior.asked().len(), 1);
    assert!(
        !events(&engine)
            .await
            .iter()
            .any(|e| e.kind() == "senior_answered")
    );
}

#[tokio::test]
async fn passing_attempts_are_not_escalated_and_the_owner_is_the_last_resort() {
    let owner = FakeSenior::arc(Some(json!("fine")));
    let (_, task, _) = escalate(Act::Final(json!(1), true), None, Some(owner.clone())).await;
    assert_eq!(task.status(), TaskStatus::Pass);
    assert!(owner.asked().is_empty());

    let (_, task, _) = escalate(Act::Final(json!(1), false), None, Some(owner.clone())).await;
    assert_eq!(task.status(), TaskStatus::Pass);
    assert_eq!(owner.asked().len(), 1);

    let role = FakeSenior::arc(Some(json!("from the senior role")));
    let (_, task, _) = escalate(
        Act::Final(json!(1), false),
        Some(role.clone()),
        Some(owner.clone()),
    )
    .await;
    assert_eq!(
        task.result.unwrap().value["senior_answer"],
        "from the senior role"
    );
    assert_eq!(
        owner.asked().len(),
        1,
        "the senior role comes before the owner"
    );
}

#[tokio::test]
async fn a_configured_senior_agent_answers_through_a_sub_task() {
    for (senior_act, status) in [
        (Act::Final(json!("use plan B"), true), TaskStatus::Pass),
        (Act::Final(json!("no"), false), TaskStatus::Blocked),
    ] {
        let directory = Arc::new(FakeDirectory::default());
        let log = call_log();
        let senior_base = FinalSpawner::arc(senior_act, &log);
        let worker = layer(Some("senior-model"), &directory)
            .wrap(FinalSpawner::arc(Act::Final(json!("stuck"), false), &log));
        let engine = engine_with_directory(
            vec![
                ("worker", SpawnerKind::InProcess, worker),
                ("senior-model", SpawnerKind::InProcess, senior_base.clone()),
            ],
            directory,
        );
        let task = spawn_owned(&engine, "worker", None, PolicyOverrides::default()).await;
        let done = engine
            .wait_task(task.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(done.status(), status);
        let sub_ctx = &senior_base.contexts()[0];
        let sub = engine.get_task(sub_ctx.id.task).await.unwrap().unwrap();
        assert_eq!(sub.parent, Some(task.id));
        assert_eq!(sub.input.as_ref().unwrap()["value"], "stuck");
        assert!(sub.prompt.contains("ok=false"));
        let answer = &done.result.unwrap().value["senior_answer"];
        match status {
            TaskStatus::Pass => assert_eq!(answer, &json!("use plan B")),
            _ => assert_eq!(answer, &json!({"ok": false, "value": "no"})),
        }
    }
}

#[tokio::test]
async fn a_task_nobody_owns_asks_the_session_it_is_pinned_to() {
    let directory = Arc::new(FakeDirectory::default());
    let pinned_senior = FakeSenior::arc(Some(json!("from the pinned MainAI")));
    let mut pinned = session(SessionKind::MainAi);
    pinned.senior = Some(pinned_senior.clone());
    let sid: SessionId = pinned.sid;
    directory.add(&[], pinned);
    let stack =
        layer(None, &directory).wrap(FinalSpawner::arc(Act::Final(json!(1), false), &call_log()));
    let engine = engine_with_directory(vec![("worker", SpawnerKind::InProcess, stack)], directory);
    let spec = swarmd_engine::task::TaskSpec {
        agent: "worker".into(),
        prompt: "do it".into(),
        operator_sid: Some(sid),
        ..Default::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    let done = engine
        .wait_task(task.id, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(pinned_senior.asked().len(), 1);
    assert_eq!(
        done.result.unwrap().value["senior_answer"],
        "from the pinned MainAI"
    );
}
