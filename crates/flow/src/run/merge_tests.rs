//! The `merge` node driven as the runner drives it: its judge, merge and
//! resolver steps started in turn, their outcomes read back.

use serde_json::{Value, json};

use super::merge::resolution;
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
                changes: Some(json!({"branch": "r", "base": "w", "head": "h2",
                                     "files": ["a"], "files_truncated": false})),
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

/// Ends resolver step `key` passed, with its changes on branch `branch`
/// at `head`, from work head `w`, changing the conflicting file `a`.
fn resolve(sim: &mut Sim, key: &str, branch: &str, head: &str) {
    let changes = json!({"branch": branch, "base": "w", "head": head, "files": ["a"],
                         "files_truncated": false});
    resolve_with(sim, key, Some(changes));
}

/// Ends resolver step `key` passed, with git changes `changes`.
fn resolve_with(sim: &mut Sim, key: &str, changes: Option<Value>) {
    sim.now += 10;
    let now = sim.now;
    let facts = StepFacts {
        changes,
        ..StepFacts::default()
    };
    sim.journal
        .end_step_with(key, Ok(json!("resolved")), facts, now)
        .unwrap();
}

/// A `sequence` merge with a resolver over branches `b0`…`b3`.
fn four_in_sequence() -> Sim {
    let node = json!({"kind": "merge", "ref": "merge", "strategy": "sequence",
        "on_conflict": "coder", "branches": {"op": "path", "at": "$.input.tries"},
        "out": {"op": "path", "at": "$.merged"}});
    Sim::new(flow(node), json!({"tries": ["b0", "b1", "b2", "b3"]}))
}

fn conflict_at(branch: &str, work: &str) -> Value {
    json!({"branch": branch, "files": ["a"], "work_branch": work, "work_head": "w"})
}

#[test]
fn after_a_resolution_the_remaining_branches_are_merged_onto_the_resolved_head() {
    let mut sim = four_in_sequence();
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m1", "head": "h1", "conflict": conflict_at("b1", "m1-c")})),
    );
    sim.tick();
    resolve(&mut sim, "/body/resolve", "r1", "rh1");
    let ev = sim.tick();
    assert_eq!(ev.starts.len(), 1);
    assert_eq!(ev.starts[0].key, "/body/merge-2");
    assert_eq!(ev.starts[0].agent, "merge");
    assert_eq!(
        ev.starts[0].input,
        json!({"branches": ["b2", "b3"], "strategy": "sequence", "base": "rh1"})
    );
    // Round 2 conflicts at b3, the last: its resolution ends the node.
    sim.end(
        "/body/merge-2",
        Ok(json!({"branch": "m2", "head": "h2", "conflict": conflict_at("b3", "m2-c")})),
    );
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/resolve-2");
    assert_eq!(ev.starts[0].start_from.as_deref(), Some("m2-c"));
    resolve(&mut sim, "/body/resolve-2", "r2", "rh2");
    let ev = sim.tick();
    assert_eq!(
        ev.nodes["/body"].tries,
        [
            "/body/merge",
            "/body/resolve",
            "/body/merge-2",
            "/body/resolve-2"
        ]
    );
    let merged = &result(ev.progress)["merged"];
    assert_eq!(merged["branch"], "r2");
    assert_eq!(merged["head"], "rh2");
    // Round 1's record and resolution stay where they were.
    assert_eq!(merged["merge"]["branch"], "m1");
    assert_eq!(merged["resolved"]["branch"], "r1");
    assert!(merged.get("conflict").is_none());
    let rounds = merged["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[0]["merge"]["branch"], "m1");
    assert_eq!(rounds[0]["resolved"]["head"], "rh1");
    assert_eq!(rounds[1]["merge"]["branch"], "m2");
    assert_eq!(rounds[1]["resolved"]["branch"], "r2");
}

#[test]
fn a_later_round_that_merges_cleanly_is_the_outcome() {
    let mut sim = four_in_sequence();
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m1", "head": "h1", "conflict": conflict_at("b0", "m1-c")})),
    );
    sim.tick();
    resolve(&mut sim, "/body/resolve", "r1", "rh1");
    let ev = sim.tick();
    assert_eq!(ev.starts[0].input["branches"], json!(["b1", "b2", "b3"]));
    sim.end(
        "/body/merge-2",
        Ok(json!({"branch": "m2", "head": "h2", "conflict": null})),
    );
    let merged = &result(sim.tick().progress)["merged"];
    assert_eq!(merged["branch"], "m2");
    assert_eq!(merged["head"], "h2");
    assert_eq!(merged["rounds"].as_array().unwrap().len(), 2);
    assert!(merged["rounds"][1].get("resolved").is_none());
}

#[test]
fn a_conflict_left_in_a_later_round_is_in_the_result_with_that_rounds_branch() {
    let node = json!({"kind": "merge", "ref": "merge", "strategy": "sequence",
        "on_conflict": "coder", "branches": {"op": "path", "at": "$.input.tries"},
        "out": {"op": "path", "at": "$.merged"}});
    let mut sim = Sim::new(flow(node), json!({"tries": ["b0", "b1", "b2"]}));
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m1", "head": "h1", "conflict": conflict_at("b1", "m1-c")})),
    );
    sim.tick();
    resolve(&mut sim, "/body/resolve", "r1", "rh1");
    sim.tick();
    // A conflict without a work branch cannot be resolved.
    sim.end(
        "/body/merge-2",
        Ok(json!({"branch": "m2", "head": "h2", "conflict": {"branch": "b2", "files": ["a"]}})),
    );
    let merged = &result(sim.tick().progress)["merged"];
    assert_eq!(merged["branch"], "m2");
    assert_eq!(merged["head"], "h2");
    assert_eq!(merged["conflict"]["branch"], "b2");
    assert_eq!(merged["resolved"]["branch"], "r1");
    assert_eq!(merged["rounds"].as_array().unwrap().len(), 2);
}

#[test]
fn a_resolved_pick_and_an_octopus_conflict_take_one_round() {
    // A pick merges only the winner, so nothing remains after it even
    // when the winner is not the last branch.
    let mut sim = merge_flow(
        "pick_best",
        json!({"judge": "judge", "on_conflict": "coder"}),
    );
    sim.tick();
    sim.end("/body/judge", Ok(json!({"winner": 0})));
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m", "head": "h1", "conflict": conflict_at("b0", "m-c")})),
    );
    sim.tick();
    resolve(&mut sim, "/body/resolve", "r", "rh");
    let merged = &result(sim.tick().progress)["merged"];
    assert_eq!(merged["branch"], "r");
    assert_eq!(merged["rounds"].as_array().unwrap().len(), 1);

    // An octopus conflict has no work branch: no resolver, no round 2.
    let mut sim = merge_flow("octopus", json!({"on_conflict": "coder"}));
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m", "head": "h0", "conflict": {"branch": "b0", "files": ["a"]}})),
    );
    let ev = sim.tick();
    assert_eq!(ev.nodes["/body"].tries, ["/body/merge"]);
    let merged = &result(ev.progress)["merged"];
    assert_eq!(merged["conflict"]["branch"], "b0");
    assert_eq!(
        merged["rounds"],
        json!([{"merge": merged["merge"].clone()}])
    );
}

/// Runs `four_in_sequence` to a conflict at `b1` (after `b0`) and ends its
/// resolver with `changes`; the merged result.
fn unresolved_by(changes: Option<Value>) -> Value {
    let mut sim = four_in_sequence();
    sim.tick();
    sim.end(
        "/body/merge",
        Ok(json!({"branch": "m1", "head": "h1", "conflict": conflict_at("b1", "m1-c")})),
    );
    sim.tick();
    resolve_with(&mut sim, "/body/resolve", changes);
    let ev = sim.tick();
    // No round 2: b2 and b3 are never merged onto the unresolved conflict.
    assert!(ev.starts.is_empty(), "{:?}", ev.starts);
    assert_eq!(ev.nodes["/body"].tries, ["/body/merge", "/body/resolve"]);
    result(ev.progress)["merged"].clone()
}

/// The result of a conflict left unresolved at round 1, as without a
/// resolver: round 1's merge branch, its conflict, no `resolved`.
fn assert_left_unresolved(merged: &Value) {
    assert_eq!(merged["branch"], "m1", "{merged}");
    assert_eq!(merged["head"], "h1", "{merged}");
    assert_eq!(merged["conflict"], conflict_at("b1", "m1-c"), "{merged}");
    assert!(merged.get("resolved").is_none(), "{merged}");
    assert_eq!(
        merged["rounds"],
        json!([{"merge": merged["merge"].clone()}])
    );
}

#[test]
fn a_resolver_without_changes_leaves_the_conflict() {
    // A resolver that works in no worktree passes with null changes.
    assert_left_unresolved(&unresolved_by(None));
}

#[test]
fn a_resolver_that_committed_nothing_leaves_the_conflict() {
    let changes = json!({"branch": "r1", "base": "w", "head": "w", "files": [],
                         "files_truncated": false});
    assert_left_unresolved(&unresolved_by(Some(changes)));
}

#[test]
fn a_resolver_whose_commits_left_a_conflicting_file_leaves_the_conflict() {
    // Its commits changed `notes` only: `a` is as the work head had it,
    // conflict markers and all.
    let changes = json!({"branch": "r1", "base": "w", "head": "rh1", "files": ["notes"],
                         "files_truncated": false});
    assert_left_unresolved(&unresolved_by(Some(changes)));
}

#[test]
fn a_resolver_that_did_not_start_from_the_work_head_leaves_the_conflict() {
    // Its worktree started elsewhere (the work branch was gone): its
    // commits hold none of the merge.
    let changes = json!({"branch": "r1", "base": "main", "head": "rh1", "files": ["a"],
                         "files_truncated": false});
    assert_left_unresolved(&unresolved_by(Some(changes)));
}

#[test]
fn what_counts_as_a_resolution() {
    let conflict = json!({"branch": "b1", "files": ["a", "b"], "work_branch": "m-c",
                          "work_head": "w"});
    let changes = |head: &str, files: Value, cut: bool| {
        json!({"branch": "r", "base": "w", "head": head, "files": files,
               "files_truncated": cut})
    };
    let resolves = |changes: &Value| resolution(changes, &conflict);
    assert_eq!(
        resolves(&changes("h", json!(["b", "a", "c"]), false)).as_deref(),
        Some("h")
    );
    assert_eq!(resolves(&changes("w", json!(["a", "b"]), false)), None);
    assert_eq!(resolves(&changes("h", json!(["a"]), false)), None);
    // A cut list cannot tell which files the commits left alone.
    assert_eq!(
        resolves(&changes("h", json!(["a"]), true)).as_deref(),
        Some("h")
    );
    assert_eq!(resolves(&Value::Null), None);
    assert_eq!(resolves(&json!({"branch": "r", "head": "h"})), None);
    // A head that still holds git's markers in a file resolved nothing.
    let mut marked = changes("h", json!(["a", "b"]), false);
    marked["markers"] = json!(["b"]);
    assert_eq!(resolves(&marked), None);
    marked["markers"] = json!([]);
    assert_eq!(resolves(&marked).as_deref(), Some("h"));
    // The count a cut conflict list ends with names no file.
    let cut = json!({"branch": "b1", "files": ["a", "… and 3 more files"],
                     "work_head": "w"});
    assert_eq!(
        resolution(&changes("h", json!(["a"]), false), &cut).as_deref(),
        Some("h")
    );
}

#[test]
fn the_nodes_retry_and_timeout_apply_to_each_inner_step() {
    let retry = json!({"attempts": 2, "non_retryable": ["bad input"]});
    let mut sim = merge_flow(
        "pick_best",
        json!({"judge": "judge", "retry": retry, "timeout_secs": 30}),
    );
    let ev = sim.tick();
    assert_eq!(ev.starts[0].timeout_secs, Some(30));
    sim.end("/body/judge", Err("interrupted"));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/judge~2");
    assert_eq!(ev.starts[0].timeout_secs, Some(30));
    sim.end("/body/judge~2", Ok(json!({"winner": 0})));
    let ev = sim.tick();
    assert_eq!(ev.starts[0].key, "/body/merge");
    assert_eq!(ev.starts[0].timeout_secs, Some(30));
    // A reason the retry names ends the step at once.
    sim.end("/body/merge", Err("bad input: no"));
    let Progress::Failed { reason } = sim.tick().progress else {
        panic!("not failed");
    };
    assert!(reason.contains("step merge: bad input: no"), "{reason}");
}
