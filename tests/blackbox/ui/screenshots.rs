//! Every view renders with real data and is captured: the overview, the
//! task list, a running task's detail, the sessions, the agents and an
//! operator session's own task list (the owner's view). The PNGs are
//! checked here; with `SWARMD_UI_SCREENSHOTS=<dir>` they are also written
//! there (`scripts/ui-screenshots.sh` writes `docs/img/`).

use serde_json::json;

use crate::daemon::{Swarmd, read_pid};
use crate::ui::Browser;

const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
echo $$ > "@DIR@/$SWARM_TASK_ID.pid.tmp" && mv "@DIR@/$SWARM_TASK_ID.pid.tmp" "@DIR@/$SWARM_TASK_ID.pid"
printf '{"type":"progress","stage":"plan","note":"reading the repository"}\n'
printf '{"type":"partial","chunk":{"kind":"inline","value":"Planning the change: "}}\n'
sleep 0.2
printf '{"type":"progress","stage":"edit","note":"3 of 7 files"}\n'
printf '{"type":"partial","chunk":{"kind":"inline","value":"editing src/lib.rs, "}}\n'
printf '{"type":"artifact","name":"plan.md","content":{"kind":"inline","value":"1. read\\\\n2. edit\\\\n3. test"}}\n'
printf '%s\n' '{"type":"progress","stage":"usage","note":"{\\\"cli\\\":\\\"claude\\\",\\\"input_tokens\\\":1200,\\\"output_tokens\\\":340,\\\"turns\\\":3,\\\"cost_usd\\\":0.0123}"}'
sleep 30
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }

[agents.echo]
kind = "process"
program = "/bin/cat"

[agents.lint]
kind = "process"
program = "/bin/sh"
args = ["-c", "echo 'style: 2 warnings'; exit 1"]
stdin = "none"
"#;

#[tokio::test]
async fn every_view_renders_with_real_data_and_is_captured() {
    let sw = Swarmd::new(AGENTS).start().await;
    let main_ai = sw
        .login(json!({"roles": ["main-ai"], "description": "Claude Code on the billing repo"}))
        .await;
    for (agent, prompt) in [
        ("echo", "Summarise the failing test in tests/api.rs"),
        ("lint", "Lint crates/engine"),
        ("echo", "Draft the release notes for 0.4"),
        ("echo", "List the TODOs in src/"),
    ] {
        let (status, body) = sw
            .create(json!({"agent": agent, "prompt": prompt, "wait_secs": 10}))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // A task the session owns: its `task_done` parks, as no socket is attached.
    let (status, body) = crate::harness::parts(
        sw.post("/v1/tasks", &main_ai.token)
            .json(&json!({"agent": "echo", "prompt": "Review PR 42", "wait_secs": 10}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = sw
        .create(
            json!({"agent": "coder", "prompt": "Add retries to the HTTP client",
                       "input": {"repo": "billing", "branch": "main"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let running = body["task_id"].as_str().unwrap().to_owned();
    read_pid(&sw.dir().join(format!("{running}.pid"))).await;

    let browser = Browser::start().await;
    browser.client.set_window_size(1280, 1000).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.capture("dashboard-signin").await;
    browser.sign_in(&sw.admin).await;
    browser
        .until(
            "the overview's numbers",
            "return document.getElementById('ov-running')?.textContent === '1'",
        )
        .await;
    assert_eq!(browser.text("#ov-sessions").await, "0 of 1");
    // The daemon's first sample of its history (5 s after start) gives the rates.
    browser
        .until(
            "the overview's rates",
            "return document.getElementById('ov-rates')?.textContent.includes('/s')",
        )
        .await;
    browser.capture("dashboard-overview").await;

    browser.show("#/tasks").await;
    browser
        .until(
            "six rows",
            "return document.querySelectorAll('#task-rows tr').length === 6",
        )
        .await;
    browser.capture("dashboard-tasks").await;

    browser.show(&format!("#/task/{running}")).await;
    browser
        .until(
            "the running task's artifact",
            "return document.querySelector('#output .artifacts li') !== null",
        )
        .await;
    assert_eq!(browser.text("#task-status").await, "running");
    let usage = browser.text("#output .usage").await;
    assert_eq!(
        usage,
        "Usage: claude · 1200 tokens in · 340 out · 3 turns · $0.0123"
    );
    browser.capture("dashboard-task").await;

    browser.show("#/sessions").await;
    let roles = browser.text("#session-rows tr td:nth-child(3)").await;
    assert_eq!(roles, "main-ai");
    browser
        .until(
            "the parked task_done",
            "return document.querySelector('#session-rows .parked')?.textContent === '1'",
        )
        .await;
    browser.capture("dashboard-sessions").await;
    // Its tasks link lists the one task it owns.
    browser.click("#session-rows a").await;
    browser
        .until(
            "the session's tasks",
            "const rows = document.querySelectorAll('#task-rows tr'); return rows.length === 1 && location.hash.includes('session=S-')",
        )
        .await;

    // Agents: the running coder, the lint that was blocked, echo's passes.
    browser.show("#/agents").await;
    browser
        .until(
            "the agents table",
            "return document.querySelector('#agent-rows tr[data-agent=coder] .running')?.textContent === '1'",
        )
        .await;
    assert_eq!(
        browser.text("#agent-rows tr[data-agent=echo] .pass").await,
        "4"
    );
    assert_eq!(
        browser
            .text("#agent-rows tr[data-agent=lint] .blocked")
            .await,
        "1"
    );
    browser.capture("dashboard-agents").await;

    // The owner's view: the MainAI's own token sees its own task only.
    browser.sign_out().await;
    browser.sign_in(&main_ai.token).await;
    assert_eq!(
        browser.text("#who").await,
        format!("session {}", main_ai.sid)
    );
    browser.show("#/tasks").await;
    browser
        .until(
            "the owner's one task",
            "const rows = document.querySelectorAll('#task-rows tr'); return rows.length === 1 && rows[0].textContent.includes('Review PR 42')",
        )
        .await;
    browser.capture("dashboard-owner").await;

    let (status, body) = crate::harness::parts(
        sw.post(&format!("/v1/tasks/{running}/cancel"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    browser.client.clone().close().await.unwrap();
}
