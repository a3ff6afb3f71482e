//! Flow runs in the chaos run: runs started with idempotency keys while
//! the daemon is killed, of three shapes — a sequence through a branch
//! whose values pass from step to step, a fan-out whose first passing
//! branch wins (the others cancelled), and a sequence that waits for an
//! answer given around the kills. Steps retry what a kill interrupted.
//! The checks: every acknowledged run ends `passed`; a key names one run;
//! each result is the one its steps' deciding outcomes make; no branch is
//! taken twice and no step runs again once it passed; an acknowledged
//! answer is the one the run recorded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::chaos::checks::Check;
use crate::chaos::ledger::{Ctx, Reply};

/// At most this many runs, whatever the run's length.
const MAX_RUNS: u64 = 2_000;
/// How long the runs may take to end once the load stopped.
const SETTLE: Duration = Duration::from_secs(90);

/// What the chaos run was told about flow runs.
#[derive(Debug, Default)]
pub(super) struct FlowRecords {
    /// Key → (shape, n, every run id an acknowledgement named).
    pub runs: BTreeMap<String, (Shape, u64, Vec<String>)>,
    /// Run → the answer acknowledged (200) for its wait.
    pub answers: BTreeMap<String, Value>,
    /// Run → the last refusal (409) of an answer, for the report.
    pub refused: BTreeMap<String, Value>,
}

/// The three flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Chain,
    Race,
    Ask,
}

fn step(agent: &str, text: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": {"op": "template", "text": text},
           "out": {"op": "path", "at": out}, "retry": {"attempts": 6}})
}

fn flow(shape: Shape) -> Value {
    let body = match shape {
        Shape::Chain => json!({"kind": "seq", "children": [
            step("lua", "c{{ input.n }}", "$.a"),
            {"kind": "branch",
             "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.input.odd"},
                      "rhs": {"op": "lit", "value": true}},
             "then": step("proc", "{{ a }}-odd", "$.b"),
             "else": step("proc", "{{ a }}-even", "$.b")},
            step("lua", "{{ b.raw }}-end", "$.c")]}),
        Shape::Race => json!({"kind": "fanout",
            "items": {"op": "lit", "value": [0, 1, 2]},
            "bind": {"op": "path", "at": "$.i"}, "join": "any", "concurrency": 3,
            "out": {"op": "path", "at": "$.winner"},
            "body": step("lua", "w{{ input.n }}-{{ i }}", "$.r")}),
        Shape::Ask => json!({"kind": "seq", "children": [
            step("lua", "q{{ input.n }}", "$.q"),
            {"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.answer"}},
            step("proc", "{{ q }}-{{ answer.nonce }}", "$.done")]}),
    };
    json!({"name": format!("chaos-{shape:?}").to_lowercase(), "body": body})
}

/// Starts runs of the three shapes, each with its own key (about one in
/// seven sent again, which must name the same run).
pub(super) async fn producer(ctx: Arc<Ctx>) {
    for n in 0..MAX_RUNS {
        if ctx.stop_load.is_cancelled() {
            return;
        }
        let shape = match ctx.rng.below(3) {
            0 => Shape::Chain,
            1 => Shape::Race,
            _ => Shape::Ask,
        };
        let key = format!("f{n}");
        let body = json!({"flow": flow(shape), "input": {"n": n, "odd": n % 2 == 1},
                          "idempotency_key": key});
        for _ in 0..if ctx.rng.chance(15) { 2 } else { 1 } {
            start(&ctx, &key, shape, n, &body).await;
        }
        tokio::time::sleep(ctx.rng.millis(80, 250)).await;
    }
}

async fn start(ctx: &Ctx, key: &str, shape: Shape, n: u64, body: &Value) {
    let make = || {
        ctx.http
            .post(ctx.url("/v1/runs"))
            .bearer_auth(&ctx.admin)
            .json(body)
    };
    match ctx.send(make, &ctx.stop_all).await {
        Reply::Answer(200 | 201, answer) => {
            let id = answer["id"].as_str().unwrap_or_default().to_owned();
            ctx.ledger.with(|r| {
                r.flows
                    .runs
                    .entry(key.to_owned())
                    .or_insert((shape, n, Vec::new()))
                    .2
                    .push(id)
            });
            ctx.ledger.task_acked.notify_waiters();
        }
        Reply::Answer(status, answer) => ctx
            .ledger
            .unexpected(format!("POST /v1/runs {key}: {status} {answer}")),
        Reply::GaveUp => {}
    }
}

/// Answers the waits of acknowledged `Ask` runs, around the kills, until
/// the whole run stops.
pub(super) async fn answerer(ctx: Arc<Ctx>) {
    while !ctx.stop_all.is_cancelled() {
        let todo: Vec<(String, u64)> = ctx.ledger.with(|r| {
            r.flows
                .runs
                .values()
                .filter(|(shape, _, ids)| *shape == Shape::Ask && !ids.is_empty())
                .filter(|(_, _, ids)| !r.flows.answers.contains_key(&ids[0]))
                .map(|(_, n, ids)| (ids[0].clone(), *n))
                .collect()
        });
        for (run, n) in todo {
            let Some(view) = read(&ctx, &run).await else {
                continue;
            };
            if view["status"] != "waiting" {
                continue;
            }
            let value = json!({"nonce": format!("a{n}")});
            let make = || {
                ctx.http
                    .post(ctx.url(&format!("/v1/runs/{run}/waits/ok")))
                    .bearer_auth(&ctx.admin)
                    .json(&json!({"value": value}))
            };
            match ctx.send(make, &ctx.stop_all).await {
                Reply::Answer(200, _) => {
                    ctx.ledger
                        .with(|r| r.flows.answers.insert(run.clone(), value.clone()));
                    ctx.ledger.result_acked.notify_waiters();
                }
                // Answered already (an answer whose reply a kill lost).
                Reply::Answer(409, body) => {
                    ctx.ledger
                        .with(|r| r.flows.refused.insert(run.clone(), body));
                }
                Reply::GaveUp => {}
                Reply::Answer(status, body) => ctx
                    .ledger
                    .unexpected(format!("answer {run}: {status} {body}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn read(ctx: &Ctx, run: &str) -> Option<Value> {
    let make = || {
        ctx.http
            .get(ctx.url(&format!("/v1/runs/{run}")))
            .bearer_auth(&ctx.admin)
    };
    match ctx.send(make, &ctx.stop_all).await {
        Reply::Answer(200, view) => Some(view),
        _ => None,
    }
}

/// Waits (bounded) until every acknowledged run ended.
pub(super) async fn settle(ctx: &Ctx) {
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        let runs: Vec<String> = ctx.ledger.with(|r| {
            r.flows
                .runs
                .values()
                .filter_map(|(_, _, ids)| ids.first().cloned())
                .collect()
        });
        let mut open = 0;
        for run in runs {
            let view = read(ctx, &run).await;
            if view.is_none_or(|v| matches!(v["status"].as_str(), Some("running" | "waiting"))) {
                open += 1;
            }
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The flow invariants; (checks, runs acknowledged).
pub(super) async fn checks(ctx: &Ctx) -> (Vec<Check>, usize) {
    let (runs, answers, refused) = ctx.ledger.with(|r| {
        (
            r.flows.runs.clone(),
            r.flows.answers.clone(),
            r.flows.refused.clone(),
        )
    });
    let mut two = Vec::new();
    let mut not_passed = Vec::new();
    let mut wrong = Vec::new();
    let mut twice = Vec::new();
    let mut lost = Vec::new();
    for (key, (shape, n, ids)) in &runs {
        let Some(id) = ids.first() else { continue };
        if ids.iter().any(|other| other != id) {
            two.push(format!("{key}: {ids:?}"));
        }
        let Some(view) = read(ctx, id).await else {
            not_passed.push(format!("{key} {id}: unreadable"));
            continue;
        };
        if view["status"] != "passed" {
            not_passed.push(format!(
                "{key} {id}: {} {} waits {} last refusal {}",
                view["status"],
                view["error"],
                view["waits"],
                refused.get(id).unwrap_or(&Value::Null)
            ));
            continue;
        }
        let result = &view["result"];
        let parity = if n % 2 == 1 { "odd" } else { "even" };
        let right = match shape {
            Shape::Chain => result["c"] == format!("c{n}-{parity}-end").as_str(),
            Shape::Race => (0..3).any(|i| result["winner"]["r"] == format!("w{n}-{i}").as_str()),
            Shape::Ask => {
                let nonce = &view["waits"][0]["answer"]["nonce"];
                result["done"]["raw"] == format!("q{n}-{}", nonce.as_str().unwrap_or("?")).as_str()
            }
        };
        if !right {
            wrong.push(format!("{key} {id}: {result}"));
        }
        for node in view["nodes"].as_array().into_iter().flatten() {
            let tries = node["tries"].as_array().cloned().unwrap_or_default();
            if let Some(pass) = tries.iter().position(|t| t.get("output").is_some())
                && pass + 1 != tries.len()
            {
                twice.push(format!("{key} {id} {}: a try after the pass", node["key"]));
            }
        }
        if *shape == Shape::Chain {
            let other = if n % 2 == 1 { "else" } else { "then" };
            let taken_wrong = view["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|node| node["key"] == format!("/body/children/1/{other}").as_str());
            if taken_wrong {
                twice.push(format!("{key} {id}: the branch took `{other}`"));
            }
        }
        if let Some(acked) = answers.get(id)
            && view["waits"][0]["answer"] != *acked
        {
            lost.push(format!(
                "{key} {id}: acked {acked}, stored {}",
                view["waits"][0]["answer"]
            ));
        }
    }
    let checks = vec![
        Check {
            name: "run_key_made_two_runs",
            offenders: two,
        },
        Check {
            name: "acked_run_not_passed",
            offenders: not_passed,
        },
        Check {
            name: "run_result_wrong",
            offenders: wrong,
        },
        Check {
            name: "step_or_branch_twice",
            offenders: twice,
        },
        Check {
            name: "acked_answer_lost",
            offenders: lost,
        },
    ];
    (checks, runs.len())
}
