//! A run's view for people: the header, the node tree with a step's tries
//! and a merge node's inner steps, a conflict left, a try its run's end
//! left open, and waits with their prompts.

use serde_json::{Value, json};

use super::*;

const RUN: &str = "R-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";
const NOW: u64 = 1_000_000_000;

/// A view read at `NOW` of a run still going.
const OPEN: Clock = Clock {
    now_ms: NOW,
    run_ended_ms: None,
};

fn node(key: &str, pointer: &str, kind: &str, status: &str) -> Value {
    json!({"key": key, "pointer": pointer, "kind": kind, "status": status})
}

/// A run whose nodes arrive in the daemon's key order, where a child's
/// key sorts before its fan-out item's and `else` before `then`.
fn waiting_run() -> Value {
    let mut step0 = node(
        "/body/children/0/body[0]",
        "/body/children/0/body",
        "step",
        "passed",
    );
    step0["name"] = json!("try");
    step0["tries"] = json!([{"key": "/body/children/0/body[0]",
        "task_id": "T-0190f3c2a1b27c3d8e4f5a6b11111111",
        "started_ms": NOW - 20_000, "ended_ms": NOW - 7_700}]);
    let mut step1 = node(
        "/body/children/0/body[1]",
        "/body/children/0/body",
        "step",
        "failed",
    );
    step1["name"] = json!("try");
    step1["reason"] = json!("exit 1");
    step1["tries"] = json!([
        {"key": "/body/children/0/body[1]", "task_id": "T-0190f3c2a1b27c3d8e4f5a6b22222222",
         "started_ms": NOW - 20_000, "ended_ms": NOW - 19_000, "reason": "exit 2"},
        {"key": "/body/children/0/body[1]~2", "task_id": "T-0190f3c2a1b27c3d8e4f5a6b33333333",
         "started_ms": NOW - 18_000, "ended_ms": NOW - 16_000, "reason": "exit 1"},
    ]);
    let mut wait = node(
        "/body/children/1/then",
        "/body/children/1/then",
        "wait",
        "waiting",
    );
    wait["name"] = json!("approve");
    json!({
        "id": RUN, "flow": "best-of-2", "flow_hash": "sha256:0123456789abcdef0123",
        "status": "waiting", "input": {"task": "fix it"},
        "created_ms": NOW - 30_000, "updated_ms": NOW - 5_000, "version": 7,
        "nodes": [
            node("/body", "/body", "seq", "waiting"),
            node("/body/children/0", "/body/children/0", "fanout", "passed"),
            step0,
            step1,
            node("/body/children/1", "/body/children/1", "branch", "waiting"),
            wait,
        ],
        "waits": [{"key": "/body/children/1/then", "name": "approve", "open": true,
                   "prompt": "Ship it?", "opened_ms": NOW - 5_000,
                   "deadline_ms": NOW + 300_000, "token": "swt1.abcdef"}],
        "graph": {}
    })
}

#[test]
fn a_run_shows_its_header_then_its_node_tree_then_its_waits() {
    let shown = run_block(&waiting_run(), NOW);
    let expected = format!(
        "id        {RUN}
flow      best-of-2 (sha256:0123456789a…)
status    waiting
created   30s ago
updated   5s ago
duration  30.0s
input     {{\"task\":\"fix it\"}}

⏸ seq  waiting
  ✓ fanout  passed
    ✓ step try[0]  passed  task …11111111  12.3s
    ✗ step try[1]  failed  exit 1
        try 1  task …22222222  1.0s  exit 2
        try 2  task …33333333  2.0s  exit 1
  ⏸ branch  waiting
    ⏸ then: wait approve  waiting

waits:
  approve  open  Ship it?  (ends in 5m 00s)
    answer: swarmd flow answer {RUN} approve '<JSON>'
    token:  swt1.abcdef"
    );
    assert_eq!(shown, expected, "\n{shown}");
}

#[test]
fn items_of_nested_fanouts_and_sub_flows_keep_their_subtrees() {
    let nodes = vec![
        node(
            "/body/body/children/0[0]",
            "/body/body/children/0",
            "call",
            "passed",
        ),
        node(
            "/body/body/children/0[0]>sub/body",
            "/body",
            "step",
            "passed",
        ),
        node(
            "/body/body/children/0[1]",
            "/body/body/children/0",
            "call",
            "running",
        ),
        node("/body/body[0]", "/body/body", "seq", "passed"),
        node("/body/body[1]", "/body/body", "seq", "running"),
        node("/body", "/body", "fanout", "running"),
    ];
    let lines = node_tree(&nodes, OPEN);
    assert_eq!(
        lines,
        [
            "▶ fanout  running",
            "  ✓ seq[0]  passed",
            "    ✓ call[0]  passed",
            "      ✓ step  passed",
            "  ▶ seq[1]  running",
            "    ▶ call[1]  running",
        ]
    );
}

#[test]
fn a_wait_name_shared_by_open_waits_is_answered_by_its_quoted_key() {
    let wait = |key: &str| json!({"key": key, "name": "ok", "open": true, "opened_ms": NOW});
    let waits = [wait("/body/body[0]"), wait("/body/body[1]")];
    let lines = wait_lines(&waits[1], &waits, RUN, NOW);
    assert_eq!(
        lines[1],
        format!("    answer: swarmd flow answer {RUN} '/body/body[1]' '<JSON>'")
    );
    assert_eq!(shell_word("it's"), r"'it'\''s'");
}

#[test]
fn an_answer_prints_the_run_or_only_what_a_wait_token_may_read() {
    let only = json!({"id": RUN, "wait": "approve", "status": "running"});
    assert_eq!(
        answer_block(&only, NOW),
        format!("id      {RUN}\nwait    approve\nstatus  running")
    );
    let view = waiting_run();
    assert_eq!(answer_block(&view, NOW), run_block(&view, NOW));
}

/// A try of `key` by task `…<tail>`, from `start` to `end` seconds before
/// `NOW` (`end` none: still open).
fn one_try(key: &str, tail: &str, start: u64, end: Option<u64>) -> Value {
    json!({"key": key, "task_id": format!("T-0190f3c2a1b27c3d8e4f5a6b{tail}"),
           "started_ms": NOW - start * 1000, "ended_ms": end.map(|e| NOW - e * 1000)})
}

#[test]
fn a_merge_nodes_inner_steps_are_named_by_their_key_and_a_retry_by_its_number() {
    let mut merge = node("/body/body[0]", "/body/body", "merge", "passed");
    merge["tries"] = json!([
        one_try("/body/body/judge[0]", "11111111", 9, Some(7)),
        one_try("/body/body/merge[0]", "22222222", 7, Some(6)),
        one_try("/body/body/merge-2[0]~2", "33333333", 6, Some(5)),
    ]);
    let mut step = node("/body/children/1", "/body/children/1", "step", "passed");
    step["tries"] = json!([
        one_try("/body/children/1", "44444444", 9, Some(8)),
        one_try("/body/children/1~2", "55555555", 8, Some(6)),
    ]);
    let merge_lines = node_lines(&merge, 0, OPEN);
    assert_eq!(
        merge_lines,
        [
            "✓ merge[0]  passed",
            "    judge  task …11111111  2.0s",
            "    merge  task …22222222  1.0s",
            "    merge-2 try 2  task …33333333  1.0s",
        ]
    );
    let step_lines = node_lines(&step, 0, OPEN);
    assert_eq!(
        step_lines,
        [
            "✓ step  passed",
            "    try 1  task …44444444  1.0s",
            "    try 2  task …55555555  2.0s",
        ]
    );
    // One inner step is still listed by its name.
    merge["tries"] = json!([one_try("/body/body/merge[0]", "22222222", 7, Some(6))]);
    assert_eq!(
        node_lines(&merge, 0, OPEN)[1],
        "    merge  task …22222222  1.0s"
    );
}

#[test]
fn a_merge_that_left_a_conflict_says_where_on_its_line() {
    let conflict = json!({"branch": "swarmd/t-2", "files": ["notes.txt", "b.rs"],
                          "work_branch": "swarmd/merge-1-conflict"});
    let mut merge = node("/body/children/1", "/body/children/1", "merge", "passed");
    let mut step = one_try("/body/children/1/merge", "22222222", 7, Some(6));
    step["output"] = json!({"branch": "swarmd/merge-1", "conflict": conflict});
    merge["tries"] = json!([step.clone()]);
    assert_eq!(
        node_lines(&merge, 0, OPEN)[0],
        "✓ merge  passed, conflict in notes.txt, b.rs (branch swarmd/t-2; \
         work branch swarmd/merge-1-conflict)"
    );
    // A resolver after it took the conflict away.
    let resolve = one_try("/body/children/1/resolve", "33333333", 6, Some(5));
    merge["tries"] = json!([step, resolve]);
    assert_eq!(node_lines(&merge, 0, OPEN)[0], "✓ merge  passed");
}

#[test]
fn a_try_its_cancelled_run_left_open_stops_counting_at_the_runs_end() {
    let mut step = node(
        "/body/children/0[0]",
        "/body/children/0",
        "step",
        "cancelled",
    );
    step["tries"] = json!([one_try("/body/children/0[0]", "11111111", 13, None)]);
    let view = json!({"id": RUN, "flow": "slow", "status": "cancelled", "error": "x",
        "created_ms": NOW - 14_000, "updated_ms": NOW - 10_000,
        "nodes": [step], "waits": []});
    for later in [0, 60_000, 3_600_000] {
        let shown = run_block(&view, NOW + later);
        assert!(
            shown.contains("⊘ step[0]  cancelled  task …11111111  3.0s"),
            "{shown}"
        );
    }
}

#[test]
fn a_waits_prompt_of_several_lines_prints_whole_below_it_and_bounded() {
    let wait = |prompt: Value| {
        json!({"key": "/body", "name": "approve", "open": true, "prompt": prompt,
               "opened_ms": NOW})
    };
    let asked = wait(json!("Review the diff:\n  +12 -3 src/a.rs\nShip it?\n"));
    let lines = wait_lines(&asked, std::slice::from_ref(&asked), RUN, NOW);
    assert_eq!(
        lines[..4],
        [
            "  approve  open",
            "    │ Review the diff:",
            "    │   +12 -3 src/a.rs",
            "    │ Ship it?",
        ]
    );
    assert!(lines[4].starts_with("    answer: "), "{lines:?}");

    let long: Vec<String> = (1..=30).map(|n| format!("line {n}")).collect();
    let asked = wait(json!(long.join("\n")));
    let lines = wait_lines(&asked, std::slice::from_ref(&asked), RUN, NOW);
    assert_eq!(lines[20], "    │ line 20", "{lines:?}");
    assert!(
        lines[21].starts_with("    │ … (cut at 20 lines"),
        "{lines:?}"
    );
    let huge = wait(json!("y".repeat(10_000)));
    let lines = wait_lines(&huge, std::slice::from_ref(&huge), RUN, NOW);
    assert_eq!(
        lines[1].len(),
        "    │ ".len() + PROMPT_BYTES,
        "{}",
        lines[1].len()
    );
    assert!(lines[2].starts_with("    │ … (cut"), "{lines:?}");
}

#[test]
fn a_waiting_run_with_an_open_wait_waits_on_a_person() {
    assert!(waits_on_a_person(&waiting_run()));
    let mut running = waiting_run();
    running["status"] = json!("running");
    assert!(!waits_on_a_person(&running));
}
