//! `input_schema` lint tests: a step's literal `in` is checked against its
//! agent's `input_schema` as the engine checks a task's input, and an `in`
//! computed at run time is not.

use serde_json::{Value, json};

use super::*;
use crate::ir::Flow;
use crate::lint::{Known, Problem, lint};

/// `typed` wants `{files: [string, …]}` (at most 3); `plain` has no schema.
fn known() -> Known {
    let typed = InputSchema::compile(&json!({
        "type": "object",
        "required": ["files"],
        "properties": {
            "files": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
        }
    }))
    .unwrap();
    Known {
        agents: ["typed", "plain"].map(String::from).into(),
        input_schemas: [("typed".to_owned(), typed)].into(),
        ..Known::default()
    }
}

fn step(agent: &str, input: Value) -> Value {
    json!({"kind": "step", "ref": agent, "in": input, "out": {"op": "path", "at": "$.out"}})
}

fn lit(value: Value) -> Value {
    json!({"op": "lit", "value": value})
}

fn problems(body: Value) -> Vec<Problem> {
    let flow: Flow = serde_json::from_value(json!({"name": "f", "body": body})).unwrap();
    lint(&flow, &known())
}

#[test]
fn a_literal_input_the_schema_accepts_passes() {
    let body = step("typed", lit(json!({"files": ["a.rs", "b.rs"]})));
    assert_eq!(problems(body), []);
}

#[test]
fn a_literal_input_missing_a_required_field_is_refused_at_the_input() {
    let found = problems(step("typed", lit(json!({"other": 1}))));
    assert_eq!(found.len(), 1, "{found:?}");
    let problem = &found[0];
    assert_eq!(
        (problem.pointer.as_str(), problem.code),
        ("/body/in/value", "input_schema")
    );
    assert!(problem.message.contains("agent `typed`"), "{problem:?}");
    assert!(problem.message.contains("at `/`"), "{problem:?}");
    assert!(
        problem.message.contains("\"files\" is a required property"),
        "{problem:?}"
    );
    assert!(
        problem.hint.contains("\"required\":[\"files\"]"),
        "{problem:?}"
    );
}

#[test]
fn a_nested_value_is_named_by_its_pointer_in_a_step_anywhere_in_the_graph() {
    let body = json!({"kind": "seq", "children": [
        {"kind": "fanout", "items": lit(json!([1, 2])), "bind": {"op": "path", "at": "$.n"},
         "concurrency": 2, "join": "all", "out": {"op": "path", "at": "$.all"},
         "body": step("typed", lit(json!({"files": ["a.rs", 7]})))}
    ]});
    let found = problems(body);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].pointer.as_str(), found[0].code),
        ("/body/children/0/body/in/value/files/1", "input_schema")
    );
    assert!(found[0].message.contains("at `/files/1`"), "{found:?}");
    assert!(found[0].message.contains("\"string\""), "{found:?}");
}

#[test]
fn every_refusal_of_one_input_is_reported_up_to_a_bound() {
    let found = problems(step("typed", lit(json!({"files": [1, 2, 3]}))));
    let pointers: Vec<&str> = found.iter().map(|p| p.pointer.as_str()).collect();
    assert_eq!(
        pointers,
        [
            "/body/in/value/files/0",
            "/body/in/value/files/1",
            "/body/in/value/files/2"
        ]
    );
    let many: Vec<u32> = (0..40).collect();
    let found = problems(step("typed", lit(json!({"files": many}))));
    assert_eq!(found.len(), MAX_REFUSALS, "{found:?}");
    assert!(found.iter().all(|p| p.code == "input_schema"));
}

#[test]
fn a_string_literal_is_the_prompt_and_the_missing_input_is_checked_as_null() {
    let found = problems(step("typed", lit(json!("fix the parser"))));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].pointer.as_str(), found[0].code),
        ("/body/in", "input_schema")
    );
    assert!(found[0].message.contains("checked as null"), "{found:?}");
    assert!(
        found[0].message.contains("null is not of type"),
        "{found:?}"
    );

    let nullable = InputSchema::compile(&json!({"type": ["object", "null"]})).unwrap();
    let known = Known {
        agents: ["typed".to_owned()].into(),
        input_schemas: [("typed".to_owned(), nullable)].into(),
        ..Known::default()
    };
    let flow: Flow = serde_json::from_value(
        json!({"name": "f", "body": step("typed", lit(json!("fix the parser")))}),
    )
    .unwrap();
    assert_eq!(lint(&flow, &known), []);
}

#[test]
fn an_input_computed_at_run_time_is_not_checked() {
    let body = json!({"kind": "seq", "children": [
        {"kind": "let", "at": {"op": "path", "at": "$.x"}, "value": lit(json!(1))},
        step("typed", json!({"op": "path", "at": "$.x"})),
        step("typed", json!({"op": "eq", "lhs": lit(json!(1)), "rhs": lit(json!(2))}))
    ]});
    assert_eq!(problems(body), []);
}

#[test]
fn a_template_is_a_prompt_and_its_missing_input_is_checked_as_null() {
    let body = json!({"kind": "seq", "children": [
        {"kind": "let", "at": {"op": "path", "at": "$.x"}, "value": lit(json!(1))},
        step("typed", json!({"op": "template", "text": "files {{ x }}"})),
        step("plain", json!({"op": "template", "text": "files {{ x }}"}))
    ]});
    let found = problems(body);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pointer, "/body/children/1/in");
    assert!(found[0].message.contains("checked as null"), "{found:?}");
}

#[test]
fn a_literal_is_checked_as_written_braces_included() {
    // A literal is never rendered: the task gets `{{ x }}` as text.
    let fits = step("typed", lit(json!({"files": ["{{ x }}"]})));
    assert_eq!(problems(fits), []);
    let found = problems(step("typed", lit(json!({"files": "{{ x }}"}))));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pointer, "/body/in/value/files");
}

#[test]
fn an_agent_without_a_schema_or_an_unknown_one_is_not_checked_for_input() {
    assert_eq!(problems(step("plain", lit(json!(42)))), []);
    let found = problems(step("nobody", lit(json!(42))));
    let codes: Vec<&str> = found.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["unknown_agent"]);
}

#[test]
fn a_long_reason_and_a_long_schema_are_cut() {
    let found = problems(step("typed", lit(json!({"files": "x".repeat(5000)}))));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].message.ends_with('…'), "{:?}", found[0].message);
    assert!(found[0].message.chars().count() < MAX_REASON_CHARS + 100);

    let wide =
        InputSchema::compile(&json!({"description": "d".repeat(2000), "type": "object"})).unwrap();
    let known = Known {
        agents: ["typed".to_owned()].into(),
        input_schemas: [("typed".to_owned(), wide)].into(),
        ..Known::default()
    };
    let flow: Flow =
        serde_json::from_value(json!({"name": "f", "body": step("typed", lit(json!(1)))})).unwrap();
    let found = lint(&flow, &known);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].hint.chars().count() < MAX_SCHEMA_CHARS + 100);
    assert!(found[0].hint.ends_with('…'), "{:?}", found[0].hint);
}

#[test]
fn what_is_not_a_schema_does_not_compile() {
    assert!(InputSchema::compile(&json!("string")).is_err());
    assert!(InputSchema::compile(&json!({"type": "no-such-type"})).is_err());
    let remote = json!({"$ref": "https://example.com/schema.json"});
    assert!(InputSchema::compile(&remote).is_err(), "nothing is fetched");
    assert!(InputSchema::compile(&json!(true)).is_ok());
}
