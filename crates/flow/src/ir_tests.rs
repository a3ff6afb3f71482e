//! IR tests: upstream Blueprint flows parse unchanged, swarmd's additions
//! parse, typos are refused, and the published JSON Schema is the one the
//! types give and accepts the examples.

use serde_json::{Value, json};

use super::*;

/// An upstream (mlua-swarm) flow body: its seven kinds and three operators.
fn upstream_body() -> Value {
    json!({"kind": "seq", "children": [
        {"kind": "assign", "at": {"op": "path", "at": "$.verdict"}, "value": {"op": "lit", "value": "blocked"}},
        {"kind": "loop", "counter": {"op": "path", "at": "$.round"},
         "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.verdict"}, "rhs": {"op": "lit", "value": "blocked"}},
         "max": 3,
         "body": {"kind": "try",
            "body": {"kind": "step", "ref": "coder", "in": {"op": "path", "at": "$.input"}, "out": {"op": "path", "at": "$.verdict"}},
            "catch": {"kind": "assign", "at": {"op": "path", "at": "$.verdict"}, "value": {"op": "lit", "value": "failed"}},
            "err_at": {"op": "path", "at": "$.error"}}},
        {"kind": "fanout", "items": {"op": "lit", "value": [1, 2]}, "bind": {"op": "path", "at": "$.item"},
         "body": {"kind": "step", "ref": "tester", "in": {"op": "path", "at": "$.item"}, "out": {"op": "path", "at": "$.report"}},
         "join": "all_settled", "out": {"op": "path", "at": "$.reports"}},
        {"kind": "branch", "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.verdict"}, "rhs": {"op": "lit", "value": "pass"}},
         "then": {"kind": "seq", "children": []},
         "else": {"kind": "step", "ref": "coder", "in": {"op": "lit", "value": "fix"}, "out": {"op": "path", "at": "$.fixed"}}}
    ]})
}

#[test]
fn an_upstream_flow_parses_unchanged_and_assign_is_let() {
    let flow: Flow =
        serde_json::from_value(json!({"name": "up", "body": upstream_body()})).unwrap();
    let Node::Seq { children } = &flow.body else {
        panic!("{flow:?}")
    };
    let kinds: Vec<&str> = children.iter().map(Node::kind).collect();
    assert_eq!(kinds, ["let", "loop", "fanout", "branch"]);
}

#[test]
fn swarmd_nodes_parse_and_typos_are_refused() {
    let flow = json!({"name": "gate", "input_schema": {"type": "object"},
    "body": {"kind": "seq", "children": [
        {"kind": "step", "ref": "coder", "in": {"op": "template", "text": "{{ input.task }}"},
         "out": {"op": "path", "at": "$.change"}, "name": "code",
         "retry": {"attempts": 3, "backoff_secs": 2, "non_retryable": ["over_budget"]},
         "queue_timeout_secs": 60, "timeout_secs": 600},
        {"kind": "wait", "name": "approve", "schema": {"type": "boolean"}, "timeout_secs": 3600,
         "out": {"op": "path", "at": "$.approved"}},
        {"kind": "call", "flow": "ship", "in": {"op": "path", "at": "$.change"}, "out": {"op": "path", "at": "$.shipped"}}
    ]}});
    let parsed: Flow = serde_json::from_value(flow.clone()).unwrap();
    assert_eq!(serde_json::to_value(&parsed).unwrap()["body"], flow["body"]);

    let mut typo = flow.clone();
    typo["body"]["children"][0]["retires"] = json!(2);
    let error = serde_json::from_value::<Flow>(typo)
        .unwrap_err()
        .to_string();
    assert!(error.contains("retires"), "{error}");
    let unknown = json!({"name": "x", "body": {"kind": "parallel", "children": []}});
    assert!(serde_json::from_value::<Flow>(unknown).is_err());
}

/// The published schema, `docs/flow.schema.json`, is the one the types
/// give; `SWARMD_UPDATE_SCHEMA=1` rewrites it.
#[test]
#[allow(clippy::disallowed_methods, reason = "a test reads its update switch")]
fn the_published_schema_is_current_and_accepts_the_examples() {
    let schema = Flow::json_schema();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/flow.schema.json");
    let pretty = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("SWARMD_UPDATE_SCHEMA").is_some() {
        std::fs::write(&file, &pretty).unwrap();
    }
    let published = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        published == pretty,
        "docs/flow.schema.json is stale: run SWARMD_UPDATE_SCHEMA=1 cargo test -p swarmd-flow"
    );

    let validator = jsonschema::validator_for(&schema).unwrap();
    let good = json!({"name": "up", "body": upstream_body()});
    let errors: Vec<String> = validator
        .iter_errors(&good)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let bad = json!({"name": "up", "body": {"kind": "step", "ref": "coder"}});
    assert!(!validator.is_valid(&bad), "a step without `in` and `out`");
}
