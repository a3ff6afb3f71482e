//! Runs outlive the daemon: after kill -9 a run continues from its stored
//! journal — the finished step is not run again, the step in flight is the
//! same task, an open wait keeps waiting and is answered after.

use serde_json::json;

use super::{daemon, node, run, run_until, start, step};

#[tokio::test]
async fn a_run_continues_after_kill_9_without_running_a_finished_step_again() {
    let flow = json!({"name": "long", "body": {"kind": "seq", "children": [
        step("echo", "first", "$.a"),
        step("hold", "second", "$.b"),
        {"kind": "wait", "name": "ok", "out": {"op": "path", "at": "$.ok"}},
        step("echo", "third {{ ok }}", "$.c")]}});
    let mut sw = daemon(&[("long", flow)]).start().await;
    let (_, body) = start(&sw, json!({"flow": "long"})).await;
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run_until(&sw, &id, "the held step starts", |v| {
        v["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["key"] == "/body/children/1"))
    })
    .await;
    let first = node(&view, "/body/children/0")["tries"][0]["task_id"].clone();
    let held = node(&view, "/body/children/1")["tries"][0]["task_id"].clone();

    sw.kill9().await;
    sw.restart().await;
    std::fs::write(sw.dir().join("release"), "").unwrap();
    let view = run_until(&sw, &id, "the wait opens again", |v| {
        v["status"] == "waiting"
    })
    .await;
    assert_eq!(
        node(&view, "/body/children/0")["tries"][0]["task_id"],
        first,
        "{view}"
    );
    let tries = node(&view, "/body/children/1")["tries"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(tries.len(), 1, "{view}");
    assert_eq!(tries[0]["task_id"], held, "{view}");

    // Killed again while waiting: the wait is still open and answerable.
    sw.kill9().await;
    sw.restart().await;
    let view = run(&sw, &id, 0).await;
    assert_eq!(view["status"], "waiting", "{view}");
    let response = sw
        .post(&format!("/v1/runs/{id}/waits/ok"), &sw.admin)
        .json(&json!({"value": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"]["c"], "THIRD YES");
    // One task per step: nothing ran twice.
    let tasks: serde_json::Value = sw
        .get("/v1/tasks?limit=50", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 3, "{tasks}");
}
