//! Budgets, agent sessions and continuations, driven as the runner drives
//! a run: outcomes recorded with what their tasks spent and left.

use serde_json::{Value, json};

use super::tests::{Sim, flow, lit, result, step, tmpl};
use super::*;
use crate::ir::{Flow, Node};

/// Records step `key`'s end with `spend`.
fn end(sim: &mut Sim, key: &str, result: Result<Value, &str>, spend: Spend) {
    sim.now += 10;
    let facts = StepFacts {
        spend,
        ..StepFacts::default()
    };
    let now = sim.now;
    sim.journal
        .end_step_with(key, result.map_err(str::to_owned), facts, now)
        .unwrap();
}

fn usd(cost_usd: f64) -> Spend {
    Spend {
        cost_usd,
        tokens: 0,
    }
}

fn budgeted_fanout(join: &str, concurrency: u32, n: usize, budget: Value) -> Flow {
    let items: Vec<usize> = (0..n).collect();
    flow(json!({"kind": "fanout", "items": lit(json!(items)),
        "bind": {"op": "path", "at": "$.i"}, "join": join, "concurrency": concurrency,
        "out": {"op": "path", "at": "$.all"}, "budget": budget,
        "body": step("w", tmpl("item {{ i }}"), "$.r")}))
}

#[test]
fn a_fanout_fails_once_its_steps_used_its_budget_and_drops_the_rest() {
    let mut sim = Sim::new(
        budgeted_fanout("all", 3, 3, json!({"max_cost_usd": 1.0})),
        json!({}),
    );
    let ev = sim.tick();
    assert!(
        ev.starts.iter().all(|s| s.max_cost_usd == Some(1.0)),
        "{ev:?}"
    );
    end(&mut sim, "/body/body[0]", Ok(json!("a")), usd(0.6));
    assert!(matches!(sim.tick().progress, Progress::Running));
    end(&mut sim, "/body/body[1]", Ok(json!("b")), usd(0.5));
    let ev = sim.tick();
    let Progress::Failed { reason } = &ev.progress else {
        panic!("not failed: {ev:?}");
    };
    assert!(
        reason.starts_with("budget_exceeded: $1.1000 used, /body/budget.max_cost_usd is 1"),
        "{reason}"
    );
    assert_eq!(
        ev.to_cancel(&sim.journal),
        vec![("/body/body[2]", "task-/body/body[2]")]
    );
}

#[test]
fn each_step_started_under_a_budget_gets_what_is_left_of_it() {
    let mut sim = Sim::new(
        budgeted_fanout(
            "all",
            1,
            3,
            json!({"max_cost_usd": 1.0, "max_tokens": 1000}),
        ),
        json!({}),
    );
    let ev = sim.tick();
    assert_eq!(ev.starts[0].max_cost_usd, Some(1.0));
    assert_eq!(ev.starts[0].max_tokens, Some(1000));
    let spend = Spend {
        cost_usd: 0.25,
        tokens: 300,
    };
    end(&mut sim, "/body/body[0]", Ok(json!("a")), spend);
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/body[1]");
    assert_eq!(ev.starts[0].max_cost_usd, Some(0.75));
    assert_eq!(ev.starts[0].max_tokens, Some(700));
    // A step that ends exactly at the limit leaves nothing to start with.
    end(&mut sim, "/body/body[1]", Ok(json!("b")), usd(0.75));
    let ev = sim.tick();
    assert!(matches!(&ev.progress, Progress::Failed { reason } if reason.contains("max_cost_usd")));
    assert!(ev.starts.is_empty());
}

#[test]
fn a_decided_fanout_stays_decided_when_a_loser_reports_its_spend_late() {
    let mut sim = Sim::new(
        budgeted_fanout("any", 2, 2, json!({"max_cost_usd": 1.0})),
        json!({}),
    );
    sim.tick();
    end(&mut sim, "/body/body[0]", Ok(json!("win")), usd(0.1));
    assert_eq!(result(sim.tick().progress)["all"]["r"], "win");
    end(&mut sim, "/body/body[1]", Ok(json!("late")), usd(5.0));
    assert_eq!(result(sim.eval().progress)["all"]["r"], "win");
}

#[test]
fn a_fanout_that_ends_past_its_budget_fails_and_try_takes_the_other_branch() {
    let f = flow(json!({"kind": "try",
        "body": {"kind": "fanout", "items": lit(json!([0, 1])),
            "bind": {"op": "path", "at": "$.i"}, "join": "all", "concurrency": 2,
            "out": {"op": "path", "at": "$.all"}, "budget": {"max_tokens": 100},
            "body": step("w", tmpl("{{ i }}"), "$.r")},
        "catch": step("cheap", tmpl("over: {{ why }}"), "$.fallback"),
        "err_at": {"op": "path", "at": "$.why"}}));
    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    let tokens = |tokens| Spend {
        cost_usd: 0.0,
        tokens,
    };
    end(&mut sim, "/body/body/body[0]", Ok(json!("a")), tokens(40));
    assert!(matches!(sim.tick().progress, Progress::Running));
    end(&mut sim, "/body/body/body[1]", Ok(json!("b")), tokens(70));
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1, "{ev:?}");
    assert_eq!(ev.starts[0].agent, "cheap");
    assert_eq!(
        ev.starts[0].input,
        json!("over: budget_exceeded: 110 tokens used, /body/body/budget.max_tokens is 100")
    );
}

#[test]
fn a_flow_budget_counts_every_step_of_the_run() {
    let mut f = flow(json!({"kind": "seq", "children": [
        step("w", lit(json!("one")), "$.a"),
        step("w", lit(json!("two")), "$.b")]}));
    f.budget = Some(crate::ir::Budget {
        max_cost_usd: Some(0.5),
        max_tokens: None,
    });
    let mut sim = Sim::new(f, json!({}));
    assert_eq!(sim.tick().starts[0].max_cost_usd, Some(0.5));
    end(&mut sim, "/body/children/0", Ok(json!(1)), usd(0.5));
    let ev = sim.tick();
    assert!(
        matches!(&ev.progress, Progress::Failed { reason } if reason.contains("/budget.max_cost_usd is 0.5")),
        "{ev:?}"
    );
}

#[test]
fn a_steps_session_is_a_value_a_later_step_continues() {
    let f = flow(json!({"kind": "seq", "children": [
        {"kind": "step", "ref": "coder", "in": lit(json!("write it")),
         "out": {"op": "path", "at": "$.said"}, "session": {"op": "path", "at": "$.coder"}},
        step("reviewer", tmpl("review {{ coder.branch }}"), "$.review"),
        {"kind": "step", "ref": "coder", "in": tmpl("fix: {{ review }}"),
         "out": {"op": "path", "at": "$.fixed"},
         "continue": {"op": "path", "at": "$.coder"}}]}));
    let mut sim = Sim::new(f, json!({}));
    let ev = sim.tick();
    assert!(ev.starts[0].wants_session);
    assert_eq!(ev.starts[0].continue_from, None);
    sim.now += 10;
    let session = json!({"task": "task-/body/children/0", "agent": "coder",
                         "session_id": "s-1", "branch": "swarmd/t-1/1"});
    sim.journal
        .end_step_with(
            "/body/children/0",
            Ok(json!("done")),
            StepFacts {
                session: Some(session.clone()),
                ..StepFacts::default()
            },
            sim.now,
        )
        .unwrap();
    let ev = sim.tick();
    assert_eq!(ev.starts[0].input, json!("review swarmd/t-1/1"));
    sim.end("/body/children/1", Ok(json!("rename x")));
    let ev = sim.tick();
    assert_eq!(
        ev.starts[0].continue_from.as_deref(),
        Some("task-/body/children/0")
    );
    assert_eq!(ev.starts[0].input, json!("fix: rename x"));
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(out["coder"], session);
}

#[test]
fn a_session_without_a_recorded_one_names_the_task_and_a_bad_continue_fails() {
    let f = flow(json!({"kind": "seq", "children": [
        {"kind": "step", "ref": "coder", "in": lit(json!("go")),
         "out": {"op": "path", "at": "$.said"}, "session": {"op": "path", "at": "$.s"}},
        {"kind": "step", "ref": "coder", "in": lit(json!("again")),
         "out": {"op": "path", "at": "$.x"}, "continue": {"op": "path", "at": "$.said"}}]}));
    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    sim.end("/body/children/0", Ok(json!(42)));
    let ev = sim.tick();
    let Progress::Failed { reason } = &ev.progress else {
        panic!("not failed: {ev:?}");
    };
    assert!(
        reason.contains("/body/children/1/continue: wants a session"),
        "{reason}"
    );
    // The session written for a step whose task recorded none.
    let mut ok = Sim::new(
        flow(
            json!({"kind": "step", "ref": "coder", "in": lit(json!("go")),
            "out": {"op": "path", "at": "$.said"}, "session": {"op": "path", "at": "$.s"}}),
        ),
        json!({}),
    );
    let out = result(ok.run(|_| Ok(json!(1))));
    assert_eq!(out["s"], json!({"task": "task-/body", "agent": "coder"}));
}

fn tokens(tokens: u64) -> Spend {
    Spend {
        cost_usd: 0.0,
        tokens,
    }
}

/// A flow of budget `max_tokens` whose body is a `try` around `spend`
/// steps one after the other; its catch sets `$.over`.
fn flow_try(max_tokens: u64, steps: usize) -> Flow {
    let children: Vec<Value> = (0..steps)
        .map(|i| step("w", lit(json!(i)), &format!("$.s{i}")))
        .collect();
    let mut f = flow(json!({"kind": "try",
        "body": {"kind": "seq", "children": children},
        "catch": {"kind": "let", "at": {"op": "path", "at": "$.over"}, "value": lit(json!(true))},
        "err_at": {"op": "path", "at": "$.why"}}));
    f.budget = Some(crate::ir::Budget {
        max_cost_usd: None,
        max_tokens: Some(max_tokens),
    });
    f
}

#[test]
fn a_try_around_the_body_catches_the_flows_budget_when_a_step_overshoots() {
    let mut sim = Sim::new(flow_try(250, 4), json!({}));
    for (i, left) in [(0, 250), (1, 150), (2, 50)] {
        let ev = sim.tick();
        assert_eq!(ev.starts[0].max_tokens, Some(left), "{ev:?}");
        end(
            &mut sim,
            &format!("/body/body/children/{i}"),
            Ok(json!(i)),
            tokens(100),
        );
    }
    let ev = sim.tick();
    assert!(ev.starts.is_empty(), "{ev:?}");
    let out = result(ev.progress);
    assert_eq!(out["over"], true);
    assert_eq!(
        out["why"],
        "budget_exceeded: 300 tokens used, /budget.max_tokens is 250"
    );
    assert_eq!(ev.nodes["/body"].status, NodeStatus::Passed);
    assert_eq!(ev.nodes["/body/body"].status, NodeStatus::Failed);
}

#[test]
fn a_step_failing_past_the_flows_budget_hands_the_budget_to_the_catch() {
    // The third step's own task budget (what was left) stopped it.
    let mut sim = Sim::new(flow_try(250, 4), json!({}));
    sim.tick();
    end(&mut sim, "/body/body/children/0", Ok(json!(0)), tokens(100));
    sim.tick();
    end(&mut sim, "/body/body/children/1", Ok(json!(1)), tokens(100));
    sim.tick();
    let over = Err("budget_exceeded: 100 tokens used, policy.max_tokens is 50");
    end(&mut sim, "/body/body/children/2", over, tokens(100));
    let out = result(sim.tick().progress);
    assert_eq!(
        out["why"],
        "budget_exceeded: 300 tokens used, /budget.max_tokens is 250"
    );
}

#[test]
fn the_flows_budget_used_exactly_fails_a_body_with_more_to_run_as_a_fanouts_does() {
    let mut sim = Sim::new(flow_try(250, 4), json!({}));
    for (i, spend) in [(0, 100), (1, 100), (2, 50)] {
        sim.tick();
        let key = format!("/body/body/children/{i}");
        end(&mut sim, &key, Ok(json!(i)), tokens(spend));
    }
    let ev = sim.tick();
    assert!(ev.starts.is_empty(), "the fourth step never starts: {ev:?}");
    let out = result(ev.progress);
    assert_eq!(
        out["why"],
        "budget_exceeded: 250 tokens used, /budget.max_tokens is 250"
    );
    // A body that ends having used exactly the budget passes.
    let mut sim = Sim::new(flow_try(250, 3), json!({}));
    for (i, spend) in [(0, 100), (1, 100), (2, 50)] {
        sim.tick();
        let key = format!("/body/body/children/{i}");
        end(&mut sim, &key, Ok(json!(i)), tokens(spend));
    }
    let out = result(sim.tick().progress);
    assert_eq!(out.get("over"), None, "{out}");
    assert_eq!(out["s2"], 2);
}

#[test]
fn the_catch_of_a_try_around_the_body_runs_outside_the_flows_budget() {
    let mut f = flow_try(100, 2);
    let Node::Try { catch, .. } = &mut f.body else {
        unreachable!()
    };
    **catch = serde_json::from_value(step("notify", tmpl("{{ why }}"), "$.note")).unwrap();
    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    end(&mut sim, "/body/body/children/0", Ok(json!(0)), tokens(100));
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1, "{ev:?}");
    assert_eq!(ev.starts[0].agent, "notify");
    assert_eq!(ev.starts[0].max_tokens, None);
    sim.end("/body/catch", Ok(json!("sent")));
    assert_eq!(result(sim.tick().progress)["note"], "sent");
}

#[test]
fn a_budgets_verdict_stays_when_a_cancelled_step_reports_later() {
    let f = flow(json!({"kind": "try",
        "body": {"kind": "fanout", "items": lit(json!([0, 1])),
            "bind": {"op": "path", "at": "$.i"}, "join": "all", "concurrency": 2,
            "out": {"op": "path", "at": "$.all"}, "budget": {"max_tokens": 100},
            "body": step("w", tmpl("{{ i }}"), "$.r")},
        "catch": step("cheap", tmpl("over: {{ why }}"), "$.fallback"),
        "err_at": {"op": "path", "at": "$.why"}}));
    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    end(&mut sim, "/body/body/body[0]", Ok(json!("a")), tokens(100));
    let ev = sim.tick();
    let why = "over: budget_exceeded: 100 tokens used, /body/body/budget.max_tokens is 100";
    assert_eq!(ev.starts[0].input, json!(why));
    assert_eq!(
        ev.to_cancel(&sim.journal),
        vec![("/body/body/body[1]", "task-/body/body/body[1]")]
    );
    assert_eq!(ev.nodes["/body/body/body[1]"].status, NodeStatus::Cancelled);
    // The cancelled sibling ends later, failed and with a spend of its
    // own: the fan-out's failure, its reason and its amount stay.
    let gone = Err("the flow no longer needs step /body/body/body[1]");
    end(&mut sim, "/body/body/body[1]", gone, tokens(30));
    let ev = sim.eval();
    assert!(ev.starts.is_empty(), "{ev:?}");
    assert!(ev.live.contains("/body/catch"), "{ev:?}");
    assert_eq!(
        ev.nodes["/body/body"].reason.as_deref(),
        Some(why.trim_start_matches("over: "))
    );
    // A sibling that passes late cannot turn the fan-out into a pass.
    let mut sim = Sim::new(
        budgeted_fanout("all", 2, 2, json!({"max_tokens": 100})),
        json!({}),
    );
    sim.tick();
    end(&mut sim, "/body/body[0]", Ok(json!("a")), tokens(100));
    assert!(matches!(sim.tick().progress, Progress::Failed { .. }));
    end(&mut sim, "/body/body[1]", Ok(json!("b")), tokens(0));
    let Progress::Failed { reason } = sim.eval().progress else {
        panic!("a late pass undid the budget's verdict");
    };
    assert!(
        reason.starts_with("budget_exceeded: 100 tokens used"),
        "{reason}"
    );
}

/// A called flow's own budget caps each call of it, and its reason names
/// the flow; a `try` around the call takes its catch then.
#[test]
fn a_called_flow_runs_under_its_own_budget() {
    let f = flow(json!({"kind": "try",
        "body": {"kind": "call", "flow": "sub", "in": lit(json!({})),
                 "out": {"op": "path", "at": "$.got"}},
        "catch": {"kind": "let", "at": {"op": "path", "at": "$.over"}, "value": lit(json!(true))},
        "err_at": {"op": "path", "at": "$.why"}}));
    let sub: Flow = serde_json::from_value(json!({"name": "sub",
        "budget": {"max_cost_usd": 1.0},
        "body": {"kind": "seq", "children": [
            step("w", tmpl("one"), "$.a"), step("w", tmpl("two"), "$.b")]}}))
    .unwrap();
    let mut sim = Sim::new(f, json!({}));
    sim.called.insert("sub".into(), sub);
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1, "{ev:?}");
    assert_eq!(ev.starts[0].max_cost_usd, Some(1.0), "{ev:?}");
    let key = ev.starts[0].key.clone();
    end(&mut sim, &key, Ok(json!("a")), usd(1.2));
    let ev = sim.tick();
    assert!(ev.starts.is_empty(), "nothing more starts past it: {ev:?}");
    let done = result(ev.progress);
    assert_eq!(done["over"], json!(true), "{done}");
    assert!(
        done["why"]
            .as_str()
            .unwrap()
            .starts_with("budget_exceeded: $1.2000 used, flow sub: /budget.max_cost_usd is 1"),
        "{done}"
    );
}
