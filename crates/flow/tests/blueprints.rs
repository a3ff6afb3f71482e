//! Upstream (mlua-swarm v0.26.0) example Blueprints, imported: each one
//! converts, passes lint against the agents it names, and runs to its end
//! with stand-in step results, giving what upstream gives.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use swarmd_flow::import::{Imported, import_blueprint};
use swarmd_flow::ir::Node;
use swarmd_flow::lint::Known;
use swarmd_flow::run::{Journal, Progress, StepStart, evaluate};
use swarmd_flow::{Limits, lint};

const FIXTURES: [&str; 5] = [
    "01-pure-ctx-eval",
    "02-verdict-loop",
    "03-fn-override",
    "pipeline",
    "enhance-default",
];

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/blueprints/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Imports and lints a fixture.
fn imported(name: &str) -> Imported {
    let imported =
        import_blueprint(&fixture(name)).unwrap_or_else(|problems| panic!("{name}: {problems:#?}"));
    let known = Known {
        agents: imported.agents.clone(),
        merge_agents: None,
        worktree_agents: None,
        input_schemas: BTreeMap::new(),
        flows: BTreeSet::new(),
        caps: Limits::default(),
    };
    let problems = lint(&imported.flow, &known);
    assert!(problems.is_empty(), "{name}: {problems:#?}");
    imported
}

/// Runs `imported` with `input`, answering every step with `world`; the
/// result and the agents started, in order.
fn run(
    imported: &Imported,
    input: Value,
    mut world: impl FnMut(&StepStart) -> Result<Value, String>,
) -> (Value, Vec<String>) {
    let mut journal = Journal::default();
    let mut started = Vec::new();
    let mut now = 1_000;
    for _ in 0..1_000 {
        let ev = evaluate(&imported.flow, &BTreeMap::new(), &input, &journal);
        match ev.progress {
            Progress::Passed { result } => return (result, started),
            Progress::Failed { reason } => panic!("{}: failed: {reason}", imported.flow.name),
            Progress::Running | Progress::Waiting => {}
        }
        assert!(!ev.starts.is_empty(), "stuck: {ev:#?}");
        for start in &ev.starts {
            journal.start_step(&start.key, format!("task-{}", start.key), now);
            started.push(start.agent.clone());
        }
        for start in &ev.starts {
            now += 10;
            journal
                .end_step(&start.key, world(start), now)
                .unwrap_or_else(|e| panic!("{e:?}"));
        }
    }
    panic!("{}: no end after 1000 rounds", imported.flow.name)
}

#[test]
fn every_fixture_imports_and_lints_clean() {
    for name in FIXTURES {
        let imported = imported(name);
        assert_eq!(imported.flow.name, fixture(name)["id"].as_str().unwrap());
    }
}

#[test]
fn the_flows_parse_as_swarmd_nodes_unchanged() {
    // Upstream's node and expression shapes, `assign` included, are
    // swarmd IR as they are; what import adds is meaning (seeding the
    // initial context, loop bounds, fan-out width), not syntax.
    for name in FIXTURES {
        let flow = fixture(name)["flow"].clone();
        let node: Result<Node, _> = serde_json::from_value(flow);
        assert!(node.is_ok(), "{name}: {node:?}");
    }
}

#[test]
fn pure_context_evaluation_gives_the_verdict_without_steps() {
    let imported = imported("01-pure-ctx-eval");
    assert!(imported.agents.is_empty());
    let (result, started) = run(&imported, json!({}), |_| Err("no steps".into()));
    assert!(started.is_empty());
    assert_eq!(result["x"], json!(10));
    assert_eq!(result["y"], json!(20));
    assert_eq!(result["verdict"], json!("PASS"));
}

#[test]
fn the_verdict_loop_retries_until_the_gate_passes() {
    let imported = imported("02-verdict-loop");
    let agents: Vec<&str> = imported.agents.iter().map(String::as_str).collect();
    assert_eq!(
        agents,
        [
            "mock-commit",
            "mock-escalate",
            "mock-gate",
            "mock-planner",
            "mock-resolver",
            "mock-scout"
        ]
    );
    // Upstream seeds init_ctx {"verdict": "BLOCKED"}; the gate blocks once.
    let mut gates = 0;
    let (result, started) = run(&imported, json!({"verdict": "BLOCKED"}), |s| {
        Ok(match s.agent.as_str() {
            "mock-gate" => {
                gates += 1;
                json!(if gates < 2 { "BLOCKED" } else { "PASS" })
            }
            other => json!(format!("{other} ok")),
        })
    });
    assert_eq!(
        started,
        [
            "mock-scout",
            "mock-planner",
            "mock-resolver",
            "mock-gate",
            "mock-resolver",
            "mock-gate",
            "mock-commit"
        ]
    );
    assert_eq!(result["n"], json!(2));
    assert_eq!(result["commit"], json!("mock-commit ok"));
}

#[test]
fn the_verdict_loop_stops_at_max_and_escalates() {
    let imported = imported("02-verdict-loop");
    let (result, started) = run(&imported, json!({"verdict": "BLOCKED"}), |s| {
        Ok(json!(if s.agent == "mock-gate" {
            "BLOCKED"
        } else {
            "ok"
        }))
    });
    assert_eq!(started.iter().filter(|a| *a == "mock-gate").count(), 3);
    assert_eq!(result["n"], json!(3));
    assert_eq!(started.last().map(String::as_str), Some("mock-escalate"));
    assert_eq!(result["escalated"], json!("ok"));
}

#[test]
fn the_approver_overrides_a_blocked_gate() {
    let imported = imported("03-fn-override");
    let (result, started) = run(&imported, json!({}), |s| {
        Ok(match s.agent.as_str() {
            "mock-gate" => json!("BLOCKED"),
            "mock-approver" => json!("ALLOW"),
            _ => json!("COMMITTED"),
        })
    });
    assert_eq!(started, ["mock-gate", "mock-approver", "mock-commit"]);
    assert_eq!(result["verdict_final"], json!("ALLOW"));
    assert_eq!(result["commit"], json!("COMMITTED"));
}

#[test]
fn the_pipeline_runs_nine_gated_stages_with_one_review_retry() {
    let imported = imported("pipeline");
    let d: serde_json::Map<String, Value> = [
        "prep",
        "setup_dir",
        "gather_ctx",
        "impl",
        "polish_rules",
        "review",
        "record",
        "merge_target",
    ]
    .iter()
    .map(|k| (k.to_string(), json!(format!("do {k}"))))
    .collect();
    let mut reviews = 0;
    let (result, started) = run(&imported, json!({"d": d, "rv_n": 0}), |s| {
        let verdict = if s.agent == "review" {
            reviews += 1;
            if reviews < 2 { "BLOCKED" } else { "PASS" }
        } else {
            "PASS"
        };
        Ok(json!({"out": format!("{} done", s.agent), "parts": {"verdict": verdict}}))
    });
    assert_eq!(
        started,
        [
            "prepare",
            "setup",
            "gather",
            "implement",
            "polish",
            "review",
            "fixer",
            "review",
            "record",
            "merge"
        ]
    );
    assert_eq!(result["rv_n"], json!(1));
    assert_eq!(result["pipeline_complete"], json!(true));
}

#[test]
fn the_enhance_flow_fans_out_one_verifier_per_axis() {
    let imported = imported("enhance-default");
    let input = json!({"issue": {"intent": "x"}, "verifiers": ["schema", "lint"]});
    let (result, started) = run(&imported, input, |s| {
        Ok(match s.agent.as_str() {
            "verifier-router" => json!({"axis": s.input["axis"], "ok": true}),
            other => json!(format!("{other} done")),
        })
    });
    assert_eq!(
        started,
        [
            "patch-spawner",
            "patch-applier",
            "verifier-router",
            "verifier-router",
            "committer"
        ]
    );
    let verdicts = result["verdicts"].as_array().expect("an array of branches");
    assert_eq!(verdicts.len(), 2);
    assert_eq!(
        verdicts[0]["verdict"],
        json!({"axis": "schema", "ok": true})
    );
    assert_eq!(verdicts[1]["verdict"], json!({"axis": "lint", "ok": true}));
    assert_eq!(result["commit"], json!("committer done"));
}
