//! Runs over HTTP: a sequence passing values, refusals naming the field
//! or listing every problem, a fan-out whose loser is cancelled at its
//! worker, waits answered with their own token only, cancel, and
//! idempotent starts.

use serde_json::{Value, json};

use super::{daemon, node, run, run_until, start, step};

fn plan_do() -> Value {
    json!({"name": "plan-do",
        "input_schema": {"type": "object", "required": ["topic"],
                         "properties": {"topic": {"type": "string"}}},
        "output": {"op": "path", "at": "$.done"},
        "body": {"kind": "seq", "children": [
            step("echo", "plan {{ input.topic }}", "$.plan"),
            step("echo", "do {{ plan }}", "$.done")]}})
}

#[tokio::test]
async fn a_sequence_runs_each_step_as_a_task_and_passes_values() {
    let sw = daemon(&[("plan-do", plan_do())]).start().await;
    let flows: Value = sw
        .get("/v1/flows", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(flows["flows"][0]["name"], "plan-do", "{flows}");

    let (status, body) = start(&sw, json!({"flow": "plan-do", "input": {"topic": "tea"}})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"], "DO PLAN TEA");
    for key in ["/body/children/0", "/body/children/1"] {
        let n = node(&view, key);
        assert_eq!(n["status"], "passed", "{n}");
        let task = n["tries"][0]["task_id"].as_str().unwrap();
        let task = sw.task(task).await;
        assert_eq!(task["status"], "pass", "{task}");
        assert_eq!(task["metadata"]["flow_run"]["run"], id.as_str(), "{task}");
    }
    // The run's transitions are in the event log.
    let events: Value = sw
        .get("/v1/events?after_seq=0&limit=500", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["kind"] == "run_changed" && e["event"]["run_id"] == id.as_str())
        .filter_map(|e| e["event"]["status"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"running"), "{events}");
    assert_eq!(kinds.last(), Some(&"passed"), "{events}");
}

#[tokio::test]
async fn bad_input_and_a_flow_with_problems_are_refused_before_anything_runs() {
    let sw = daemon(&[("plan-do", plan_do())]).start().await;
    let (status, body) = start(&sw, json!({"flow": "plan-do", "input": {"topic": 7}})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_input")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains("/topic"), "{body}");

    let bad = json!({"name": "bad", "body": {"kind": "seq", "children": [
        step("nobody", "x", "$.a"),
        {"kind": "loop", "counter": {"op": "path", "at": "$.i"},
         "cond": {"op": "lit", "value": true}, "body": step("echo", "{{ missing }}", "$.b")},
        // A template that doubles a string each instruction: refused
        // before it is stored, not rendered until memory runs out.
        step("echo", "{{ input ~ input ~ input ~ input }}", "$.c")]}});
    let (status, body) = start(&sw, json!({"flow": bad})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_flow")),
        "{body}"
    );
    let codes: Vec<(&str, &str)> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pointer"].as_str().unwrap(), p["code"].as_str().unwrap()))
        .collect();
    assert!(
        codes.contains(&("/body/children/0/ref", "unknown_agent")),
        "{codes:?}"
    );
    assert!(
        codes.contains(&("/body/children/1/max", "loop_without_max")),
        "{codes:?}"
    );
    assert!(
        codes
            .iter()
            .any(|(at, code)| at.starts_with("/body/children/2") && *code == "bad_expression"),
        "{codes:?}"
    );
    // A document that is not flow IR names the place, however deep.
    let mut typo = step("echo", "x", "$.a");
    typo["ref"] = json!(7);
    let not_ir = json!({"name": "t", "body": {"kind": "seq", "children": [
        step("echo", "x", "$.a"), typo]}});
    let (status, body) = start(&sw, json!({"flow": not_ir})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_flow")),
        "{body}"
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("/body/children/1/ref: 7"), "{body}");
    let (status, body) = start(&sw, json!({"flow": "nothing-here"})).await;
    assert_eq!(status, 404, "{body}");
    let tasks: Value = sw
        .get("/v1/tasks", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tasks["tasks"].as_array().map(Vec::len), Some(0), "{tasks}");
}

#[tokio::test]
async fn a_fanout_any_takes_the_first_pass_and_cancels_the_loser_at_its_worker() {
    let race = json!({"name": "race", "body": {"kind": "fanout",
        "items": {"op": "lit", "value": ["fast", "slow"]},
        "bind": {"op": "path", "at": "$.which"}, "join": "any", "concurrency": 2,
        "out": {"op": "path", "at": "$.winner"},
        "body": {"kind": "branch",
            "cond": {"op": "eq", "lhs": {"op": "path", "at": "$.which"}, "rhs": {"op": "lit", "value": "fast"}},
            "then": step("echo", "{{ which }}", "$.r"),
            "else": step("hold", "{{ which }}", "$.r")}}});
    let sw = daemon(&[("race", race)]).start().await;
    let (status, body) = start(&sw, json!({"flow": "race"})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"]["winner"]["r"], "FAST", "{view}");
    let loser = node(&view, "/body/body/else[1]");
    assert_eq!(loser["status"], "cancelled", "{loser}");
    let task = loser["tries"][0]["task_id"].as_str().unwrap();
    let task = sw.finished(task).await;
    assert_eq!(task["status"], "cancelled", "{task}");
}

fn approval() -> Value {
    json!({"name": "approve", "body": {"kind": "seq", "children": [
        step("echo", "draft {{ input.what }}", "$.draft"),
        {"kind": "wait", "name": "ok", "prompt": {"op": "template", "text": "ship {{ draft }}?"},
         "schema": {"type": "object", "required": ["go"], "properties": {"go": {"type": "boolean"}}},
         "out": {"op": "path", "at": "$.answer"}},
        {"kind": "branch", "cond": {"op": "path", "at": "$.answer.go"},
         "then": step("echo", "ship {{ draft }}", "$.shipped"),
         "else": {"kind": "let", "at": {"op": "path", "at": "$.shipped"}, "value": {"op": "lit", "value": "no"}}}]}})
}

#[tokio::test]
async fn a_wait_is_answered_with_its_own_token_and_a_matching_answer_only() {
    let sw = daemon(&[("approve", approval())]).start().await;
    let (_, body) = start(&sw, json!({"flow": "approve", "input": {"what": "v2"}})).await;
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run_until(&sw, &id, "the wait opens", |v| v["status"] == "waiting").await;
    let wait = &view["waits"][0];
    assert_eq!(wait["prompt"], "ship DRAFT V2?", "{view}");
    let token = wait["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("swt1."), "{token}");
    let path = format!("/v1/runs/{id}/waits/ok");

    // Another run's token, and a forged one, are refused.
    let (_, other) = start(&sw, json!({"flow": "approve", "input": {"what": "v3"}})).await;
    let other_id = other["id"].as_str().unwrap();
    let other_view = run_until(&sw, other_id, "the wait opens", |v| {
        v["status"] == "waiting"
    })
    .await;
    let other_token = other_view["waits"][0]["token"].as_str().unwrap();
    for bad in [
        other_token,
        "swt1.0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let response = sw
            .post(&path, bad)
            .json(&json!({"value": {"go": true}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{bad}");
    }
    // A senior role token carries `answer` for senior questions, not for
    // a run's waits: without the wait's token it is refused.
    let senior = sw
        .cli(&["token", "mint", "--role", "senior", "--ttl", "600"])
        .await;
    let response = sw
        .post(&path, senior.trim())
        .json(&json!({"value": {"go": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // The wait's token reads nothing of the run and cancels nothing: it is
    // refused as a credential for one route only.
    let cancel = format!("/v1/runs/{id}/cancel");
    for response in [
        sw.get(&format!("/v1/runs/{id}"), &token)
            .send()
            .await
            .unwrap(),
        sw.post(&cancel, &token)
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(response.status(), 403);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "forbidden", "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("only answers its own wait"),
            "{body}"
        );
    }
    // An answer that does not match the schema names the field.
    let response = sw
        .post(&path, &token)
        .json(&json!({"value": {"go": "yes"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "invalid_input", "{body}");
    assert!(body["error"].as_str().unwrap().contains("/go"), "{body}");

    let response = sw
        .post(&path, &token)
        .json(&json!({"value": {"go": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The token's answer tells the run's state and nothing else of it.
    let answered: Value = response.json().await.unwrap();
    let mut keys: Vec<&str> = answered
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["id", "status", "wait"], "{answered}");
    assert_eq!(answered["id"], id.as_str());
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"]["shipped"], "SHIP DRAFT V2", "{view}");
    // The same token cannot answer again.
    let response = sw
        .post(&path, &token)
        .json(&json!({"value": {"go": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
}

#[tokio::test]
async fn cancel_stops_the_running_step_and_a_key_starts_one_run() {
    let held = json!({"name": "held", "body": step("hold", "x", "$.r")});
    let sw = daemon(&[("held", held)]).start().await;
    let body = json!({"flow": "held", "idempotency_key": "once"});
    let (status, first) = start(&sw, body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = start(&sw, body).await;
    assert_eq!((status, &again["id"]), (200, &first["id"]), "{again}");
    let id = first["id"].as_str().unwrap().to_owned();
    let view = run_until(&sw, &id, "the step starts", |v| {
        v["nodes"].as_array().is_some_and(|n| !n.is_empty())
    })
    .await;
    let task = node(&view, "/body")["tries"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = sw
        .post(&format!("/v1/runs/{id}/cancel"), &sw.admin)
        .json(&json!({"reason": "changed my mind"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let view = run(&sw, &id, 0).await;
    assert_eq!(
        (view["status"].as_str(), view["error"].as_str()),
        (Some("cancelled"), Some("changed my mind"))
    );
    assert_eq!(sw.finished(&task).await["status"], "cancelled");
    let response = sw
        .post(&format!("/v1/runs/{id}/cancel"), &sw.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "run_terminal", "{body}");
}
