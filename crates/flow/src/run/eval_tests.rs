//! Evaluation driven as the runner drives it: start what it asks, record
//! outcomes, evaluate again.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::ir::Flow;

pub(super) fn flow(body: Value) -> Flow {
    serde_json::from_value(json!({"name": "t", "body": body})).unwrap()
}

pub(super) fn step(agent: &str, input: Value, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": input, "out": {"op": "path", "at": out}})
}

pub(super) fn tmpl(text: &str) -> Value {
    json!({"op": "template", "text": text})
}

pub(super) fn lit(value: Value) -> Value {
    json!({"op": "lit", "value": value})
}

/// A run under test: its flow, journal and the tasks started so far.
pub(super) struct Sim {
    flow: Flow,
    pub(super) called: BTreeMap<String, Flow>,
    input: Value,
    pub(super) journal: Journal,
    pub(super) now: u64,
    started: Vec<StepStart>,
}

impl Sim {
    pub(super) fn new(flow: Flow, input: Value) -> Sim {
        Sim {
            flow,
            called: BTreeMap::new(),
            input,
            journal: Journal::default(),
            now: 1_000,
            started: Vec::new(),
        }
    }

    pub(super) fn eval(&self) -> Evaluation {
        evaluate(&self.flow, &self.called, &self.input, &self.journal)
    }

    /// Evaluates and starts every step asked for (whatever its backoff),
    /// opens every wait; returns the evaluation.
    pub(super) fn tick(&mut self) -> Evaluation {
        let ev = self.eval();
        for start in &ev.starts {
            self.journal
                .start_step(&start.key, format!("task-{}", start.key), self.now);
            self.started.push(start.clone());
        }
        for wait in &ev.waits {
            self.journal.open_wait(
                &wait.key,
                WaitEntry {
                    name: wait.name.clone(),
                    opened_ms: self.now,
                    deadline_ms: None,
                    token_digest: String::new(),
                    prompt: wait.prompt.clone(),
                    schema: wait.schema.clone(),
                    outcome: None,
                },
            );
        }
        ev
    }

    pub(super) fn end(&mut self, key: &str, result: Result<Value, &str>) {
        self.now += 10;
        self.journal
            .end_step(key, result.map_err(str::to_owned), self.now)
            .unwrap();
    }

    /// Runs to the end, answering every step with `world`.
    pub(super) fn run(
        &mut self,
        mut world: impl FnMut(&StepStart) -> Result<Value, String>,
    ) -> Progress {
        for _ in 0..1_000 {
            let ev = self.tick();
            if matches!(
                ev.progress,
                Progress::Passed { .. } | Progress::Failed { .. }
            ) {
                return ev.progress;
            }
            let open: Vec<String> = self.journal.open_steps().map(|(k, _)| k.into()).collect();
            assert!(!open.is_empty(), "blocked with nothing running: {ev:?}");
            let key = &open[0];
            let start = self.started.iter().find(|s| &s.key == key).unwrap().clone();
            let result = world(&start);
            self.now += 10;
            self.journal.end_step(key, result, self.now).unwrap();
        }
        panic!("did not end");
    }
}

pub(super) fn result(progress: Progress) -> Value {
    match progress {
        Progress::Passed { result } => result,
        other => panic!("not passed: {other:?}"),
    }
}

#[test]
fn a_sequence_passes_values_from_step_to_step_and_starts_each_once() {
    let f = flow(json!({"kind": "seq", "children": [
        step("a", tmpl("plan {{ input.topic }}"), "$.plan"),
        step("b", tmpl("do {{ plan }}"), "$.done"),
    ]}));
    let mut sim = Sim::new(f, json!({"topic": "x"}));
    let out = result(sim.run(|s| Ok(json!(format!("<{}>", s.input.as_str().unwrap())))));
    assert_eq!(out["done"], json!("<do <plan x>>"));
    let inputs: Vec<_> = sim.started.iter().map(|s| s.input.clone()).collect();
    assert_eq!(inputs, vec![json!("plan x"), json!("do <plan x>")]);
    // Evaluating the finished journal again starts nothing.
    let again = sim.eval();
    assert!(again.starts.is_empty() && again.live.is_empty());
}

#[test]
fn a_branch_takes_one_side_and_never_starts_the_other() {
    let f = flow(json!({"kind": "branch",
        "cond": {"op": "gt", "lhs": {"op": "path", "at": "$.input.n"}, "rhs": lit(json!(2))},
        "then": step("big", lit(json!("big")), "$.r"),
        "else": step("small", lit(json!("small")), "$.r")}));
    let mut sim = Sim::new(f, json!({"n": 1}));
    let out = result(sim.run(|s| Ok(json!(s.agent))));
    assert_eq!(out["r"], json!("small"));
    assert_eq!(sim.started.len(), 1);
    assert_eq!(sim.started[0].key, "/body/else");
}

fn fanout(join: &str, concurrency: u32, n: usize) -> Flow {
    let items: Vec<usize> = (0..n).collect();
    flow(json!({"kind": "fanout", "items": lit(json!(items)),
        "bind": {"op": "path", "at": "$.i"}, "join": join, "concurrency": concurrency,
        "out": {"op": "path", "at": "$.all"},
        "body": step("w", tmpl("item {{ i }}"), "$.r")}))
}

#[test]
fn a_fanout_runs_at_most_its_concurrency_and_joins_in_item_order() {
    let mut sim = Sim::new(fanout("all", 2, 5), json!({}));
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 2, "{ev:?}");
    // End them out of order: item 1 first.
    sim.end("/body/body[1]", Ok(json!("one")));
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1);
    assert_eq!(ev.starts[0].key, "/body/body[2]");
    assert_eq!(sim.journal.open_steps().count(), 2);
    let out = result(sim.run(|s| Ok(s.input.clone())));
    let all = out["all"].as_array().unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[1], json!({"i": 1, "r": "one"}));
    assert_eq!(all[4], json!({"i": 4, "r": "item 4"}));
}

#[test]
fn all_fails_at_the_first_failure_and_drops_the_running_branches() {
    let mut sim = Sim::new(fanout("all", 3, 3), json!({}));
    sim.tick();
    sim.end("/body/body[2]", Err("boom"));
    let ev = sim.tick();
    assert!(matches!(&ev.progress, Progress::Failed { reason } if reason.contains("boom")));
    let cancel: Vec<_> = ev
        .to_cancel(&sim.journal)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(cancel, vec!["/body/body[0]", "/body/body[1]"]);
}

#[test]
fn any_takes_the_first_pass_and_a_late_loser_changes_nothing() {
    let mut sim = Sim::new(fanout("any", 3, 3), json!({}));
    sim.tick();
    sim.end("/body/body[0]", Err("no"));
    assert!(matches!(sim.tick().progress, Progress::Running));
    sim.end("/body/body[2]", Ok(json!("win")));
    let ev = sim.tick();
    assert_eq!(
        result(ev.progress.clone())["all"],
        json!({"i": 2, "r": "win"})
    );
    assert_eq!(
        ev.to_cancel(&sim.journal),
        vec![("/body/body[1]", "task-/body/body[1]")]
    );
    assert_eq!(ev.nodes["/body/body[1]"].status, NodeStatus::Cancelled);
    // The loser's own outcome arrives after the decision.
    sim.end("/body/body[1]", Ok(json!("late")));
    assert_eq!(result(sim.eval().progress)["all"]["r"], json!("win"));
}

#[test]
fn race_is_decided_by_the_first_to_end_even_a_failure() {
    let mut sim = Sim::new(fanout("race", 2, 2), json!({}));
    sim.tick();
    sim.end("/body/body[1]", Err("fast failure"));
    sim.end("/body/body[0]", Ok(json!("slow pass")));
    assert!(
        matches!(sim.eval().progress, Progress::Failed { reason } if reason.contains("fast failure"))
    );
}

#[test]
fn all_settled_records_every_branch_and_never_fails() {
    let mut sim = Sim::new(fanout("all_settled", 2, 3), json!({}));
    let out = result(sim.run(|s| {
        if s.key.ends_with("[1]") {
            Err("bad".into())
        } else {
            Ok(json!("ok"))
        }
    }));
    assert_eq!(
        out["all"][1],
        json!({"status": "failed", "reason": "step /body/body: bad"})
    );
    assert_eq!(out["all"][2]["value"]["r"], json!("ok"));
}

#[test]
fn a_loop_counts_tests_its_condition_and_stops_at_max() {
    let f = flow(
        json!({"kind": "loop", "counter": {"op": "path", "at": "$.n"}, "max": 3,
        "cond": {"op": "ne", "lhs": {"op": "select", "at": "$.r"}, "rhs": lit(json!(["stop"]))},
        "body": step("w", tmpl("{{ n }}"), "$.r")}),
    );
    let mut sim = Sim::new(f.clone(), json!({}));
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(sim.started.len(), 3);
    assert_eq!(sim.started[2].key, "/body/body#2");
    assert_eq!(out["r"], json!("2"));
    let mut sim = Sim::new(f, json!({}));
    result(sim.run(|_| Ok(json!("stop"))));
    assert_eq!(sim.started.len(), 1);
}

#[test]
fn try_undoes_the_body_writes_and_hands_the_error_to_catch() {
    let f = flow(
        json!({"kind": "try", "err_at": {"op": "path", "at": "$.err"},
        "body": {"kind": "seq", "children": [
            {"kind": "let", "at": {"op": "path", "at": "$.half"}, "value": lit(json!(1))},
            step("w", lit(json!("x")), "$.r")]},
        "catch": step("fix", tmpl("fix {{ err }}"), "$.fixed")}),
    );
    let mut sim = Sim::new(f, json!({}));
    let out = result(sim.run(|s| {
        if s.agent == "w" {
            Err("broke".into())
        } else {
            Ok(s.input.clone())
        }
    }));
    assert!(out.get("half").is_none(), "{out}");
    assert_eq!(out["fixed"], json!("fix step /body/body/children/1: broke"));
}

#[test]
fn a_step_retries_with_backoff_and_not_for_a_non_retryable_reason() {
    let f = flow(json!({"kind": "step", "ref": "w", "in": lit(json!("x")),
        "out": {"op": "path", "at": "$.r"},
        "retry": {"attempts": 3, "backoff_secs": 2, "non_retryable": ["fatal"]}}));
    let mut sim = Sim::new(f.clone(), json!({}));
    sim.tick();
    sim.end("/body", Err("flaky"));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body~2");
    assert_eq!(ev.starts[0].not_before_ms, Some(sim.now + 2_000));
    sim.end("/body~2", Err("flaky"));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].not_before_ms, Some(sim.now + 4_000));
    sim.end("/body~3", Ok(json!("third")));
    assert_eq!(result(sim.eval().progress)["r"], json!("third"));

    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    sim.end("/body", Err("fatal: no credit"));
    assert!(matches!(sim.tick().progress, Progress::Failed { .. }));
    assert_eq!(sim.started.len(), 1);
}

#[test]
fn a_wait_pauses_the_run_until_answered_and_fails_on_timeout() {
    let f = flow(json!({"kind": "seq", "children": [
        {"kind": "wait", "name": "ok", "prompt": tmpl("ship {{ input.v }}?"),
         "out": {"op": "path", "at": "$.answer"}},
        step("w", tmpl("{{ answer.go }}"), "$.r")]}));
    let mut sim = Sim::new(f.clone(), json!({"v": 2}));
    let ev = sim.tick();
    assert_eq!(ev.progress, Progress::Waiting);
    assert_eq!(ev.waits[0].prompt, Some(json!("ship 2?")));
    assert_eq!(sim.tick().progress, Progress::Waiting);
    sim.journal
        .end_wait("/body/children/0", Ok(json!({"go": "yes"})), 5)
        .unwrap();
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(out["r"], json!("yes"));

    let mut sim = Sim::new(f, json!({"v": 2}));
    sim.tick();
    sim.journal
        .end_wait("/body/children/0", Err("timed out".into()), 5)
        .unwrap();
    assert!(
        matches!(sim.eval().progress, Progress::Failed { reason } if reason == "wait ok: timed out")
    );
}

#[test]
fn a_call_runs_the_sub_flow_under_the_call_key_and_writes_its_output() {
    let f = flow(
        json!({"kind": "call", "flow": "sub", "in": lit(json!({"x": 5})),
        "out": {"op": "path", "at": "$.got"}}),
    );
    let sub: Flow = serde_json::from_value(json!({"name": "sub",
        "output": {"op": "path", "at": "$.r"},
        "body": step("w", tmpl("{{ input.x }}"), "$.r")}))
    .unwrap();
    let mut sim = Sim::new(f, json!({}));
    sim.called.insert("sub".into(), sub);
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(out["got"], json!("5"));
    assert_eq!(sim.started[0].key, "/body>sub/body");
}

#[test]
fn a_run_stops_at_its_step_limit() {
    let mut f = fanout("all", 10, 5);
    f.limits.max_steps = 3;
    let mut sim = Sim::new(f, json!({}));
    let ev = sim.tick();
    assert!(
        matches!(&ev.progress, Progress::Failed { reason } if reason.contains("max_steps")),
        "{ev:?}"
    );
}

#[test]
fn the_journal_round_trips_and_evaluation_is_the_same_after() {
    let mut sim = Sim::new(fanout("all", 2, 4), json!({}));
    sim.tick();
    sim.end("/body/body[0]", Ok(json!(1)));
    sim.tick();
    let text = serde_json::to_string(&sim.journal).unwrap();
    let back: Journal = serde_json::from_str(&text).unwrap();
    assert_eq!(back, sim.journal);
    let a = sim.eval();
    let b = evaluate(&sim.flow, &sim.called, &sim.input, &back);
    assert_eq!(a, b);
    assert!(a.starts.is_empty(), "both running slots are taken: {a:?}");
}

#[test]
fn a_step_that_asks_for_changes_gets_its_tasks_changes_or_null() {
    let f = flow(json!({"kind": "seq", "children": [
        {"kind": "step", "ref": "coder", "in": lit(json!("fix")),
         "out": {"op": "path", "at": "$.said"}, "changes": {"op": "path", "at": "$.diff"}},
        step("judge", tmpl("{{ diff.branch }}"), "$.verdict")]}));
    let mut sim = Sim::new(f, json!({}));
    let ev = sim.tick();
    assert!(ev.starts[0].wants_changes);
    sim.journal
        .end_step_with(
            "/body/children/0",
            Ok(json!("done")),
            StepFacts {
                changes: Some(json!({"branch": "swarmd/t-1/1", "head": "abc"})),
                ..StepFacts::default()
            },
            5,
        )
        .unwrap();
    let ev = sim.tick();
    assert!(!ev.starts[0].wants_changes);
    assert_eq!(ev.starts[0].input, json!("swarmd/t-1/1"));
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(out["diff"]["head"], "abc");
    assert_eq!(out["said"], "done");
}

fn failure(f: Flow) -> String {
    match Sim::new(f, json!({})).eval().progress {
        Progress::Failed { reason } => reason,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

fn let_node(at: &str, value: Value) -> Value {
    json!({"kind": "let", "at": {"op": "path", "at": at}, "value": value})
}

fn endless_loop(counter: &str, max: u32, body: Value) -> Value {
    json!({"kind": "loop", "counter": {"op": "path", "at": counter}, "max": max,
        "cond": lit(json!(true)), "body": body})
}

#[test]
fn a_loop_past_the_bound_fails_instead_of_running_its_max() {
    let f = flow(endless_loop(
        "$.n",
        u32::MAX,
        let_node("$.x", lit(json!(1))),
    ));
    let reason = failure(f);
    assert!(reason.contains("ran 10000 times"), "{reason}");
}

#[test]
fn nested_loops_stop_at_the_node_instance_bound() {
    let inner = endless_loop("$.j", 10_000, let_node("$.x", lit(json!(1))));
    let f = flow(endless_loop("$.i", 10_000, inner));
    let reason = failure(f);
    assert!(reason.contains("100000 node instances"), "{reason}");
}

#[test]
fn a_value_that_nests_deeper_each_iteration_fails_the_run() {
    // `select` wraps what it finds in an array: one level more each time.
    let wrap = let_node("$.x", json!({"op": "select", "at": "$.x"}));
    let f = flow(json!({"kind": "seq", "children": [
        let_node("$.x", lit(json!(0))),
        endless_loop("$.n", 500, wrap)]}));
    let reason = failure(f);
    assert!(reason.contains("deeper than 96 levels"), "{reason}");
    // A write path's own names count towards the depth.
    let deep = format!("$.{}", vec!["a"; 32].join("."));
    let mut value = json!(1);
    for _ in 0..70 {
        value = json!([value]);
    }
    let f = flow(let_node(&deep, lit(value)));
    let reason = failure(f);
    assert!(reason.contains("deeper than 96 levels"), "{reason}");
}

#[test]
fn waits_count_against_the_step_limit() {
    // Ten waits at once, in a fan-out, where the run may spend five.
    let mut f: Flow = serde_json::from_value(json!({"name": "t", "body": {
        "kind": "fanout", "items": {"op": "lit", "value": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]},
        "bind": {"op": "path", "at": "$.i"}, "join": "all", "concurrency": 10,
        "out": {"op": "path", "at": "$.all"},
        "body": {"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}}}}))
    .unwrap();
    f.limits.max_steps = 5;
    let ev = Sim::new(f.clone(), json!({})).tick();
    assert!(
        matches!(&ev.progress, Progress::Failed { reason } if reason.contains("max_steps")),
        "{ev:?}"
    );
    f.limits.max_steps = 10;
    let ev = Sim::new(f, json!({})).tick();
    assert_eq!(ev.waits.len(), 10, "{ev:?}");
}

#[test]
fn a_wait_prompt_past_its_bound_fails_the_run() {
    let f: Flow = serde_json::from_value(json!({"name": "t", "body": {
        "kind": "wait", "name": "ok", "prompt": {"op": "path", "at": "$.input.big"},
        "out": {"op": "path", "at": "$.ok"}}}))
    .unwrap();
    let big = "x".repeat(crate::run::eval::MAX_WAIT_PROMPT_BYTES);
    let ev = Sim::new(f.clone(), json!({ "big": big })).tick();
    assert!(
        matches!(&ev.progress, Progress::Failed { reason } if reason.contains("more than")),
        "{ev:?}"
    );
    let ev = Sim::new(f, json!({ "big": "short" })).tick();
    assert_eq!(ev.waits[0].prompt, Some(json!("short")));
}

#[test]
fn a_call_whose_input_fails_the_called_flows_input_schema_fails_before_the_sub_run() {
    let call = |input: Value| {
        flow(
            json!({"kind": "call", "flow": "draft-and-approve", "in": lit(input),
            "out": {"op": "path", "at": "$.got"}}),
        )
    };
    let sub: Flow = serde_json::from_value(json!({"name": "draft-and-approve",
        "input_schema": {"type": "object", "required": ["topic"],
                         "properties": {"topic": {"type": "string"}}},
        "body": step("w", tmpl("{{ input.topic }}"), "$.r")}))
    .unwrap();
    let mut sim = Sim::new(call(json!({"topic": 42})), json!({}));
    sim.called.insert(sub.name.clone(), sub.clone());
    let ev = sim.tick();
    let Progress::Failed { reason } = &ev.progress else {
        panic!("expected a failed run, got {ev:?}");
    };
    assert!(
        reason.starts_with(
            "/body/in: the input does not match the input_schema of flow draft-and-approve: \
             input at /topic: 42 is not of type \"string\""
        ),
        "{reason}"
    );
    assert!(sim.started.is_empty(), "no step of the sub-flow starts");
    assert_eq!(ev.nodes["/body"].status, NodeStatus::Failed);

    let mut sim = Sim::new(call(json!({})), json!({}));
    sim.called.insert(sub.name.clone(), sub.clone());
    let ev = sim.tick();
    assert!(
        matches!(&ev.progress, Progress::Failed { reason }
            if reason.contains("input at /: \"topic\" is a required property")),
        "{ev:?}"
    );

    let mut sim = Sim::new(call(json!({"topic": "flows"})), json!({}));
    sim.called.insert(sub.name.clone(), sub);
    let out = result(sim.run(|s| Ok(s.input.clone())));
    assert_eq!(out["got"]["r"], json!("flows"));
}

#[test]
fn a_container_blocked_only_on_waits_shows_waiting_and_one_with_a_step_running() {
    // docs/flows.md's `flow show` example: a seq, its fan-out passed, its
    // branch waiting on an approval.
    let approve = json!({"kind": "wait", "name": "approve", "out": {"op": "path", "at": "$.ok"}});
    let f = flow(json!({"kind": "seq", "children": [
        {"kind": "fanout", "items": lit(json!([0, 1])), "bind": {"op": "path", "at": "$.n"},
         "concurrency": 2, "join": "all_settled", "out": {"op": "path", "at": "$.tries"},
         "body": step("w", tmpl("{{ n }}"), "$.r")},
        {"kind": "branch", "cond": {"op": "exists", "at": "$.tries"},
         "then": approve, "else": {"kind": "seq", "children": []}}]}));
    let mut sim = Sim::new(f, json!({}));
    sim.tick();
    sim.end("/body/children/0/body[0]", Ok(json!(1)));
    let ev = sim.tick();
    assert_eq!(ev.nodes["/body"].status, NodeStatus::Running, "a step runs");
    assert_eq!(ev.nodes["/body/children/0"].status, NodeStatus::Running);
    sim.end("/body/children/0/body[1]", Err("exit 1"));
    let ev = sim.tick();
    assert_eq!(ev.progress, Progress::Waiting);
    let status = |key: &str| ev.nodes[key].status;
    assert_eq!(status("/body"), NodeStatus::Waiting);
    assert_eq!(status("/body/children/0"), NodeStatus::Passed);
    assert_eq!(status("/body/children/1"), NodeStatus::Waiting);
    assert_eq!(status("/body/children/1/then"), NodeStatus::Waiting);

    // A fan-out with one branch on a wait and one on a step runs; a loop,
    // a try and a call around waits only wait.
    let wait =
        |name: &str| json!({"kind": "wait", "name": name, "out": {"op": "path", "at": "$.ok"}});
    let f = flow(json!({"kind": "fanout", "items": lit(json!([0, 1])),
        "bind": {"op": "path", "at": "$.n"}, "concurrency": 2, "join": "all",
        "out": {"op": "path", "at": "$.all"},
        "body": {"kind": "branch", "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.n"},
                 "rhs": lit(json!(0))},
            "then": wait("w"), "else": step("w", lit(json!("x")), "$.r")}}));
    let ev = Sim::new(f, json!({})).tick();
    assert_eq!(ev.nodes["/body"].status, NodeStatus::Running);
    assert_eq!(ev.nodes["/body/body[0]"].status, NodeStatus::Waiting);
    let f = flow(
        json!({"kind": "try", "catch": {"kind": "seq", "children": []},
        "body": {"kind": "loop", "counter": {"op": "path", "at": "$.i"}, "max": 1,
                 "cond": lit(json!(true)),
                 "body": {"kind": "call", "flow": "sub", "in": lit(json!({})),
                          "out": {"op": "path", "at": "$.got"}}}}),
    );
    let mut sim = Sim::new(f, json!({}));
    let sub: Flow = serde_json::from_value(json!({"name": "sub", "body": wait("inner")})).unwrap();
    sim.called.insert("sub".into(), sub);
    let ev = sim.tick();
    for key in [
        "/body",
        "/body/body",
        "/body/body/body#0",
        "/body/body/body#0>sub/body",
    ] {
        assert_eq!(ev.nodes[key].status, NodeStatus::Waiting, "{key}: {ev:?}");
    }
}
