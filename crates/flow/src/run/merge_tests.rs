//! The `merge` node driven as the runner drives it: its judge, merge and
//! resolver steps started in turn, their outcomes read back.

use serde_json::{Value, json};

use super::tests::{Sim, flow, result};
use super::*;

fn merge_flow(strategy: &str, extra: Value) -> Sim {
    let mut node = json!({"kind": "merge", "ref": "merge", "strategy": strategy,
        "branches": {"op": "path", "at": "$.input.tries"},
        "out": {"op": "path", "at": "$.merged"}});
    for (k, v) in extra.as_object().unwrap() {
        node[k] = v.clone();
    }
    let tries = json!([{"branch": "b0", "files": ["a"]}, {"status": "failed"}, "b2"]);
    Sim::new(flow(node), json!({ "tries": tries }))
}

#[test]
fn pick_best_asks_the_judge_then_merges_only_the_winner() {
    let mut sim = merge_flow("pick_best", json!({"judge": "judge"}));
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1);
    assert_eq!(ev.starts[0].key, "/body/judge");
    assert_eq!(ev.starts[0].agent, "judge");
    assert_eq!(ev.starts[0].input["branches"], json!(["b0", null, "b2"]));
    sim.end(
        "/body/judge",
        Ok(json!({"winner": 2, "reason": "smallest diff"})),
    );
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/merge");
    assert_eq!(
        ev.starts[0].input,
        json!({"branches": ["b0", "b2"], "strategy": "pick", "pick": "b2"})
    );
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m", "head": "h1", "conflict": null})),
    );
    let ev = sim.tick();
    assert_eq!(ev.nodes["/body"].tries, ["/body/judge", "/body/merge"]);
    let out = result(ev.progress);
    assert_eq!(out["merged"]["branch"], "m");
    assert_eq!(out["merged"]["head"], "h1");
    assert_eq!(out["merged"]["verdict"]["reason"], "smallest diff");
    assert_eq!(out["merged"]["strategy"], "pick_best");
}

#[test]
fn changes_that_made_no_commit_name_no_branch_to_merge() {
    // The second coder's head is its base: its branch was deleted when
    // its attempt ended, so merging it would fail the whole node.
    let tries = json!([
        {"branch": "b0", "base": "c0", "head": "c1", "files": ["a"]},
        {"branch": "b1", "base": "c0", "head": "c0", "files": []},
        {"branch": "b2", "base": "c0", "head": "c2", "files": ["b"]},
    ]);
    let node = json!({"kind": "merge", "ref": "merge", "strategy": "sequence",
        "branches": {"op": "path", "at": "$.input.tries"},
        "out": {"op": "path", "at": "$.merged"}});
    let mut sim = Sim::new(flow(node), json!({ "tries": tries }));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/merge");
    assert_eq!(ev.starts[0].input["branches"], json!(["b0", "b2"]));
}

#[test]
fn a_verdict_naming_a_candidate_without_a_branch_fails_the_node() {
    let mut sim = merge_flow("pick_best", json!({"judge": "judge"}));
    sim.tick();
    sim.end("/body/judge", Ok(json!({"winner": 1})));
    let Progress::Failed { reason } = sim.tick().progress else {
        panic!("not failed");
    };
    assert!(reason.contains("names no candidate"), "{reason}");
}

#[test]
fn a_conflict_runs_the_resolver_from_its_work_branch() {
    let mut sim = merge_flow("sequence", json!({"on_conflict": "coder"}));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].input["strategy"], "sequence");
    let conflict = json!({"branch": "b2", "files": ["a"], "work_branch": "m-conflict",
                          "work_head": "w"});
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m", "head": "h1", "conflict": conflict})),
    );
    let ev = sim.tick();
    let resolve = &ev.starts[0];
    assert_eq!(resolve.key, "/body/resolve");
    assert_eq!(resolve.agent, "coder");
    assert_eq!(resolve.start_from.as_deref(), Some("m-conflict"));
    assert!(resolve.wants_changes);
    assert!(
        resolve.input.as_str().unwrap().contains("conflicted in a."),
        "{resolve:?}"
    );
    sim.now += 10;
    let now = sim.now;
    sim.journal
        .end_step_with(
            "/body/resolve",
            Ok(json!("resolved")),
            StepFacts {
                changes: Some(json!({"branch": "r", "head": "h2"})),
                ..StepFacts::default()
            },
            now,
        )
        .unwrap();
    let out = result(sim.tick().progress);
    assert_eq!(out["merged"]["branch"], "r");
    assert_eq!(out["merged"]["head"], "h2");
    assert_eq!(out["merged"]["merge"]["branch"], "m");
    assert!(out["merged"].get("conflict").is_none());
}

#[test]
fn without_a_resolver_the_conflict_is_in_the_result() {
    let mut sim = merge_flow("octopus", json!({}));
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m", "head": "h0", "conflict": {"branch": "b2", "files": ["a"]}})),
    );
    let out = result(sim.tick().progress);
    assert_eq!(out["merged"]["conflict"]["branch"], "b2");
    assert_eq!(out["merged"]["branch"], "m");
}

#[test]
fn a_record_without_a_branch_fails_the_node() {
    // An agent that is not a merge agent (here one that echoes its input)
    // names no branch: the node fails instead of passing with a null one.
    let mut sim = merge_flow("sequence", json!({}));
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branches": ["b0", "b2"], "strategy": "sequence"})),
    );
    let Progress::Failed { reason } = sim.tick().progress else {
        panic!("not failed");
    };
    assert!(
        reason.starts_with("/body/merge: agent `merge` answered no `branch`"),
        "{reason}"
    );
    assert!(reason.contains("kind = \"merge\""), "{reason}");
}
