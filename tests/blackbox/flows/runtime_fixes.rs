//! Flow runtime rules on the real binary: a `try` around the body takes
//! the flow's budget as its branch (past it, and used exactly with more to
//! run); a branch a join no longer needs shows cancelled wherever its
//! fan-out sits; a wait found past its deadline after a restart names its
//! `timeout_secs`.

use std::time::Duration;

use serde_json::{Value, json};

use super::{node, run, run_until, start, step, write_files};
use crate::daemon::Swarmd;

/// `spend` reports its prompt as the tokens it used (an NDJSON usage
/// note), then passes with it; `nap` sleeps its prompt's seconds; `echo`
/// and `fail` as in the other flow tests.
const AGENTS: &str = r#"
[agents.spend]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
n=$(cat)
q='\"'
printf '%s\n' "{\"type\":\"progress\",\"stage\":\"usage\",\"note\":\"{${q}input_tokens${q}:$n,${q}output_tokens${q}:0}\"}"
printf '%s\n' "{\"type\":\"final\",\"content\":{\"kind\":\"inline\",\"value\":$n},\"ok\":true}"
''']
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }

[agents.nap]
kind = "process"
program = "/bin/sh"
args = ["-c", 's=$(cat); sleep "$s"; echo "slept $s"']
env = { PATH = "/usr/bin:/bin" }

[agents.echo]
kind = "lua"
script = "@DIR@/echo.lua"

[agents.fail]
kind = "lua"
script = "@DIR@/fail.lua"
"#;

async fn daemon() -> Swarmd {
    let sw = Swarmd::new(AGENTS);
    write_files(sw.dir(), &[]);
    sw.start().await
}

fn path(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

/// A run of the inline `flow`, ended (30 s at most).
async fn ended(sw: &Swarmd, flow: Value) -> Value {
    let (status, body) = start(sw, json!({"flow": flow, "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    run(sw, body["id"].as_str().unwrap(), 30).await
}

/// Under a budget of 250 tokens, a `try` around steps spending `spends`
/// one after the other; its catch sets `$.over`.
fn capped(spends: &[u64]) -> Value {
    let children: Vec<Value> = spends
        .iter()
        .enumerate()
        .map(|(i, n)| step("spend", &n.to_string(), &format!("$.s{i}")))
        .collect();
    json!({"name": "capped", "budget": {"max_tokens": 250},
        "body": {"kind": "try", "body": {"kind": "seq", "children": children},
            "catch": {"kind": "let", "at": path("$.over"), "value": {"op": "lit", "value": true}},
            "err_at": path("$.why")}})
}

#[tokio::test]
async fn a_try_around_the_body_is_the_branch_taken_past_the_flows_budget() {
    let sw = daemon().await;

    // The third step overshoots: its task stops at what was left (50).
    let view = ended(&sw, capped(&[100, 100, 100, 10])).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());
    let result = &view["result"];
    assert_eq!(result["over"], true, "{view}");
    assert_eq!(
        result["why"], "budget_exceeded: 300 tokens used, /budget.max_tokens is 250",
        "{view}"
    );
    assert_eq!(node(&view, "/body")["status"], "passed", "{view}");
    assert_eq!(node(&view, "/body/body")["status"], "failed", "{view}");

    // Used exactly, with a step still to run: the same branch, and the
    // fourth step never starts (as under a fan-out's budget).
    let view = ended(&sw, capped(&[100, 100, 50, 10])).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());
    assert_eq!(
        view["result"]["why"], "budget_exceeded: 250 tokens used, /budget.max_tokens is 250",
        "{view}"
    );
    assert!(
        view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["key"] != "/body/body/children/3" || n["tries"].is_null()),
        "{view}"
    );

    // Used exactly by a body that ends there: it passes.
    let view = ended(&sw, capped(&[100, 100, 50])).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert!(view["result"].get("over").is_none(), "{view}");
    assert_eq!(view["result"]["s2"], 50, "{view}");
}

/// The node at `key` once its try has ended.
async fn ended_try(sw: &Swarmd, id: &str, key: &str) -> Value {
    let view = run_until(sw, id, &format!("{key} ends"), |v| {
        v["nodes"].as_array().is_some_and(|nodes| {
            nodes
                .iter()
                .any(|n| n["key"] == key && !n["tries"][0]["ended_ms"].is_null())
        })
    })
    .await;
    node(&view, key).clone()
}

fn assert_cancelled(loser: &Value, key: &str) {
    assert_eq!(loser["status"], "cancelled", "{loser}");
    let why = format!("the flow no longer needs step {key}");
    assert!(
        loser["reason"].as_str().is_some_and(|r| r.ends_with(&why)),
        "{loser}"
    );
    assert_eq!(loser["tries"][0]["reason"], why.as_str(), "{loser}");
}

#[tokio::test]
async fn a_branch_a_join_no_longer_needs_shows_cancelled_wherever_the_fanout_sits() {
    let sw = daemon().await;

    // `any` in a sequence, a step after it.
    let flow = json!({"name": "first", "body": {"kind": "seq", "children": [
        {"kind": "fanout", "items": {"op": "lit", "value": ["0.3", "3"]},
         "bind": path("$.s"), "join": "any", "concurrency": 2, "out": path("$.won"),
         "body": {"kind": "step", "ref": "nap", "name": "b",
                  "in": {"op": "template", "text": "{{ s }}"}, "out": path("$.r")}},
        step("nap", "1", "$.after")]}});
    let (status, body) = start(&sw, json!({"flow": flow, "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let loser = "/body/children/0/body[1]";
    assert_cancelled(&ended_try(&sw, &id, loser).await, loser);
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_cancelled(node(&view, loser), loser);
    assert_eq!(node(&view, "/body/children/0/body[0]")["status"], "passed");

    // `all` inside a `try`: the first failure fails the fan-out, its
    // sibling is cancelled.
    let flow = json!({"name": "all", "body": {"kind": "seq", "children": [
        {"kind": "try", "err_at": path("$.why"),
         "catch": {"kind": "let", "at": path("$.caught"), "value": path("$.why")},
         "body": {"kind": "fanout", "items": {"op": "lit", "value": [0, 1]},
            "bind": path("$.i"), "join": "all", "concurrency": 2, "out": path("$.all"),
            "body": {"kind": "branch",
                "cond": {"op": "eq", "lhs": path("$.i"), "rhs": {"op": "lit", "value": 0}},
                "then": step("fail", "x", "$.r"), "else": step("nap", "3", "$.r")}}},
        step("nap", "1", "$.after")]}});
    let (status, body) = start(&sw, json!({"flow": flow, "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let sibling = "/body/children/0/body/body/else[1]";
    assert_cancelled(&ended_try(&sw, &id, sibling).await, sibling);
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_cancelled(node(&view, sibling), sibling);
    assert_eq!(
        node(&view, "/body/children/0/body/body/then[0]")["status"],
        "failed"
    );
    assert_eq!(node(&view, "/body/children/0/body")["status"], "failed");
    let caught = view["result"]["caught"].as_str().unwrap();
    assert!(caught.contains("no luck"), "{view}");
}

#[tokio::test]
async fn a_wait_timed_out_while_the_daemon_was_down_names_its_timeout_secs() {
    let mut sw = daemon().await;
    let flow = json!({"name": "ask", "body": {"kind": "try",
        "body": {"kind": "wait", "name": "w", "timeout_secs": 1, "out": path("$.ok")},
        "catch": {"kind": "let", "at": path("$.seen"), "value": path("$.why")},
        "err_at": path("$.why")}});
    let (status, body) = start(&sw, json!({"flow": flow, "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(run(&sw, &id, 0).await["status"], "waiting");
    sw.kill9().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    sw.restart().await;
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(
        view["result"]["seen"], "wait w: timed out after 1 s (timeout_secs)",
        "{view}"
    );
    assert_eq!(
        view["waits"][0]["reason"], "timed out after 1 s (timeout_secs)",
        "{view}"
    );
}
