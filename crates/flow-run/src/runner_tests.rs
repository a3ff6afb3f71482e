//! The runner over a real engine (memory stores, scripted workers): values
//! pass between steps, a fan-out's loser is cancelled at its task, a run
//! is read back by a new runner and goes on, and a wait answers only to
//! its own token.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::task::SpawnerKind;
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};
use swarmd_engine::{Engine, EngineConfig, RunStatus, TaskStatus};
use swarmd_flow::{Flow, Limits};

use crate::{Catalog, FlowRef, RunError, Runner, StartRun};

/// An engine over memory stores whose agents `resolver` names.
fn engine() -> Engine {
    memory_engine(std::sync::Arc::new(resolver()), EngineConfig::default())
}

/// `plan` passes with "P", `build` with "B", `slow` never ends, `big`
/// passes with 12 MiB of text.
pub(crate) fn resolver() -> StaticResolver {
    let spawner = ScriptedSpawner::new(|ctx| match ctx.agent.as_str() {
        "slow" => Script::Hang,
        "big" => Script::Final {
            value: json!("x".repeat(12 << 20)),
            ok: true,
        },
        "plan" => Script::Final {
            value: json!("P"),
            ok: true,
        },
        _ => Script::Final {
            value: json!("B"),
            ok: true,
        },
    });
    let mut resolver = StaticResolver::new();
    for agent in ["plan", "build", "slow", "big"] {
        resolver = resolver.with(agent, SpawnerKind::InProcess, None, spawner.clone());
    }
    resolver
}

/// A runner over `engine` that does not follow its events yet (a second
/// one over the same store reads runs back, as after a restart).
fn idle_runner(engine: &Engine) -> Runner {
    let agents: BTreeSet<String> = ["plan", "build", "slow", "big"].map(String::from).into();
    Runner::new(
        engine.clone(),
        Catalog::default(),
        agents,
        Limits::default(),
        [3; 32],
        None,
    )
}

/// A runner over `engine` that follows its events.
pub(crate) fn runner(engine: &Engine) -> Runner {
    let runner = idle_runner(engine);
    tokio::spawn(runner.clone().run(std::future::pending()));
    runner
}

pub(crate) fn step(agent: &str, text: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": {"op": "template", "text": text},
           "out": {"op": "path", "at": out}})
}

/// A request to start an inline flow of `body`.
fn inline(body: Value) -> StartRun {
    let flow: Flow = serde_json::from_value(json!({"name": "t", "body": body})).unwrap();
    StartRun {
        flow: FlowRef::Inline(Box::new(flow)),
        input: json!({"topic": "x"}),
        idempotency_key: None,
        session: None,
        owner: None,
    }
}

pub(crate) async fn start(runner: &Runner, body: Value) -> swarmd_engine::RunRecord {
    runner.start(inline(body)).await.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_pass_from_step_to_step() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "seq", "children": [
        step("plan", "plan {{ input.topic }}", "$.plan"),
        step("build", "build {{ plan }}", "$.built")]}),
    )
    .await;
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["built"], "B");
    let view = runner.view(run.id, false).await.unwrap();
    let build = view
        .nodes
        .iter()
        .find(|n| n.key == "/body/children/1")
        .unwrap();
    let task = engine
        .get_task(build.tries[0].task_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(task.prompt, "build P");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanout_loser_is_cancelled_at_its_task() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(&runner, json!({"kind": "fanout",
        "items": {"op": "lit", "value": ["slow", "plan"]},
        "bind": {"op": "path", "at": "$.agent"}, "join": "any", "concurrency": 2,
        "out": {"op": "path", "at": "$.won"},
        "body": {"kind": "branch",
            "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.agent"}, "rhs": {"op": "lit", "value": "slow"}},
            "then": step("slow", "s", "$.r"), "else": step("plan", "p", "$.r")}}))
    .await;
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    let view = runner.view(run.id, false).await.unwrap();
    let loser = view
        .nodes
        .iter()
        .find(|n| n.key == "/body/body/then[0]")
        .unwrap();
    let task = loser.tries[0].task_id.parse().unwrap();
    for _ in 0..100 {
        if engine.get_task(task).await.unwrap().unwrap().status() == TaskStatus::Cancelled {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the losing step's task was not cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_runner_reads_an_open_run_back_and_can_cancel_it() {
    let engine = engine();
    let first = runner(&engine);
    let run = start(
        &first,
        json!({"kind": "seq", "children": [
        step("plan", "p", "$.a"), step("slow", "s", "$.b")]}),
    )
    .await;
    for _ in 0..100 {
        if first.view(run.id, false).await.unwrap().nodes.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A second runner over the same store, as after a restart.
    let second = idle_runner(&engine);
    assert_eq!(second.recover().await.unwrap(), 1);
    assert!(second.is_open(run.id));
    let cancelled = second.cancel(run.id, Some("enough".into())).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(matches!(
        second.cancel(run.id, None).await,
        Err(RunError::Terminal(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_runs_open_try_ends_at_the_cancel_with_its_reason() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(&runner, step("slow", "s", "$.b")).await;
    let mut task = None;
    for _ in 0..100 {
        let view = runner.view(run.id, false).await.unwrap();
        if let Some(one) = view.nodes.first().and_then(|n| n.tries.first()) {
            task = Some(one.task_id.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let task = task.expect("the step started");
    let cancelled = runner.cancel(run.id, Some("enough".into())).await.unwrap();
    let view = runner.view(run.id, false).await.unwrap();
    let one = &view.nodes[0].tries[0];
    assert_eq!(one.ended_ms, Some(cancelled.updated_ms), "{one:?}");
    assert_eq!(one.reason.as_deref(), Some("run cancelled: enough"));
    let task = task.parse().unwrap();
    for _ in 0..100 {
        let got = engine.get_task(task).await.unwrap().unwrap();
        if got.status() == TaskStatus::Cancelled {
            assert_eq!(got.reason.as_deref(), Some("run cancelled: enough"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the step's task was not cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_answers_to_its_own_token_only() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "seq", "children": [
        {"kind": "wait", "name": "ok", "schema": {"type": "boolean"},
         "out": {"op": "path", "at": "$.ok"}},
        step("build", "b", "$.b")]}),
    )
    .await;
    let view = runner.view(run.id, true).await.unwrap();
    assert_eq!(view.status, "waiting");
    let key = view.waits[0].key.clone();
    let token = view.waits[0].token.clone().unwrap();
    assert_eq!(token, runner.wait_token(run.id, &key));
    let forged = runner.wait_token(run.id, "/body/children/1");
    assert!(matches!(
        runner
            .answer(run.id, "ok", json!(true), Some(&forged))
            .await,
        Err(RunError::Forbidden(_))
    ));
    assert!(matches!(
        runner
            .answer(run.id, "ok", json!("yes"), Some(&token))
            .await,
        Err(RunError::InvalidInput(_))
    ));
    runner
        .answer(run.id, "ok", json!(true), Some(&token))
        .await
        .unwrap();
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    assert!(matches!(
        runner.answer(run.id, "ok", json!(true), Some(&token)).await,
        Err(RunError::Terminal(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_racing_on_one_key_end_in_one_run() {
    let engine = engine();
    let runner = runner(&engine);
    let flow: Flow =
        serde_json::from_value(json!({"name": "t", "body": step("slow", "s", "$.r")})).unwrap();
    let request = |key: &str| StartRun {
        flow: FlowRef::Inline(Box::new(flow.clone())),
        input: json!({"topic": "x"}),
        idempotency_key: Some(key.to_owned()),
        session: None,
        owner: None,
    };
    // Each round races eight starts of one key; every caller must get the
    // one run that kept it, and only that run may still be running.
    for round in 0..5 {
        let key = format!("k-race-{round}");
        let starts: Vec<_> = (0..8)
            .map(|_| {
                let (runner, request) = (runner.clone(), request(&key));
                tokio::spawn(async move { runner.start(request).await.unwrap() })
            })
            .collect();
        let mut ids = BTreeSet::new();
        for start in starts {
            ids.insert(start.await.unwrap().0.id);
        }
        assert_eq!(
            ids.len(),
            1,
            "round {round}: callers got different runs {ids:?}"
        );
        let kept = *ids.first().unwrap();
        assert_eq!(engine.run_for_key(&key).await.unwrap(), Some(kept));
        let all = swarmd_engine::RunFilter {
            limit: 1_000,
            ..Default::default()
        };
        let mut runs = Vec::new();
        for listed in engine.list_runs(&all).await.unwrap() {
            runs.push(engine.get_run(listed.id).await.unwrap().unwrap());
        }
        let open: Vec<_> = runs
            .iter()
            .filter(|r| r.idempotency_key.as_deref() == Some(key.as_str()))
            .filter(|r| r.status == RunStatus::Running)
            .collect();
        assert_eq!(open.len(), 1, "round {round}: {open:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_needs_more_passes_than_one_turn_allows_still_ends() {
    // Each try fails before its task is made (`continue` names no task),
    // so every pass asks for another: 1 000 tries are 1 001 passes, one
    // more than a turn takes.
    let engine = engine();
    let runner = runner(&engine);
    let mut failing = step("plan", "p", "$.r");
    failing["continue"] = json!({"op": "lit", "value": "not-a-task"});
    failing["retry"] = json!({"attempts": 1000, "backoff_secs": 0});
    let run = start(&runner, failing).await;
    let done = runner
        .wait_for(run.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Failed, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_flow_cannot_be_read_does_not_stop_the_others_being_read_back() {
    let engine = engine();
    let first = runner(&engine);
    let wait = json!({"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}});
    let broken = start(&first, wait.clone()).await;
    let fine = start(&first, wait).await;
    // The first run's record names a flow the store does not hold.
    let mut record = engine.get_run(broken.id).await.unwrap().unwrap();
    record.flow_hash = "0".repeat(64);
    record.version += 1;
    engine
        .write_run(
            vec![swarmd_engine::WriteOp::PutRun(Box::new(record))],
            vec![],
        )
        .await
        .unwrap();
    // A second runner over the same store, as after a restart.
    let second = idle_runner(&engine);
    second.recover().await.unwrap();
    assert!(second.is_open(fine.id));
    assert!(!second.is_open(broken.id));
    second.answer(fine.id, "ok", json!(1), None).await.unwrap();
    let done = second
        .wait_for(fine.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_past_the_open_runs_cap_is_refused_until_one_ends() {
    let engine = engine();
    let runner = runner(&engine);
    runner
        .inner
        .max_open
        .store(2, std::sync::atomic::Ordering::Relaxed);
    let wait = json!({"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}});
    let first = start(&runner, wait.clone()).await;
    start(&runner, wait.clone()).await;
    let third = inline(wait);
    let refused = runner.start(third.clone()).await;
    assert!(matches!(refused, Err(RunError::TooMany(_))), "{refused:?}");
    runner.cancel(first.id, None).await.unwrap();
    let (run, started) = runner.start(third).await.unwrap();
    assert!(started);
    assert_eq!(run.status, RunStatus::Waiting);
}

/// One owner holds at most its share of a node's open runs; others and
/// the admin still start, and a run ending gives the owner its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_past_its_share_is_refused_and_others_are_not() {
    let engine = engine();
    let runner = runner(&engine);
    runner
        .inner
        .max_per_owner
        .store(2, std::sync::atomic::Ordering::Relaxed);
    let wait = json!({"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}});
    let as_owner = |owner: &str| StartRun {
        owner: Some(owner.to_owned()),
        ..inline(wait.clone())
    };
    let first = runner.start(as_owner("S-greedy")).await.unwrap().0;
    runner.start(as_owner("S-greedy")).await.unwrap();
    let refused = runner.start(as_owner("S-greedy")).await;
    let Err(RunError::TooMany(why)) = refused else {
        panic!("a third run of one owner started: {refused:?}");
    };
    assert!(why.contains("share"), "{why}");
    runner.start(as_owner("S-other")).await.unwrap();
    for _ in 0..3 {
        runner.start(as_owner("admin")).await.unwrap();
    }
    runner.cancel(first.id, None).await.unwrap();
    let (run, started) = runner.start(as_owner("S-greedy")).await.unwrap();
    assert!(started && run.status == RunStatus::Waiting, "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_answered_twice_or_misnamed_says_so() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "seq", "children": [
        {"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}},
        {"kind": "wait", "name": "ship", "out": {"op": "path", "at": "$.ship"}}]}),
    )
    .await;
    let Err(RunError::WaitNotOpen(why)) = runner.answer(run.id, "okay", json!(1), None).await
    else {
        panic!("a misnamed wait was answered");
    };
    assert!(why.ends_with("open: ok"), "{why}");
    runner.answer(run.id, "ok", json!(1), None).await.unwrap();
    let Err(RunError::WaitNotOpen(why)) = runner.answer(run.id, "ok", json!(2), None).await else {
        panic!("a wait was answered twice");
    };
    assert!(why.contains("answered already"), "{why}");
}

/// What a run's journal holds is bounded: a result that would take it past
/// `MAX_JOURNAL_BYTES` fails its step, and an answer that would is refused
/// with its wait left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_past_its_bound_fails_the_step_or_refuses_the_answer() {
    let engine = engine();
    let runner = runner(&engine);
    let run = start(
        &runner,
        json!({"kind": "seq", "children": [
        step("big", "a", "$.a"), step("big", "b", "$.b"), step("big", "c", "$.c")]}),
    )
    .await;
    let done = runner
        .wait_for(run.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Failed, "{:?}", done.error);
    let error = done.error.unwrap();
    assert!(
        error.contains("/body/children/2") && error.contains("journal past"),
        "{error}"
    );

    let run = start(
        &runner,
        json!({"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}}),
    )
    .await;
    let huge = json!("y".repeat(crate::advance::MAX_JOURNAL_BYTES));
    let Err(RunError::InvalidInput(why)) = runner.answer(run.id, "ok", huge, None).await else {
        panic!("an answer past the journal's bound was taken");
    };
    assert!(why.contains("journal past"), "{why}");
    runner.answer(run.id, "ok", json!(1), None).await.unwrap();
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_checks_its_input_against_the_called_flows_schema_and_counts_its_steps() {
    let engine = engine();
    let mut catalog = Catalog::default();
    let draft: Flow = serde_json::from_value(json!({"name": "draft-and-approve",
        "input_schema": {"type": "object", "required": ["topic"],
                         "properties": {"topic": {"type": "string"}}},
        "body": {"kind": "loop", "counter": {"op": "path", "at": "$.i"}, "max": 100,
                 "cond": {"op": "lit", "value": true},
                 "body": step("plan", "draft {{ input.topic }}", "$.d")}}))
    .unwrap();
    catalog.insert(draft, "inline".into());
    let agents: BTreeSet<String> = ["plan"].map(String::from).into();
    let runner = Runner::new(
        engine.clone(),
        catalog,
        agents,
        Limits::default(),
        [3; 32],
        None,
    );
    tokio::spawn(runner.clone().run(std::future::pending()));
    let call = |topic: Value| {
        json!({"kind": "call", "flow": "draft-and-approve",
            "in": {"op": "lit", "value": {"topic": topic}},
            "out": {"op": "path", "at": "$.r"}})
    };

    let run = start(&runner, call(json!(42))).await;
    let done = runner
        .wait_for(run.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Failed, "{done:?}");
    let error = done.error.unwrap_or_default();
    assert!(
        error.contains(
            "/body/in: the input does not match the input_schema of flow draft-and-approve"
        ) && error.contains("input at /topic: 42 is not of type \"string\""),
        "{error}"
    );
    let view = runner.view(run.id, false).await.unwrap();
    assert!(
        view.nodes.iter().all(|n| !n.key.contains('>')),
        "no node of the sub-flow ran: {:?}",
        view.nodes
    );

    // Eleven calls of a flow of 100 steps pass the run's 1 000.
    let looped = json!({"kind": "loop", "counter": {"op": "path", "at": "$.n"}, "max": 11,
        "cond": {"op": "lit", "value": true}, "body": call(json!("x"))});
    let refused = runner.start(inline(looped)).await.unwrap_err();
    let RunError::InvalidFlow { problems } = refused else {
        panic!("expected invalid_flow, got {refused:?}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].pointer.as_str(), problems[0].code),
        ("/body", "too_many_steps")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_node_must_name_a_merge_agent_once_the_runner_knows_them() {
    let merge = |agent: &str| {
        json!({"kind": "merge", "ref": agent, "strategy": "sequence",
            "branches": {"op": "lit", "value": ["b"]}, "out": {"op": "path", "at": "$.m"}})
    };
    let runner = idle_runner(&engine()).with_merge_agents(["build".to_owned()].into());
    let refused = runner.start(inline(merge("plan"))).await.unwrap_err();
    let RunError::InvalidFlow { problems } = refused else {
        panic!("expected invalid_flow, got {refused:?}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].pointer.as_str(), problems[0].code),
        ("/body/ref", "not_a_merge_agent")
    );
    assert_eq!(problems[0].hint, "use a merge agent: build");
    let flow: Flow = serde_json::from_value(json!({"name": "m", "body": merge("build")})).unwrap();
    assert_eq!(runner.lint(&flow), []);
    // A runner that does not know its agents' kinds checks only the name.
    let flow: Flow = serde_json::from_value(json!({"name": "m", "body": merge("plan")})).unwrap();
    assert_eq!(idle_runner(&engine()).lint(&flow), []);
}
