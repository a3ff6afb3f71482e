//! What a run shows and records when the flow stops needing a step or a
//! wait runs out: a branch a join no longer needs is cancelled, wherever
//! its fan-out sits, and a wait that timed out names its `timeout_secs`,
//! however late the daemon came to it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::task::SpawnerKind;
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};
use swarmd_engine::{Engine, EngineConfig, RunId, RunRecord, RunStatus};
use swarmd_flow::run::{NodeStatus, Outcome, WaitEntry};
use swarmd_flow::{Flow, Limits};

use crate::advance::Live;
use crate::{Catalog, FlowRef, RunView, Runner, StartRun, State};

/// `slow` never ends, `plan` passes with "P", `bad` fails.
fn engine() -> Engine {
    let spawner = ScriptedSpawner::new(|ctx| match ctx.agent.as_str() {
        "slow" => Script::Hang,
        "bad" => Script::Final {
            value: json!("no"),
            ok: false,
        },
        _ => Script::Final {
            value: json!("P"),
            ok: true,
        },
    });
    let mut resolver = StaticResolver::new();
    for agent in ["slow", "plan", "bad"] {
        resolver = resolver.with(agent, SpawnerKind::InProcess, None, spawner.clone());
    }
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

fn runner(engine: &Engine) -> Runner {
    let agents: BTreeSet<String> = ["slow", "plan", "bad"].map(String::from).into();
    let runner = Runner::new(
        engine.clone(),
        Catalog::default(),
        agents,
        Limits::default(),
        [5; 32],
        None,
    );
    tokio::spawn(runner.clone().run(std::future::pending()));
    runner
}

fn flow(body: Value) -> Flow {
    serde_json::from_value(json!({"name": "t", "body": body})).unwrap()
}

fn step(agent: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": {"op": "lit", "value": agent},
           "out": {"op": "path", "at": out}})
}

/// A fan-out over `agents`, each item's branch a step of that agent.
fn fanout(join: &str, agents: &[&str]) -> Value {
    let items: Vec<Value> = agents.iter().map(|a| json!(a)).collect();
    let then = step("slow", "$.r");
    let other = step(agents.iter().find(|a| **a != "slow").unwrap(), "$.r");
    json!({"kind": "fanout", "items": {"op": "lit", "value": items},
        "bind": {"op": "path", "at": "$.agent"}, "join": join, "concurrency": agents.len(),
        "out": {"op": "path", "at": "$.won"},
        "body": {"kind": "branch",
            "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.agent"},
                     "rhs": {"op": "lit", "value": "slow"}},
            "then": then, "else": other}})
}

fn wait(name: &str) -> Value {
    json!({"kind": "wait", "name": name, "out": {"op": "path", "at": "$.ok"}})
}

async fn start(runner: &Runner, body: Value) -> RunId {
    let request = StartRun {
        flow: FlowRef::Inline(Box::new(flow(body))),
        input: json!({}),
        idempotency_key: None,
        session: None,
        owner: None,
    };
    runner.start(request).await.unwrap().0.id
}

/// The run's view once the try at `key` has ended (10 s at most).
async fn once_ended(runner: &Runner, id: RunId, key: &str) -> RunView {
    for _ in 0..200 {
        let view = runner.view(id, false).await.unwrap();
        let ended = view
            .nodes
            .iter()
            .flat_map(|n| &n.tries)
            .any(|t| t.key == key && t.ended_ms.is_some());
        if ended {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("try {key} did not end");
}

fn node<'v>(view: &'v RunView, key: &str) -> &'v crate::NodeView {
    view.nodes
        .iter()
        .find(|n| n.key == key)
        .unwrap_or_else(|| panic!("no node {key}: {view:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_a_join_no_longer_needs_is_cancelled_before_the_runs_end() {
    let engine = engine();
    let runner = runner(&engine);
    // The fan-out is not the run's last node: the run goes on to a wait
    // while the loser's cancelled task is recorded.
    let id = start(
        &runner,
        json!({"kind": "seq", "children": [fanout("any", &["slow", "plan"]), wait("ok")]}),
    )
    .await;
    let loser = "/body/children/0/body/then[0]";
    let view = once_ended(&runner, id, loser).await;
    assert_eq!(view.status, "waiting", "{view:?}");
    let shown = node(&view, loser);
    assert_eq!(shown.status, NodeStatus::Cancelled, "{shown:?}");
    let why = format!("the flow no longer needs step {loser}");
    assert!(
        shown.reason.as_deref().unwrap().ends_with(&why),
        "{shown:?}"
    );
    assert_eq!(shown.tries[0].reason.as_deref(), Some(why.as_str()));
    assert_eq!(serde_json::to_value(shown).unwrap()["status"], "cancelled");
    assert_eq!(node(&view, "/body/children/0").status, NodeStatus::Passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_siblings_cancel_inside_a_try_is_a_cancel_and_the_failure_stays_one() {
    let engine = engine();
    let runner = runner(&engine);
    let id = start(
        &runner,
        json!({"kind": "seq", "children": [
            {"kind": "try", "body": fanout("all", &["slow", "bad"]),
             "catch": wait("ok"), "err_at": {"op": "path", "at": "$.why"}}]}),
    )
    .await;
    let sibling = "/body/children/0/body/body/then[0]";
    let view = once_ended(&runner, id, sibling).await;
    assert_eq!(node(&view, sibling).status, NodeStatus::Cancelled);
    let failed = node(&view, "/body/children/0/body/body/else[1]");
    assert_eq!(failed.status, NodeStatus::Failed, "{failed:?}");
    let fanout = node(&view, "/body/children/0/body");
    assert_eq!(fanout.status, NodeStatus::Failed, "{fanout:?}");
    // The run is cancelled at its wait: nothing more turns cancelled.
    runner.cancel(id, None).await.unwrap();
    let view = runner.view(id, false).await.unwrap();
    assert_eq!(node(&view, sibling).status, NodeStatus::Cancelled);
    assert_eq!(
        node(&view, "/body/children/0/body").status,
        NodeStatus::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_found_past_its_deadline_names_its_timeout_secs() {
    let engine = engine();
    let runner = Runner::for_tests(engine);
    let now = crate::now_ms();
    let mut state = State::default();
    // Opened 5 s ago with `timeout_secs: 3`, and the daemon was down.
    state.journal.open_wait(
        "/body",
        WaitEntry {
            name: "w".into(),
            opened_ms: now - 5_000,
            deadline_ms: Some(now - 2_000),
            token_digest: String::new(),
            prompt: None,
            schema: None,
            outcome: None,
        },
    );
    let record = RunRecord {
        id: RunId::new(),
        flow: "t".into(),
        flow_hash: String::new(),
        status: RunStatus::Waiting,
        session: None,
        owner: None,
        idempotency_key: None,
        input: json!({}),
        created_ms: now - 5_000,
        updated_ms: now - 5_000,
        version: 1,
        state: Value::Null,
        result: None,
        error: None,
    };
    let body = json!({"kind": "wait", "name": "w", "timeout_secs": 3,
                      "out": {"op": "path", "at": "$.ok"}});
    let mut live = Live::new(record, state, Arc::new(flow(body)), Arc::default());
    runner.expire_waits(&mut live, now);
    let Some(Outcome::Failed { reason, .. }) = &live.state.journal.waits["/body"].outcome else {
        panic!("the wait did not time out");
    };
    assert_eq!(reason, "timed out after 3 s (timeout_secs)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wait_hands_its_timeout_secs_to_err_at() {
    let engine = engine();
    let runner = runner(&engine);
    let id = start(
        &runner,
        json!({"kind": "try",
            "body": {"kind": "wait", "name": "w", "timeout_secs": 1,
                     "out": {"op": "path", "at": "$.ok"}},
            "catch": {"kind": "let", "at": {"op": "path", "at": "$.seen"},
                      "value": {"op": "path", "at": "$.why"}},
            "err_at": {"op": "path", "at": "$.why"}}),
    )
    .await;
    let done = runner.wait_for(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, RunStatus::Passed, "{done:?}");
    assert_eq!(
        done.result.unwrap()["seen"],
        "wait w: timed out after 1 s (timeout_secs)"
    );
}

/// The flow IR keeps its own copy of a task policy's bound (it depends on
/// no swarmd crate); a step's timeouts become that policy's.
#[test]
fn a_steps_timeout_bound_is_a_task_policys() {
    assert_eq!(
        u64::from(swarmd_flow::ir::MAX_TIMEOUT_SECS),
        swarmd_engine::task::MAX_POLICY_SECS
    );
}
