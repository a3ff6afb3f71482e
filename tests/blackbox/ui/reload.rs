//! Loading the dashboard again and again in one tab renders every time at
//! once. A browser holds six connections per host; a page's event streams
//! that outlived it (before the page closed them on `pagehide`) stalled the
//! next load until the daemon ended them. Each page here holds two streams
//! (the event feed and a running task's output), so without the `pagehide`
//! close the third load stalls: checked by removing it, which fails this
//! test at load 3.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::daemon::Swarmd;
use crate::ui::Browser;
use crate::ui::dashboard::AGENTS;

/// Longer than a healthy reload on a busy machine, far shorter than a
/// stalled one (which waits for a leaked stream to end).
const RELOAD_WITHIN: Duration = Duration::from_secs(8);

#[tokio::test]
async fn ten_reloads_of_a_live_task_page_each_render_at_once() {
    let sw = Swarmd::new(AGENTS).start().await;
    let (status, body) = sw
        .create(json!({"agent": "ticker", "prompt": "tick"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show(&format!("#/task/{task}")).await;
    let live_output = "return document.getElementById('live')?.dataset.state === 'live'
        && document.querySelectorAll('#output .progress li').length >= 1
        && window.__reloaded === undefined";
    browser.until("the task's live output", live_output).await;
    for round in 1..=10 {
        browser.js("window.__reloaded = 1; return true").await;
        let started = Instant::now();
        // A new load of the page each time, as a person typing the URL
        // again does (a plain reload does not show the stall).
        let url = sw.url(&format!("/ui?round={round}#/task/{task}"));
        browser.client.goto(&url).await.unwrap();
        // The reloaded page (no marker) with both streams live again.
        loop {
            let ready = browser
                .client
                .execute(live_output, Vec::new())
                .await
                .unwrap_or(serde_json::Value::Null);
            if ready == json!(true) {
                break;
            }
            assert!(
                started.elapsed() < RELOAD_WITHIN,
                "reload {round} did not render its live streams within {RELOAD_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (status, body) = crate::harness::parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    browser.client.clone().close().await.unwrap();
}
