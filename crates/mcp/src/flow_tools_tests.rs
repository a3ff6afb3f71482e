//! Unit tests of the flow tools' schemas, argument checks and error texts;
//! the tools at work are tested on the real binary
//! (tests/blackbox/mcp/flow_tools.rs).

use crate::arguments;
use rmcp::model::Tool;
use swarmd_engine::ErrorCode;
use swarmd_flow::Problem;

use super::*;

fn named(name: &str) -> Tool {
    tools()
        .into_iter()
        .map(|entry| entry.tool().clone())
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

fn input_of(name: &str) -> Value {
    Value::Object((*named(name).input_schema).clone())
}

#[test]
fn the_run_tools_have_object_schemas_and_name_their_required_fields() {
    let names: Vec<_> = tools().iter().map(|e| e.tool().name.to_string()).collect();
    assert_eq!(
        names,
        [
            "flows",
            "lint_flow",
            "start_run",
            "run",
            "answer_wait",
            "cancel_run"
        ]
    );
    assert_eq!(input_of("lint_flow")["required"], json!(["flow"]));
    assert_eq!(input_of("start_run")["required"], json!(["flow"]));
    assert_eq!(input_of("run")["required"], json!(["run_id"]));
    assert_eq!(
        input_of("answer_wait")["required"],
        json!(["run_id", "wait", "value"])
    );
    assert_eq!(input_of("cancel_run")["required"], json!(["run_id"]));
    let output = named("run").output_schema.unwrap();
    assert_eq!(output.get("type"), Some(&json!("object")));
    let required = output.get("required").unwrap().to_string();
    for field in ["\"id\"", "\"status\"", "\"nodes\"", "\"waits\""] {
        assert!(required.contains(field), "{field}: {required}");
    }
    // What a run view leaves out when unset is optional: clients check
    // structured results against this schema.
    for field in ["session", "result", "error", "created"] {
        let quoted = format!("\"{field}\"");
        assert!(!required.contains(&quoted), "{field}: {required}");
    }
}

#[test]
fn start_run_takes_a_flow_by_name_or_as_ir() {
    let flow = &input_of("start_run")["properties"]["flow"];
    assert_eq!(
        flow["anyOf"],
        json!([{"type": "string"}, {"type": "object"}]),
        "{flow}"
    );
    // Standard JSON Schema only: no schemars formats.
    let run = input_of("run").to_string();
    assert!(!run.contains("uint"), "{run}");
}

#[test]
fn bad_arguments_are_refused_naming_the_field() {
    let args = |value: Value| match value {
        Value::Object(map) => Some(map),
        _ => None,
    };
    let error = arguments::<RunArgs>(args(json!({"wait_secs": 1}))).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadRequest);
    assert!(error.message().contains("run_id"), "{}", error.message());
    let error = arguments::<CancelArgs>(args(json!({"run_id": "R-x", "why": "no"}))).unwrap_err();
    assert!(error.message().contains("why"), "{}", error.message());
    let error = arguments::<LintArgs>(args(json!({"flow": "review"}))).unwrap_err();
    assert!(error.message().contains("map"), "{}", error.message());

    let error = run_id("T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b").unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadRequest);
    assert!(
        error.message().starts_with("run_id: "),
        "{}",
        error.message()
    );
    let id = RunId::new();
    assert_eq!(run_id(&id.to_string()).unwrap(), id);
}

#[test]
fn a_flow_that_fails_lint_lists_every_problem_with_pointer_code_and_hint() {
    let problem = |pointer: &str, code: &'static str| Problem {
        pointer: pointer.into(),
        code,
        message: format!("{code} here"),
        hint: format!("fix {code}"),
    };
    let error = refused(RunError::InvalidFlow {
        problems: vec![
            problem("/body/children/0/ref", "unknown_agent"),
            problem("/limits/max_steps", "limit_too_high"),
        ],
    });
    assert_eq!(error.code(), ErrorCode::InvalidFlow);
    let message = error.message();
    assert!(message.contains("2 problem(s)"), "{message}");
    for part in [
        "/body/children/0/ref unknown_agent: unknown_agent here (hint: fix unknown_agent)",
        "/limits/max_steps limit_too_high",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    let error = refused(RunError::InvalidInput(
        "input at /topic: 7 is not a string".into(),
    ));
    assert_eq!(error.code(), ErrorCode::InvalidInput);
    assert!(error.message().contains("/topic"));
}

#[test]
fn progress_names_the_run_its_status_and_the_time_waited() {
    let id = RunId::new();
    assert_eq!(
        progress_message(id, "waiting", Duration::from_millis(12_400)),
        format!("run {id} waiting, 12s elapsed")
    );
}
