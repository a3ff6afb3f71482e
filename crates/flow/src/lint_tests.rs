//! Lint tests: each problem a model can make is reported with its pointer,
//! all of them at once, and a sound flow has none.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::*;

fn known() -> Known {
    Known {
        agents: ["coder", "tester", "judge", "merge"]
            .map(String::from)
            .into(),
        merge_agents: Some(["merge".to_owned()].into()),
        worktree_agents: None,
        input_schemas: BTreeMap::new(),
        flows: ["ship"].map(String::from).into(),
        caps: Limits {
            max_steps: 10_000,
            max_fanout: 1_000,
            max_depth: 64,
        },
    }
}

fn run(flow: Value) -> Vec<(String, &'static str)> {
    let flow: Flow = serde_json::from_value(flow).unwrap();
    lint(&flow, &known())
        .into_iter()
        .map(|p| (p.pointer, p.code))
        .collect()
}

fn path(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

#[test]
fn a_sound_fanout_judge_flow_has_no_problem() {
    let flow = json!({"name": "best-of-3",
    "input_schema": {"type": "object", "required": ["task"]},
    "output": path("$.verdict"),
    "body": {"kind": "seq", "children": [
        {"kind": "fanout", "items": {"op": "lit", "value": [1, 2, 3]}, "bind": path("$.n"),
         "concurrency": 3, "join": "all_settled", "out": path("$.tries"),
         "body": {"kind": "step", "ref": "coder", "name": "try",
            "in": {"op": "template", "text": "{{ input.task }} (try {{ n }})"}, "out": path("$.change")}},
        {"kind": "step", "ref": "judge", "in": {"op": "select", "at": "$.tries[*].value.change"},
         "out": path("$.verdict")}
    ]}});
    assert_eq!(run(flow), []);
}

#[test]
fn every_problem_is_reported_at_once_with_its_pointer() {
    let flow = json!({"name": "Bad Name",
    "limits": {"max_steps": 20_000},
    "body": {"kind": "seq", "children": [
        {"kind": "step", "ref": "codr", "in": path("$.plan"), "out": path("$.a[0]")},
        {"kind": "loop", "counter": path("$.i"), "cond": {"op": "lit", "value": true},
         "body": {"kind": "step", "ref": "tester", "in": path("$.input"), "out": path("$.t")}},
        {"kind": "fanout", "items": {"op": "lit", "value": "x"}, "bind": path("$.item"),
         "join": "all", "out": path("$.all"),
         "body": {"kind": "step", "ref": "tester", "in": path("$.item"), "out": path("$.r")}},
        {"kind": "branch", "cond": {"op": "lit", "value": true},
         "then": {"kind": "seq", "children": []}, "else": {"kind": "seq", "children": []}},
        {"kind": "call", "flow": "Bad Name", "in": path("$.input"), "out": path("$.me")},
        {"kind": "call", "flow": "nope", "in": {"op": "path", "at": "$.x[?"}, "out": path("$.c")},
        {"kind": "wait", "name": "w", "schema": {"type": 12}, "out": path("$.w")},
        {"kind": "wait", "name": "w", "out": path("$.w2")}
    ]}});
    let codes = run(flow);
    let expected = [
        ("/name", "bad_name"),
        ("/limits/max_steps", "limit_too_high"),
        ("/body/children/0/ref", "unknown_agent"),
        ("/body/children/0/in", "unbound_variable"),
        ("/body/children/0/out", "bad_write_path"),
        ("/body/children/1/max", "loop_without_max"),
        ("/body/children/2/items", "not_an_array"),
        ("/body/children/2/concurrency", "unbounded_fanout"),
        ("/body/children/3/else", "unreachable"),
        ("/body/children/4/flow", "recursive_call"),
        ("/body/children/5/flow", "unknown_flow"),
        ("/body/children/5/in", "bad_expression"),
        ("/body/children/6/schema", "bad_schema"),
        ("/body/children/7/name", "duplicate_name"),
    ];
    for (pointer, code) in expected {
        assert!(
            codes.contains(&(pointer.to_owned(), code)),
            "{code} at {pointer} missing from {codes:#?}"
        );
    }
    assert_eq!(codes.len(), expected.len(), "{codes:#?}");
}

#[test]
fn a_variable_bound_on_one_side_of_a_branch_or_in_a_try_body_is_unbound_after() {
    let flow = json!({"name": "scopes", "body": {"kind": "seq", "children": [
        {"kind": "branch", "cond": {"op": "exists", "at": "$.input.x"},
         "then": {"kind": "let", "at": path("$.both"), "value": {"op": "lit", "value": 1}},
         "else": {"kind": "seq", "children": [
            {"kind": "let", "at": path("$.both"), "value": {"op": "lit", "value": 2}},
            {"kind": "let", "at": path("$.one"), "value": {"op": "lit", "value": 3}}]}},
        {"kind": "try",
         "body": {"kind": "let", "at": path("$.tried"), "value": {"op": "lit", "value": 1}},
         "catch": {"kind": "let", "at": path("$.caught"), "value": path("$.err")},
         "err_at": path("$.err")},
        {"kind": "let", "at": path("$.out"),
         "value": {"op": "template", "text": "{{ both }} {{ one }} {{ tried }}"}}
    ]}});
    let codes = run(flow);
    assert_eq!(
        codes,
        vec![("/body/children/2/value".to_owned(), "unbound_variable"); 2],
        "`one` and `tried` are unbound; `both` and `err` are bound"
    );
}

#[test]
fn depth_width_and_steps_are_bounded_before_a_run() {
    let mut deep = json!({"kind": "seq", "children": []});
    for _ in 0..40 {
        deep = json!({"kind": "seq", "children": [deep]});
    }
    let codes = run(json!({"name": "deep", "body": deep}));
    assert_eq!(
        codes,
        [("/body".to_owned() + &"/children/0".repeat(32), "too_deep")]
    );

    let wide = json!({"name": "wide", "body": {"kind": "fanout",
        "items": {"op": "lit", "value": vec![0; 101]}, "bind": path("$.i"), "concurrency": 4,
        "join": "all", "out": path("$.o"),
        "body": {"kind": "step", "ref": "coder", "in": path("$.i"), "out": path("$.r")}}});
    assert_eq!(run(wide), [("/body/items".to_owned(), "fanout_too_wide")]);

    let many = json!({"name": "many", "body": {"kind": "loop", "counter": path("$.i"),
        "cond": {"op": "lt", "lhs": path("$.i"), "rhs": {"op": "lit", "value": 5000}}, "max": 5000,
        "body": {"kind": "step", "ref": "coder", "in": path("$.i"), "out": path("$.r")}}});
    assert_eq!(run(many), [("/body".to_owned(), "too_many_steps")]);
}

#[test]
fn budgets_must_set_a_positive_limit_and_continue_reads_a_bound_variable() {
    let flow = json!({"name": "b", "budget": {"max_cost_usd": 0.0},
    "body": {"kind": "seq", "children": [
        {"kind": "fanout", "items": {"op": "lit", "value": [1]}, "bind": path("$.n"),
         "concurrency": 1, "join": "all", "out": path("$.all"), "budget": {},
         "body": {"kind": "step", "ref": "coder", "in": path("$.n"), "out": path("$.r"),
                  "session": path("$.s")}},
        {"kind": "step", "ref": "coder", "in": {"op": "lit", "value": "fix"},
         "out": path("$.fixed"), "continue": path("$.nobody")},
        {"kind": "fanout", "items": {"op": "lit", "value": [1]}, "bind": path("$.m"),
         "concurrency": 1, "join": "all", "out": path("$.more"),
         "budget": {"max_tokens": 0}, "body": {"kind": "let", "at": path("$.x"), "value": path("$.m")}}
    ]}});
    assert_eq!(
        run(flow),
        vec![
            ("/budget/max_cost_usd".to_owned(), "bad_budget"),
            ("/body/children/0/budget".to_owned(), "bad_budget"),
            ("/body/children/1/continue".to_owned(), "unbound_variable"),
            (
                "/body/children/2/budget/max_tokens".to_owned(),
                "bad_budget"
            ),
        ]
    );
}

#[test]
fn a_merge_node_names_known_agents_and_a_judge_only_for_pick_best() {
    let node = |strategy: &str, extra: Value| {
        let mut n = json!({"kind": "merge", "ref": "merger", "strategy": strategy,
            "branches": {"op": "lit", "value": ["a"]}, "out": path("$.m")});
        for (k, v) in extra.as_object().unwrap() {
            n[k] = v.clone();
        }
        n
    };
    let flow = json!({"name": "m", "body": {"kind": "seq", "children": [
        node("pick_best", json!({})),
        node("sequence", json!({"judge": "judge", "on_conflict": "resolver"})),
        node("pick_best", json!({"judge": "judge", "on_conflict": "coder"}))]}});
    assert_eq!(
        run(flow),
        vec![
            ("/body/children/0/ref".to_owned(), "unknown_agent"),
            ("/body/children/0/judge".to_owned(), "missing_judge"),
            ("/body/children/1/ref".to_owned(), "unknown_agent"),
            ("/body/children/1/on_conflict".to_owned(), "unknown_agent"),
            ("/body/children/1/judge".to_owned(), "unused_judge"),
            ("/body/children/2/ref".to_owned(), "unknown_agent"),
        ]
    );
}

#[test]
fn a_merge_node_takes_a_steps_retry_and_counts_its_rounds() {
    let merge = |extra: Value, max_steps: u32| {
        let mut flow = json!({"name": "m", "limits": {"max_steps": max_steps},
            "body": {"kind": "merge", "ref": "merge", "strategy": "sequence",
                     "on_conflict": "coder", "branches": {"op": "lit", "value": ["a", "b", "c"]},
                     "out": path("$.m")}});
        for (k, v) in extra.as_object().unwrap() {
            flow["body"][k] = v.clone();
        }
        run(flow)
    };
    // Three rounds of a merge and a resolve, each step tried twice.
    let retry = json!({"retry": {"attempts": 2, "backoff_secs": 1}, "timeout_secs": 60});
    assert_eq!(merge(retry.clone(), 12), []);
    assert_eq!(merge(retry, 11), [("/body".to_owned(), "too_many_steps")]);
    assert_eq!(
        merge(json!({"retry": {"attempts": 0}}), 6),
        [("/body/retry/attempts".to_owned(), "bad_retry")]
    );
    // Three branches: at most three rounds of a merge and a resolve.
    assert_eq!(
        merge(json!({}), 5),
        [("/body".to_owned(), "too_many_steps")]
    );
    // Without a resolver there is one round.
    assert_eq!(merge(json!({"on_conflict": null}), 1), []);
}

#[test]
fn a_merge_nodes_resolver_works_in_a_worktree_when_that_is_known() {
    let flow: Flow = serde_json::from_value(json!({"name": "m", "body": {"kind": "merge",
        "ref": "merge", "strategy": "sequence", "on_conflict": "tester",
        "branches": {"op": "lit", "value": ["a"]}, "out": path("$.m")}}))
    .unwrap();
    assert_eq!(lint(&flow, &known()), [], "unknown worktrees: any agent");
    let coders = Known {
        worktree_agents: Some(["coder".to_owned()].into()),
        ..known()
    };
    let problems = lint(&flow, &coders);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].pointer.as_str(), problems[0].code),
        ("/body/on_conflict", "no_worktree")
    );
    assert!(
        problems[0]
            .message
            .contains("`tester` works in no worktree")
    );
    let tested = Known {
        worktree_agents: Some(["tester".to_owned()].into()),
        ..known()
    };
    assert_eq!(lint(&flow, &tested), []);
}

#[test]
fn a_merge_node_names_a_merge_agent() {
    let merge = |agent: &str| {
        json!({"name": "m", "body": {"kind": "merge", "ref": agent, "strategy": "sequence",
            "branches": {"op": "lit", "value": ["a"]}, "out": path("$.m")}})
    };
    assert_eq!(run(merge("merge")), []);
    let flow: Flow = serde_json::from_value(merge("coder")).unwrap();
    let problems = lint(&flow, &known());
    assert_eq!(
        problems,
        [Problem {
            pointer: "/body/ref".to_owned(),
            code: "not_a_merge_agent",
            message: "`coder` is not a merge agent (`kind = \"merge\"`)".to_owned(),
            hint: "use a merge agent: merge".to_owned(),
        }]
    );
    // An unknown agent is only that; without merge agents the hint says
    // how to configure one; with the kinds unknown, any agent goes.
    assert_eq!(
        run(merge("nobody")),
        [("/body/ref".to_owned(), "unknown_agent")]
    );
    let none = Known {
        merge_agents: Some(BTreeSet::new()),
        ..known()
    };
    let problems = lint(&flow, &none);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].hint.contains("kind = \"merge\""),
        "{problems:?}"
    );
    let kinds_unknown = Known {
        merge_agents: None,
        ..known()
    };
    assert_eq!(lint(&flow, &kinds_unknown), []);
}

#[test]
fn a_loop_max_past_the_bound_is_refused_and_step_counts_saturate() {
    let looped = |max: u32, body: Value| {
        json!({"kind": "loop", "counter": path("$.n"), "max": max,
            "cond": {"op": "lit", "value": true}, "body": body})
    };
    let step = json!({"kind": "step", "ref": "coder", "in": {"op": "lit", "value": "x"},
        "out": path("$.r")});
    let problems = run(json!({"name": "t", "body": looped(10_001, step.clone())}));
    assert!(
        problems.contains(&("/body/max".into(), "limit_too_high")),
        "{problems:?}"
    );
    // Five loops at the bound (10^20 steps, past u64::MAX) and one step
    // more: the count saturates instead of wrapping to a small number.
    let nested = looped(
        10_000,
        looped(
            10_000,
            looped(10_000, looped(10_000, looped(10_000, step.clone()))),
        ),
    );
    let problems = run(json!({"name": "t", "body": {"kind": "seq", "children": [nested, step]}}));
    assert!(
        problems.iter().any(|(_, code)| *code == "too_many_steps"),
        "{problems:?}"
    );
}

#[test]
fn a_template_may_call_the_allowed_functions_without_binding_them() {
    let flow = json!({"name": "f", "body": {"kind": "seq", "children": [
        {"kind": "let", "at": path("$.a"),
         "value": {"op": "template", "text": "{% for i in range(3) %}{{ i }}{% endfor %}"}},
        {"kind": "let", "at": path("$.b"),
         "value": {"op": "template", "text": "{{ dict(x=1).x }} {{ nobody }}"}}
    ]}});
    assert_eq!(
        run(flow),
        [("/body/children/1/value".to_owned(), "unbound_variable")],
        "`range` and `dict` are functions; `nobody` is unbound"
    );
}

#[test]
fn a_loop_binds_its_body_writes_after_it_only_when_the_body_surely_runs() {
    let looped = |cond: Value, max: u32| {
        json!({"name": "l", "body": {"kind": "seq", "children": [
            {"kind": "loop", "counter": path("$.i"), "cond": cond, "max": max,
             "body": {"kind": "let", "at": path("$.x"), "value": path("$.i")}},
            {"kind": "let", "at": path("$.y"), "value": {"op": "eq",
                "lhs": path("$.x"), "rhs": path("$.i")}}
        ]}})
    };
    let lt =
        |bound: i64| json!({"op": "lt", "lhs": path("$.i"), "rhs": {"op": "lit", "value": bound}});
    let unbound = [("/body/children/1/value".to_owned(), "unbound_variable")];
    // The condition holds at the first test: the body runs.
    assert_eq!(run(looped(json!({"op": "lit", "value": true}), 3)), []);
    assert_eq!(run(looped(lt(3), 3)), []);
    // It may not: the counter alone is bound after the loop.
    assert_eq!(
        run(looped(json!({"op": "lit", "value": false}), 3)),
        unbound
    );
    assert_eq!(run(looped(lt(0), 3)), unbound);
    assert_eq!(
        run(looped(json!({"op": "exists", "at": "$.input.go"}), 3)),
        unbound
    );
    let reads_another = json!({"op": "and", "args": [lt(3), {"op": "not",
        "arg": {"op": "exists", "at": "$.input.stop"}}]});
    assert_eq!(run(looped(reads_another, 3)), unbound);
    let whole_context = json!({"op": "not", "arg": {"op": "exists", "at": "$..stop"}});
    assert_eq!(run(looped(whole_context, 3)), unbound);
}

fn call(flow: &str) -> Value {
    json!({"kind": "call", "flow": flow, "in": path("$.input"), "out": path("$.r")})
}

fn named(name: &str, body: Value) -> Flow {
    serde_json::from_value(json!({"name": name, "body": body})).unwrap()
}

fn run_calling(flow: Value, callees: &[Flow]) -> Vec<(String, &'static str, String)> {
    let flow: Flow = serde_json::from_value(flow).unwrap();
    let callees: BTreeMap<String, Flow> = callees
        .iter()
        .map(|f| (f.name.clone(), f.clone()))
        .collect();
    let known = Known {
        flows: callees.keys().cloned().collect(),
        ..known()
    };
    lint_calling(&flow, &known, &callees)
        .into_iter()
        .map(|p| (p.pointer, p.code, p.message))
        .collect()
}

#[test]
fn a_call_counts_the_steps_of_the_flow_it_calls() {
    let step = json!({"kind": "step", "ref": "coder", "in": path("$.input"), "out": path("$.o")});
    let hundred = named(
        "hundred",
        json!({"kind": "loop", "counter": path("$.i"), "max": 100,
        "cond": {"op": "lit", "value": true}, "body": step}),
    );
    let caller = json!({"name": "caller", "body": {"kind": "loop", "counter": path("$.n"),
        "max": 100, "cond": {"op": "lit", "value": true}, "body": call("hundred")}});
    let problems = run_calling(caller.clone(), std::slice::from_ref(&hundred));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].0.as_str(), problems[0].1),
        ("/body", "too_many_steps")
    );
    assert!(problems[0].2.contains("10000 steps"), "{problems:?}");
    // Through a flow between, and within the limit.
    let middle = named("middle", call("hundred"));
    let fits = json!({"name": "fits", "body": {"kind": "seq", "children": [call("middle")]}});
    assert_eq!(run_calling(fits, &[middle, hundred.clone()]), []);
    // Without the called flows, a call counts as one step.
    let known = Known {
        flows: ["hundred".to_owned()].into(),
        ..known()
    };
    assert_eq!(lint(&serde_json::from_value(caller).unwrap(), &known), []);
}

#[test]
fn a_call_that_leads_into_a_cycle_of_calls_is_a_recursive_call() {
    let ping = named("ping", call("pong"));
    let pong = named("pong", call("ping"));
    let flow = json!({"name": "ping", "body": {"kind": "seq", "children": [
        {"kind": "let", "at": path("$.x"), "value": {"op": "lit", "value": 1}},
        call("pong")]}});
    let problems = run_calling(flow, &[ping.clone(), pong.clone()]);
    assert_eq!(
        problems,
        [(
            "/body/children/1/flow".to_owned(),
            "recursive_call",
            "calling `pong` leads to a cycle of calls (pong → ping → pong)".to_owned()
        )]
    );
    // A cycle further down, not through the caller, is found too.
    let other = json!({"name": "other", "body": call("ping")});
    let problems = run_calling(other, &[ping, pong]);
    assert_eq!(
        problems
            .iter()
            .map(|(p, c, _)| (p.as_str(), *c))
            .collect::<Vec<_>>(),
        [("/body/flow", "recursive_call")]
    );
}

fn step_with(extra: Value) -> Value {
    let mut step = json!({"kind": "step", "ref": "coder", "in": {"op": "lit", "value": "x"},
        "out": path("$.r")});
    for (k, v) in extra.as_object().unwrap() {
        step[k] = v.clone();
    }
    step
}

#[test]
fn a_timeout_outside_a_tasks_policy_bounds_is_refused_with_its_range() {
    let flow = json!({"name": "t", "body": {"kind": "seq", "children": [
        step_with(json!({"timeout_secs": 0})),
        step_with(json!({"queue_timeout_secs": 0})),
        step_with(json!({"timeout_secs": 99_999_999})),
        step_with(json!({"timeout_secs": 1, "queue_timeout_secs": 604_800})),
        {"kind": "merge", "ref": "merge", "strategy": "sequence", "timeout_secs": 0,
         "branches": {"op": "lit", "value": ["a"]}, "out": path("$.m")}
    ]}});
    let flow: Flow = serde_json::from_value(flow).unwrap();
    let problems: Vec<(String, &str, String)> = lint(&flow, &known())
        .into_iter()
        .map(|p| (p.pointer, p.code, p.message))
        .collect();
    let expected = [
        ("/body/children/0/timeout_secs", "timeout_secs is 0"),
        (
            "/body/children/1/queue_timeout_secs",
            "queue_timeout_secs is 0",
        ),
        ("/body/children/2/timeout_secs", "timeout_secs is 99999999"),
        ("/body/children/4/timeout_secs", "timeout_secs is 0"),
    ]
    .map(|(pointer, what)| {
        (
            pointer.to_owned(),
            "bad_timeout",
            format!("{what}, not 1 to 604800"),
        )
    });
    assert_eq!(problems, expected);
}

#[test]
fn a_steps_retry_counts_each_try_against_max_steps() {
    let flaky = |attempts: u32, max_steps: u32| {
        run(json!({"name": "t", "limits": {"max_steps": max_steps},
            "body": step_with(json!({"name": "flaky", "retry": {"attempts": attempts}}))}))
    };
    let over = [("/body".to_owned(), "too_many_steps")];
    assert_eq!(flaky(3, 2), over);
    assert_eq!(flaky(2, 2), []);
    // A loop of a retried step: its iterations times its tries.
    let looped = |max_steps: u32| {
        run(json!({"name": "t", "limits": {"max_steps": max_steps},
            "body": {"kind": "loop", "counter": path("$.i"), "max": 4,
                     "cond": {"op": "lit", "value": true},
                     "body": step_with(json!({"retry": {"attempts": 3}}))}}))
    };
    assert_eq!(looped(12), []);
    assert_eq!(looped(11), over);
}

/// A branch writing `$.maybe` on one side only, then a node reading it
/// through `value`.
fn maybe_then(value: Value) -> Value {
    json!({"name": "t", "body": {"kind": "seq", "children": [
        {"kind": "branch", "cond": {"op": "exists", "at": "$.input.go"},
         "then": {"kind": "let", "at": path("$.maybe"), "value": {"op": "lit", "value": 1}},
         "else": {"kind": "seq", "children": []}},
        {"kind": "let", "at": path("$.out"), "value": value}
    ]}})
}

#[test]
fn exists_and_is_defined_need_a_variable_written_somewhere_not_on_every_path() {
    let template = |text: &str| json!({"op": "template", "text": text});
    let unbound = [("/body/children/1/value".to_owned(), "unbound_variable")];
    assert_eq!(
        run(maybe_then(json!({"op": "exists", "at": "$.maybe"}))),
        []
    );
    assert_eq!(
        run(maybe_then(
            json!({"op": "not", "arg": {"op": "exists", "at": "$.maybe.x"}})
        )),
        []
    );
    assert_eq!(
        run(maybe_then(template(
            "{% if maybe is defined %}{{ maybe }}{% endif %}"
        ))),
        []
    );
    assert_eq!(run(maybe_then(template("{{ maybe is undefined }}"))), []);
    // Read for its value it must be bound on every path.
    assert_eq!(run(maybe_then(path("$.maybe"))), unbound);
    assert_eq!(run(maybe_then(template("{{ maybe }}"))), unbound);
    // A name no node writes is a typo, tested or read.
    let flow: Flow =
        serde_json::from_value(maybe_then(json!({"op": "exists", "at": "$.mabye"}))).unwrap();
    let problems = lint(&flow, &known());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].code, problems[0].message.as_str()),
        (
            "unbound_variable",
            "`mabye` is tested for, but no node writes it"
        )
    );
    assert_eq!(problems[0].hint, "written in this flow: input, maybe, out");
    assert_eq!(
        run(maybe_then(template(
            "{% if mabye is defined %}x{% endif %}"
        ))),
        unbound
    );
    // What an import seeds from the input: every variable read before it
    // is bound on every path, tested ones included.
    let flow: Flow =
        serde_json::from_value(maybe_then(json!({"op": "exists", "at": "$.maybe"}))).unwrap();
    assert_eq!(
        unbound_variables(&flow),
        BTreeSet::from(["maybe".to_owned()])
    );
}

#[test]
fn a_variable_written_later_in_a_loop_may_be_tested_earlier() {
    let flow = json!({"name": "t", "body": {"kind": "loop", "counter": path("$.i"), "max": 3,
        "cond": {"op": "not", "arg": {"op": "exists", "at": "$.done"}},
        "body": {"kind": "let", "at": path("$.done"), "value": {"op": "lit", "value": true}}}});
    assert_eq!(run(flow), []);
}

#[test]
fn a_write_target_that_is_not_a_path_names_its_op() {
    let flow = json!({"name": "t", "body": {"kind": "let",
        "at": {"op": "lit", "value": "x"}, "value": {"op": "lit", "value": 1}}});
    let flow: Flow = serde_json::from_value(flow).unwrap();
    let problems = lint(&flow, &known());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].pointer.as_str(), problems[0].code),
        ("/body/at", "bad_write_path")
    );
    assert_eq!(
        problems[0].message,
        r#"a write target must be a "path", not a "lit""#
    );
}

/// A `loop` of `max` iterations running `body`, whose condition holds.
fn endless(counter: &str, max: u32, body: Value) -> Value {
    json!({"kind": "loop", "counter": path(counter), "max": max,
        "cond": {"op": "lit", "value": true}, "body": body})
}

fn let_x() -> Value {
    json!({"kind": "let", "at": path("$.x"), "value": {"op": "lit", "value": 1}})
}

#[test]
fn a_graph_past_the_node_instance_bound_is_refused() {
    let nested = endless("$.i", 10_000, endless("$.j", 10_000, let_x()));
    let flow: Flow = serde_json::from_value(json!({"name": "t", "body": nested})).unwrap();
    let problems = lint(&flow, &known());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].pointer.as_str(), problems[0].code),
        ("/body", "too_many_nodes")
    );
    assert!(
        problems[0].message.contains("100010001 node instances"),
        "{problems:?}"
    );
}

#[test]
fn the_node_instance_bound_is_the_one_a_run_meets() {
    use crate::run::{Journal, Progress, evaluate};
    // A loop of 9 999 iterations of 9 lets (1 + 9 999 × 10 instances) in a
    // seq with `extra` lets more: 99 992 + extra instances.
    let flow = |extra: usize| -> Flow {
        let body = json!({"kind": "seq", "children": vec![let_x(); 9]});
        let mut children = vec![endless("$.i", 9_999, body)];
        children.extend(std::iter::repeat_n(let_x(), extra));
        serde_json::from_value(json!({"name": "t",
            "body": {"kind": "seq", "children": children}}))
        .unwrap()
    };
    let evaluated =
        |flow: &Flow| evaluate(flow, &BTreeMap::new(), &json!({}), &Journal::default()).progress;
    let at_bound = flow(8);
    assert_eq!(lint(&at_bound, &known()), []);
    assert!(
        matches!(evaluated(&at_bound), Progress::Passed { .. }),
        "{:?}",
        evaluated(&at_bound)
    );
    let past = flow(9);
    let codes: Vec<&str> = lint(&past, &known()).iter().map(|p| p.code).collect();
    assert_eq!(codes, ["too_many_nodes"]);
    match evaluated(&past) {
        Progress::Failed { reason } => assert!(reason.contains("node instances"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_call_counts_the_node_instances_of_the_flow_it_calls() {
    // 50 001 instances each: one call fits, two do not.
    let big = named("big", endless("$.i", 10_000, endless("$.j", 4, let_x())));
    let calls = |n: usize| json!({"name": "caller", "body": {"kind": "seq", "children": vec![call("big"); n]}});
    assert_eq!(run_calling(calls(1), std::slice::from_ref(&big)), []);
    let problems = run_calling(calls(2), std::slice::from_ref(&big));
    let codes: Vec<&str> = problems.iter().map(|(_, code, _)| *code).collect();
    assert_eq!(codes, ["too_many_nodes"], "{problems:?}");
}
