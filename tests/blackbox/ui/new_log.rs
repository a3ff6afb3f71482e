//! A page whose daemon came back with a new event log: a memory-store
//! daemon restarted under an open dashboard numbers its events from 1
//! again, so the page's cursor is past the new log's end and the daemon
//! refuses it (`400`). The page then reads its view afresh and follows
//! the new log, instead of retrying the refused cursor for ever.

use crate::daemon::Swarmd;
use crate::ui::Browser;

const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

#[tokio::test]
async fn a_page_follows_a_daemon_whose_log_started_again() {
    let mut sw = Swarmd::with_store(AGENTS, "backend = \"memory\"")
        .start()
        .await;
    let mut before = Vec::new();
    for i in 0..5 {
        before.push(
            sw.create_as(
                &sw.admin,
                serde_json::json!({"agent": "cat", "prompt": format!("before {i}")}),
            )
            .await,
        );
    }
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show("#/tasks").await;
    browser
        .until(
            "the five tasks, live",
            "return document.querySelectorAll('#task-rows tr').length === 5
                && document.getElementById('live').dataset.state === 'live'",
        )
        .await;

    sw.kill9().await;
    sw.restart().await;
    // The new log is shorter than what the page saw: its cursor is refused.
    let after = sw
        .create_as(
            &sw.admin,
            serde_json::json!({"agent": "cat", "prompt": "after the restart"}),
        )
        .await;
    browser
        .until(
            "the new log's task alone, live",
            &format!(
                "const rows = [...document.querySelectorAll('#task-rows tr')];
                 return rows.length === 1 && rows[0].dataset.id === {}
                     && document.getElementById('live').dataset.state === 'live'",
                serde_json::json!(after)
            ),
        )
        .await;
    assert!(!before.contains(&after));
}
