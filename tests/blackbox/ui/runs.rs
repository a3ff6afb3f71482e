//! The Runs view in headless Chromium against the real daemon: a flow from
//! the daemon's flows directory (a fan-out of three Lua steps, a Lua step,
//! a wait, a last Lua step) started over HTTP is drawn as its graph with
//! the fan-out body's instances aggregated ("3 passed"), the step passed
//! with its try linking to its task, and the wait open with its prompt;
//! the wait's box starts empty and an empty answer is refused in the page;
//! the wait is answered by clicking its button, after which the page
//! shows the run passed and its result as the `run_changed` events
//! arrive, and the run list shows it passed. A second run is cancelled
//! with its page's Cancel button. An observer sees the open wait's prompt
//! but no answer box and no Cancel. With
//! `SWARMD_UI_SCREENSHOTS=<dir>` the waiting run is written there as
//! `run-view.png`.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::harness::parts;
use crate::ui::Browser;
use crate::ui::dashboard::observer_token;

/// `echo` upper-cases its prompt (Lua).
const AGENTS: &str = r#"
[agents.echo]
kind = "lua"
script = "@DIR@/echo.lua"

[flows_dir]
path = "@DIR@/flows"
"#;

fn step(name: &str, text: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": "echo", "name": name,
           "in": {"op": "template", "text": text}, "out": {"op": "path", "at": out}})
}

/// Reviews three parts at once, drafts, waits for an approval, ships.
fn release() -> Value {
    json!({"name": "release", "output": {"op": "path", "at": "$.shipped"},
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": ["api", "cli", "docs"]},
             "bind": {"op": "path", "at": "$.part"}, "join": "all", "concurrency": 3,
             "out": {"op": "path", "at": "$.reviews"},
             "body": step("review", "review {{ part }}", "$.review")},
            step("draft", "draft {{ input.what }}", "$.draft"),
            {"kind": "wait", "name": "approve", "prompt": {"op": "template", "text": "ship {{ draft }}?"},
             "schema": {"type": "object", "required": ["go"], "properties": {"go": {"type": "boolean"}}},
             "out": {"op": "path", "at": "$.answer"}},
            step("ship", "ship {{ draft }}", "$.shipped")]}})
}

/// A script answering `[data-status, state text]` of the graph box at `pointer`.
fn graph_node(pointer: &str) -> String {
    format!(
        "const n = document.querySelector('#run-graph .gnode[data-pointer=\"{pointer}\"]');
         return n && [n.dataset.status, n.querySelector(':scope > .ghead .gstate').textContent]"
    )
}

async fn run_view(sw: &Swarmd, id: &str) -> Value {
    let (status, body) = parts(
        sw.get(&format!("/v1/runs/{id}"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_run_is_drawn_with_its_states_and_its_wait_answered_by_a_click() {
    let sw = Swarmd::new(AGENTS);
    std::fs::write(sw.dir().join("echo.lua"), "return string.upper(prompt)\n").unwrap();
    std::fs::create_dir_all(sw.dir().join("flows")).unwrap();
    std::fs::write(sw.dir().join("flows/release.json"), release().to_string()).unwrap();
    let sw = sw.start().await;
    let (status, body) = parts(
        sw.post("/v1/runs", &sw.admin)
            .json(&json!({"flow": "release", "input": {"what": "notes"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();

    let browser = Browser::start().await;
    browser.client.set_window_size(1280, 1000).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show(&format!("#/run/{id}")).await;

    // The wait opens once the fan-out and the draft passed.
    let prompt = browser
        .text("#run-waits form[data-wait=\"approve\"] .wait-prompt")
        .await;
    assert_eq!(prompt, "ship DRAFT NOTES?");
    assert_eq!(browser.text("#run-status").await, "waiting");
    let wait = browser
        .until("the wait's box", &graph_node("/body/children/2"))
        .await;
    assert_eq!(wait, json!(["waiting", "1 waiting"]));
    let draft = browser
        .until("the draft's box", &graph_node("/body/children/1"))
        .await;
    assert_eq!(draft, json!(["passed", "1 passed"]));
    let reviews = browser
        .until(
            "the fan-out body's box",
            &graph_node("/body/children/0/body"),
        )
        .await;
    assert_eq!(reviews, json!(["passed", "3 passed"]));
    let ship = browser
        .until("the last step's box", &graph_node("/body/children/3"))
        .await;
    assert_eq!(ship, json!(["pending", "not reached"]));
    // The draft's try links to the task that ran it.
    let view = run_view(&sw, &id).await;
    let draft_task = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["key"] == "/body/children/1")
        .and_then(|n| n["tries"][0]["task_id"].as_str())
        .unwrap_or_else(|| panic!("no draft task in {view}"))
        .to_owned();
    let link = browser
        .js("return document.querySelector('#run-graph .gnode[data-pointer=\"/body/children/1\"] a.try-task').getAttribute('href')")
        .await;
    assert_eq!(link, json!(format!("#/task/{draft_task}")));
    assert!(
        browser
            .js("return document.getElementById('run-cancel') !== null")
            .await
            == json!(true),
        "a waiting run offers Cancel"
    );
    browser.capture("run-view").await;

    // The answer box starts empty (a hint, no value): an empty answer is
    // refused in the page, so no click approves what nobody typed.
    let form = "#run-waits form[data-wait=\"approve\"]";
    let empty = browser
        .js(&format!(
            "const box = document.querySelector('{form} textarea');
             return [box.value, box.placeholder.length > 0]"
        ))
        .await;
    assert_eq!(empty, json!(["", true]));
    browser.click(&format!("{form} button.wait-submit")).await;
    let refusal = browser.text(&format!("{form} .wait-error")).await;
    assert!(refusal.contains("type an answer"), "{refusal}");
    assert_eq!(run_view(&sw, &id).await["status"], "waiting");

    // A non-JSON answer is refused in the page; the run still waits.
    browser
        .js(&format!(
            "document.querySelector('{form} textarea').value = 'yes please'; return true"
        ))
        .await;
    browser.click(&format!("{form} button.wait-submit")).await;
    let refusal = browser.text(&format!("{form} .wait-error")).await;
    assert!(refusal.starts_with("not JSON"), "{refusal}");
    assert_eq!(run_view(&sw, &id).await["status"], "waiting");

    browser
        .js(&format!(
            "document.querySelector('{form} textarea').value = '{{\"go\": true}}'; return true"
        ))
        .await;
    browser.click(&format!("{form} button.wait-submit")).await;
    browser
        .until(
            "the run passed in the page",
            "return document.getElementById('run-status')?.textContent === 'passed'",
        )
        .await;
    assert_eq!(browser.text("#run-result").await, "SHIP DRAFT NOTES");
    let ship = browser
        .until("the last step's box", &graph_node("/body/children/3"))
        .await;
    assert_eq!(ship, json!(["passed", "1 passed"]));
    assert!(
        browser
            .js("return document.querySelector('#run-waits form') === null && document.getElementById('run-cancel') === null")
            .await
            == json!(true),
        "a passed run has no open wait and no Cancel"
    );
    let view = run_view(&sw, &id).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"], "SHIP DRAFT NOTES", "{view}");
    assert_eq!(view["waits"][0]["answer"], json!({"go": true}), "{view}");

    // The list links the run and shows it passed.
    browser.click("#nav a[data-view=\"run\"]").await;
    let row = format!("#run-rows tr[data-id=\"{id}\"]");
    assert_eq!(browser.text(&format!("{row} .status")).await, "passed");
    assert_eq!(browser.text(&format!("{row} .flow")).await, "release");
    browser.click(&format!("{row} a")).await;
    browser
        .until(
            "the run's page from the list",
            &format!("return document.getElementById('run-id')?.textContent === '{id}'"),
        )
        .await;

    // A second run, cancelled from its page while it waits.
    let (status, body) = parts(
        sw.post("/v1/runs", &sw.admin)
            .json(&json!({"flow": "release", "input": {"what": "more"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let second = body["id"].as_str().unwrap().to_owned();
    browser.show(&format!("#/run/{second}")).await;
    browser.text("#run-waits form[data-wait=\"approve\"]").await;
    browser.js("window.confirm = () => true; return true").await;
    browser.click("#run-cancel").await;
    browser
        .until(
            "the cancelled run in the page",
            "return document.getElementById('run-status')?.textContent === 'cancelled'",
        )
        .await;
    assert_eq!(run_view(&sw, &second).await["status"], "cancelled");
    browser.client.clone().close().await.unwrap();
}

/// An observer may neither answer a run's wait nor cancel the run
/// (docs/security.md, the gate): its page shows the wait's prompt and no
/// answer box, button or Cancel.
#[tokio::test]
async fn an_observer_sees_a_runs_wait_without_an_answer_box() {
    let sw = Swarmd::new(AGENTS);
    std::fs::write(sw.dir().join("echo.lua"), "return string.upper(prompt)\n").unwrap();
    std::fs::create_dir_all(sw.dir().join("flows")).unwrap();
    std::fs::write(sw.dir().join("flows/release.json"), release().to_string()).unwrap();
    let sw = sw.start().await;
    let (status, body) = parts(
        sw.post("/v1/runs", &sw.admin)
            .json(&json!({"flow": "release", "input": {"what": "notes"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let observer = observer_token(&sw).await;

    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&observer).await;
    assert_eq!(browser.text("#who").await, "observer");
    browser.show(&format!("#/run/{id}")).await;
    let prompt = browser
        .text("#run-waits [data-wait=\"approve\"] .wait-prompt")
        .await;
    assert_eq!(prompt, "ship DRAFT NOTES?");
    assert_eq!(browser.text("#run-status").await, "waiting");
    let offered = browser
        .js("return [document.querySelectorAll('#run-waits form, #run-waits textarea, #run-waits button').length,
                    document.getElementById('run-cancel') !== null]")
        .await;
    assert_eq!(
        offered,
        json!([0, false]),
        "an observer is offered nothing to do"
    );
    assert_eq!(run_view(&sw, &id).await["status"], "waiting");
    browser.client.clone().close().await.unwrap();
}
