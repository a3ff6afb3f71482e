//! Expression tests: selection by RFC 9535 JSONPath, tests, rendering and
//! their errors.

use serde_json::{Value, json};

use super::*;

fn ctx() -> Value {
    json!({
        "input": {"topic": "auth", "n": 3},
        "results": [
            {"branch": "a", "ok": true, "score": 7},
            {"branch": "b", "ok": false, "score": 9},
            {"branch": "c", "ok": true, "score": 4}
        ]
    })
}

fn expr(value: Value) -> Expr {
    serde_json::from_value(value).unwrap()
}

#[test]
fn path_wants_exactly_one_value_and_select_takes_all() {
    let c = ctx();
    let one = expr(json!({"op": "path", "at": "$.input.topic"}));
    assert_eq!(one.eval(&c).unwrap(), json!("auth"));
    let passed = expr(json!({"op": "select", "at": "$.results[?@.ok == true].branch"}));
    assert_eq!(passed.eval(&c).unwrap(), json!(["a", "c"]));
    let many = expr(json!({"op": "path", "at": "$.results[*].branch"}));
    assert_eq!(
        many.eval(&c),
        Err(ExprError::NotOne {
            at: "$.results[*].branch".into(),
            count: 3
        })
    );
    let none = expr(json!({"op": "path", "at": "$.missing"}));
    assert!(matches!(none.eval(&c), Err(ExprError::NotFound { .. })));
    let exists = expr(json!({"op": "exists", "at": "$.results[?@.score > 8]"}));
    assert_eq!(exists.eval(&c).unwrap(), json!(true));
}

#[test]
fn tests_combine_and_compare() {
    let c = ctx();
    let cond = expr(json!({"op": "and", "args": [
        {"op": "eq", "lhs": {"op": "path", "at": "$.input.n"}, "rhs": {"op": "lit", "value": 3.0}},
        {"op": "not", "arg": {"op": "gt",
            "lhs": {"op": "len", "arg": {"op": "select", "at": "$.results[*]"}},
            "rhs": {"op": "lit", "value": 3}}},
        {"op": "lt", "lhs": {"op": "lit", "value": "a"}, "rhs": {"op": "path", "at": "$.input.topic"}}
    ]}));
    assert!(cond.test(&c).unwrap());
    let bad = expr(
        json!({"op": "lt", "lhs": {"op": "lit", "value": 1}, "rhs": {"op": "lit", "value": "1"}}),
    );
    assert!(matches!(
        bad.eval(&c),
        Err(ExprError::Type { op: "lt", .. })
    ));
    let not_bool = expr(json!({"op": "path", "at": "$.input.n"}));
    assert!(matches!(
        not_bool.test(&c),
        Err(ExprError::Type { op: "cond", .. })
    ));
    let or = expr(json!({"op": "or", "args": []}));
    assert_eq!(or.eval(&c).unwrap(), json!(false));
}

#[test]
fn templates_render_variables_within_their_fuel() {
    let c = ctx();
    let prompt = expr(json!({"op": "template",
        "text": "Fix {{ input.topic }}:{% for r in results if r.ok %} {{ r.branch }}{% endfor %}"}));
    assert_eq!(prompt.eval(&c).unwrap(), json!("Fix auth: a c"));
    let endless = expr(json!({"op": "template",
        "text": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"}));
    assert!(matches!(endless.eval(&c), Err(ExprError::Template(_))));
    let broken = expr(json!({"op": "template", "text": "{% for %}"}));
    assert!(matches!(broken.check(), Err(ExprError::Template(_))));
}

#[test]
fn reads_and_checks_name_every_query() {
    let e = expr(json!({"op": "and", "args": [
        {"op": "exists", "at": "$.plan"},
        {"op": "eq", "lhs": {"op": "path", "at": "$.input.x"}, "rhs": {"op": "lit", "value": 1}}
    ]}));
    assert_eq!(e.reads(), ["$.plan", "$.input.x"]);
    let bad = expr(json!({"op": "path", "at": "$.a[?"}));
    assert!(matches!(bad.check(), Err(ExprError::BadPath { .. })));
}

#[test]
fn a_path_nested_past_the_bound_is_refused_before_it_is_parsed() {
    // Thousands of parentheses would overflow the parser's stack.
    let deep = format!("$[?{}@.a{}]", "(".repeat(5_000), ")".repeat(5_000));
    let bad = expr(json!({"op": "path", "at": deep}));
    let Err(ExprError::BadPath { why, .. }) = bad.check() else {
        panic!("a deep path must be refused");
    };
    assert!(why.contains("deeper than 32"), "{why}");
    // 32 levels parse; brackets inside a quoted name do not count.
    let at_bound = format!("$[?{}@.a{}]", "(".repeat(31), ")".repeat(31));
    assert!(expr(json!({"op": "path", "at": at_bound})).check().is_ok());
    let quoted = format!("$['{}']", "(".repeat(100));
    assert!(expr(json!({"op": "path", "at": quoted})).check().is_ok());
}

#[test]
fn unknown_ops_and_fields_are_refused() {
    assert!(serde_json::from_value::<Expr>(json!({"op": "eval", "code": "1"})).is_err());
    assert!(serde_json::from_value::<Expr>(json!({"op": "lit", "value": 1, "x": 2})).is_err());
}

#[test]
fn a_path_that_descends_twice_is_refused_before_it_runs() {
    // `..*` six times over a value 61 levels deep matched 111 million
    // values; one descent matches each value at most once.
    for at in ["$..*..*", "$..a..b", "$..[?@..x]"] {
        let bad = expr(json!({"op": "path", "at": at}));
        let Err(ExprError::BadPath { why, .. }) = bad.check() else {
            panic!("{at} must be refused");
        };
        assert!(why.contains("2 descendant segments"), "{why}");
    }
    for at in ["$..x", "$.a..*", "$['..']..x", "$[?@.a == '..']"] {
        assert!(
            expr(json!({"op": "path", "at": at})).check().is_ok(),
            "{at}"
        );
    }
    let mut chain = json!(1);
    for _ in 0..60 {
        chain = json!([0, chain]);
    }
    let all = expr(json!({"op": "select", "at": "$..*"}));
    let found = all.eval(&json!({ "c": chain })).unwrap();
    assert_eq!(found.as_array().unwrap().len(), 1 + 60 * 2);
}
