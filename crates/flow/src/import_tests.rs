//! Import rules one by one: paths, expressions, loops, fan-outs, seeding
//! and the problems reported.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::expr::{parse_path, read_query};
use super::*;
use crate::run::{Journal, Progress, evaluate};

fn p(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

fn lit(value: Value) -> Value {
    json!({"op": "lit", "value": value})
}

fn assign(at: &str, value: Value) -> Value {
    json!({"kind": "assign", "at": p(at), "value": value})
}

/// Imports a bare node and runs it (no steps) with `input`.
fn result(node: Value, input: Value) -> Result<Value, String> {
    let flow = from_blueprint(&node).map_err(|p| format!("{p:?}"))?;
    match evaluate(&flow, &BTreeMap::new(), &input, &Journal::default()).progress {
        Progress::Passed { result } => Ok(result),
        Progress::Failed { reason } => Err(reason),
        other => Err(format!("{other:?}")),
    }
}

/// The value an upstream expression gives, assigned to `$.r`.
fn value_of(expr: Value, input: Value) -> Result<Value, String> {
    result(assign("$.r", expr), input).map(|ctx| ctx["r"].clone())
}

/// The value of `expr` after the variables `vars` are assigned.
fn value_with(vars: Value, expr: Value) -> Result<Value, String> {
    let mut children: Vec<Value> = vars
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| assign(&format!("$.{k}"), lit(v.clone())))
        .collect();
    children.push(assign("$.r", expr));
    result(json!({"kind": "seq", "children": children}), json!({})).map(|ctx| ctx["r"].clone())
}

fn codes(value: &Value) -> Vec<(String, &'static str)> {
    import_blueprint(value)
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.pointer, p.code))
        .collect()
}

#[test]
fn upstream_paths_parse_as_upstream_parses_them() {
    let ok: [(&str, &[&str]); 7] = [
        ("$", &[]),
        ("$.a", &["a"]),
        ("$.a.b-c.0", &["a", "b-c", "0"]),
        ("$.a[\"p.md\"]", &["a", "p.md"]),
        ("$[\"x.y\"].z", &["x.y", "z"]),
        ("$.a[\"x\"][\"y\"]", &["a", "x", "y"]),
        ("ctx.a", &["a"]),
    ];
    for (path, names) in ok {
        assert_eq!(
            parse_path(path),
            Ok(names.iter().map(|n| n.to_string()).collect()),
            "{path}"
        );
    }
    for bad in [
        "a",
        "$a",
        "$.",
        "$.a.",
        "$.a..b",
        "$.a[0]",
        "$.a[\"\"]",
        "$.a[\"x\"]b",
        "$.a[\"x",
    ] {
        assert!(parse_path(bad).is_err(), "{bad}");
    }
}

#[test]
fn reads_become_rfc_9535_queries() {
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(read_query(&names(&["a", "b_2"])), "$.a.b_2");
    assert_eq!(
        read_query(&names(&["mock-scout", "p.md", "it's", "0"])),
        "$['mock-scout']['p.md']['it\\'s']['0']"
    );
    let ctx = json!({"mock-scout": {"p.md": 7}});
    let flow = json!({"kind": "seq", "children": [
        assign("$.mock-scout", lit(ctx["mock-scout"].clone())),
        assign("$.r", p("$.mock-scout[\"p.md\"]")),
    ]});
    assert_eq!(result(flow, json!({})).unwrap()["r"], json!(7));
}

#[test]
fn lte_and_gte_keep_their_meaning() {
    let cmp = |op: &str, a: Value, b: Value| {
        value_of(json!({"op": op, "lhs": lit(a), "rhs": lit(b)}), json!({}))
    };
    assert_eq!(cmp("lte", json!(2), json!(2)), Ok(json!(true)));
    assert_eq!(cmp("lte", json!(3), json!(2)), Ok(json!(false)));
    assert_eq!(cmp("gte", json!("b"), json!("a")), Ok(json!(true)));
    assert_eq!(cmp("gte", json!(1), json!(2)), Ok(json!(false)));
    assert!(cmp("lte", json!(1), json!("a")).is_err());
}

#[test]
fn not_and_or_test_truthiness_as_upstream_does() {
    let not = |v: Value| value_of(json!({"op": "not", "arg": lit(v)}), json!({}));
    assert_eq!(not(json!(null)), Ok(json!(true)));
    assert_eq!(not(json!("text")), Ok(json!(false)));
    assert_eq!(not(json!(0)), Ok(json!(false)));
    assert_eq!(not(json!(false)), Ok(json!(true)));
    let or = json!({"op": "or", "args": [p("$.a"), p("$.b")]});
    assert_eq!(
        value_with(json!({"a": null, "b": [1]}), or.clone()),
        Ok(json!(true))
    );
    assert_eq!(
        value_with(json!({"a": null, "b": false}), or),
        Ok(json!(false))
    );
}

#[test]
fn exists_is_a_non_null_value_at_the_path() {
    let exists = |at: &str| json!({"op": "exists", "arg": p(at)});
    assert_eq!(
        value_with(json!({"v": null}), exists("$.v")),
        Ok(json!(false))
    );
    assert_eq!(value_with(json!({"v": 0}), exists("$.v")), Ok(json!(true)));
    assert_eq!(
        value_with(json!({"v": {}}), exists("$.v.nope")),
        Ok(json!(false))
    );
}

#[test]
fn in_tests_membership() {
    let vars = json!({"list": ["a", 2, {"k": 1}], "x": {"k": 1}, "y": 5});
    let member = |needle: Value, haystack: Value| {
        value_with(
            vars.clone(),
            json!({"op": "in", "needle": needle, "haystack": haystack}),
        )
    };
    assert_eq!(member(lit(json!(2)), p("$.list")), Ok(json!(true)));
    assert_eq!(member(lit(json!("z")), p("$.list")), Ok(json!(false)));
    assert_eq!(member(p("$.x"), p("$.list")), Ok(json!(true)));
    assert_eq!(member(p("$.y"), p("$.list")), Ok(json!(false)));
    assert_eq!(member(p("$.x"), lit(json!([1, {"k": 1}]))), Ok(json!(true)));
}

#[test]
fn a_loop_counts_as_upstream_and_never_tests_cond_past_max() {
    // cond reads `$.last.deep` (an error once `last` is 1) only when the
    // count allows another pass, as upstream checks `counter < max` first.
    let looped = json!({"kind": "loop", "counter": p("$.n"), "max": 2,
        "cond": {"op": "or", "args": [
            {"op": "lt", "lhs": p("$.n"), "rhs": lit(json!(2))}, p("$.last.deep")]},
        "body": assign("$.last", p("$.n"))});
    let ctx = result(looped, json!({})).unwrap();
    assert_eq!(
        (ctx["n"].clone(), ctx["last"].clone()),
        (json!(2), json!(1))
    );
    let never = json!({"kind": "loop", "counter": p("$.n"), "max": 0,
        "cond": lit(json!(true)), "body": assign("$.ran", lit(json!(true)))});
    let ctx = result(never, json!({})).unwrap();
    assert_eq!(ctx["n"], json!(0));
    assert!(ctx.get("ran").is_none());
}

#[test]
fn a_fanout_runs_all_its_branches_at_once() {
    let fanout = |items: Value| {
        let node = json!({"kind": "fanout", "items": items, "bind": p("$.it"),
            "join": "all", "out": p("$.all"), "body": assign("$.x", p("$.it"))});
        let flow = from_blueprint(&node).unwrap();
        let mut nodes = vec![&flow.body];
        while let Some(node) = nodes.pop() {
            if let Node::Fanout { concurrency, .. } = node {
                return *concurrency;
            }
            nodes.extend(node.children().into_iter().map(|(_, c)| c));
        }
        None
    };
    assert_eq!(fanout(lit(json!([1, 2, 3]))), Some(3));
    assert_eq!(fanout(p("$.input")), Some(Limits::default().max_fanout));
}

#[test]
fn variables_read_before_written_come_from_the_input_or_the_defaults() {
    let doc = json!({"id": "seeded", "default_init_ctx": {"mode": "fast"},
    "flow": {"kind": "seq", "children": [
        assign("$.r", json!({"op": "and", "args": [p("$.mode"), p("$.need"), p("$.later")]})),
        assign("$.later", lit(json!(1))),
        assign("$.echo", p("$.input")),
    ]}});
    let flow = from_blueprint(&doc).unwrap();
    assert_eq!(
        flow.input_schema,
        Some(json!({"type": "object", "required": ["input", "need"]}))
    );
    let run = |input: Value| match evaluate(&flow, &BTreeMap::new(), &input, &Journal::default())
        .progress
    {
        Progress::Passed { result } => Ok(result),
        Progress::Failed { reason } => Err(reason),
        other => Err(format!("{other:?}")),
    };
    // `later` is written after it is read: null, so `and` is false.
    let ctx = run(json!({"need": true, "input": "upstream's input"})).unwrap();
    assert_eq!(ctx["mode"], json!("fast"));
    assert_eq!(ctx["r"], json!(false));
    assert_eq!(ctx["echo"], json!("upstream's input"));
    assert_eq!(
        run(json!({"need": 1, "mode": null, "later": 2, "input": 0})).unwrap()["r"],
        json!(false)
    );
    assert_eq!(
        run(json!({"need": 1, "mode": 1, "later": 2, "input": 0})).unwrap()["r"],
        json!(true)
    );
}

#[test]
fn every_problem_is_reported_with_its_pointer() {
    let doc = json!({"id": "Bad Id", "flow": {"kind": "seq", "children": [
        assign("$.a", json!({"op": "add", "lhs": lit(json!(1)), "rhs": lit(json!(2))})),
        {"kind": "step", "ref": "x", "in": p("$.a[0]"), "out": p("$.ok"), "name": "n"},
        assign("$[\"a.b\"]", lit(json!(1))),
        {"kind": "wait", "name": "w"},
        {"kind": "fanout", "items": lit(json!([])), "bind": p("$.i"), "join": "some",
         "out": p("$.o"), "body": assign("$", lit(json!(1)))},
    ]}});
    assert_eq!(
        codes(&doc),
        [
            ("/id".to_owned(), "bad_name"),
            ("/flow/children/0/value/op".to_owned(), "unsupported_op"),
            ("/flow/children/1/name".to_owned(), "unknown_field"),
            ("/flow/children/1/in/at".to_owned(), "bad_path"),
            ("/flow/children/2/at/at".to_owned(), "bad_write_path"),
            ("/flow/children/3/kind".to_owned(), "unknown_kind"),
            ("/flow/children/4/body/at/at".to_owned(), "bad_write_path"),
            ("/flow/children/4/join".to_owned(), "bad_join"),
        ]
    );
}

#[test]
fn fields_outside_the_flow_are_listed_as_not_imported() {
    let doc = json!({"id": "ok", "schema_version": "0.1.0",
        "agents": [{"name": "w", "kind": "rust_fn", "spec": {}}],
        "strategy": {"strict_refs": true},
        "metadata": {"description": "d", "tags": ["t"]},
        "flow": {"kind": "step", "ref": "w", "in": lit(json!("go")), "out": p("$.r")}});
    let imported = import_blueprint(&doc).unwrap();
    assert_eq!(imported.flow.description.as_deref(), Some("d"));
    assert_eq!(imported.agents.iter().collect::<Vec<_>>(), ["w"]);
    let dropped: Vec<&str> = imported
        .dropped
        .iter()
        .map(|p| p.pointer.as_str())
        .collect();
    assert_eq!(dropped, ["/metadata/tags", "/agents", "/strategy"]);
    assert!(imported.dropped.iter().all(|p| p.code == "not_imported"));
    assert_eq!(
        codes(&json!({"id": "ok", "flow": {"kind": "seq", "children": []}, "typo": 1})),
        [("/typo".to_owned(), "unknown_field")]
    );
}

#[test]
fn flow_ir_0_3_let_with_a_bare_path_is_accepted() {
    let node = json!({"kind": "let", "at": "ctx.v", "value": lit(json!(5))});
    assert_eq!(result(node, json!({})).unwrap()["v"], json!(5));
}
