//! The dashboard driven in headless Chromium against the real daemon: sign
//! in, tasks appear live, a running NDJSON task's progress arrives live and
//! the UI cancels it once confirmed (declined, nothing happens; confirmed,
//! its process is gone), worker output with a script
//! payload renders as text and runs nothing, an observer gets no cancel,
//! and the page recovers across a kill -9 and restart of the daemon with no
//! row lost or repeated.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::daemon::{Swarmd, eventually, process_gone, read_pid};
use crate::ui::Browser;

/// `ticker`: writes its pid, then prints a progress line and a partial
/// chunk every 100 ms (at most 60 s) as NDJSON; `cat` prints its prompt.
pub(super) const AGENTS: &str = r#"
[agents.ticker]
kind = "process"
program = "/bin/sh"
args = ["-c", """
echo $$ > "@DIR@/$SWARM_TASK_ID.pid.tmp" && mv "@DIR@/$SWARM_TASK_ID.pid.tmp" "@DIR@/$SWARM_TASK_ID.pid"
i=0
while [ "$i" -lt 600 ]; do
  i=$((i+1))
  printf '{"type":"progress","stage":"tick","note":"tick %s"}\n' "$i"
  printf '{"type":"partial","chunk":{"kind":"inline","value":"p%s "}}\n' "$i"
  sleep 0.1
done
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }

[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// What a worker might print to attack the page: it sets `window.__pwned`
/// if it ever runs.
const PAYLOAD: &str =
    r#"<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">"#;

async fn create(sw: &Swarmd, agent: &str, prompt: &str) -> String {
    sw.create_as(&sw.admin, json!({"agent": agent, "prompt": prompt}))
        .await
}

#[tokio::test]
async fn the_dashboard_follows_the_swarm_live_in_a_real_browser() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    // The overview is the landing view.
    browser
        .until(
            "the overview",
            "return document.getElementById('ov-running')?.textContent === '0'",
        )
        .await;
    browser.show("#/tasks").await;
    browser
        .until(
            "the empty task list",
            "return document.getElementById('task-rows') !== null",
        )
        .await;
    // The token is in this tab's sessionStorage, never in the URL.
    let url = browser.client.current_url().await.unwrap();
    assert!(!url.as_str().contains(&sw.admin), "{url}");
    assert_eq!(
        browser
            .js("return sessionStorage.getItem('swarmd.token')")
            .await,
        json!(sw.admin)
    );
    // Set a marker a reload would clear.
    browser
        .js("window.__marker = 'same page'; return true")
        .await;

    // 50 tasks created over HTTP appear without a reload, once each.
    let mut created = Vec::new();
    for i in 0..50 {
        created.push(create(&sw, "cat", &format!("bulk {i}")).await);
    }
    browser
        .until(
            "50 rows",
            "return document.querySelectorAll('#task-rows tr').length >= 50",
        )
        .await;
    let shown = browser.rows().await;
    let unique: HashSet<&String> = shown.iter().collect();
    assert_eq!(unique.len(), shown.len(), "a row repeats: {shown:?}");
    for id in &created {
        assert!(unique.contains(id), "{id} not listed");
    }
    assert_eq!(
        browser.js("return window.__marker").await,
        json!("same page")
    );

    // Filters live in the URL: text in the prompt, and the filtered page
    // still takes new matching tasks live, and only those.
    browser.show("#/tasks?q=bulk%2017").await;
    browser
        .until(
            "the one matching row",
            "const rows = document.querySelectorAll('#task-rows tr'); return rows.length === 1 && rows[0].dataset.id",
        )
        .await;
    assert_eq!(browser.rows().await, [created[17].clone()]);
    assert_eq!(
        browser
            .js("return document.getElementById('filter-q').value")
            .await,
        json!("bulk 17")
    );
    let again = create(&sw, "cat", "bulk 17 again").await;
    let other = create(&sw, "cat", "bulk 18 again").await;
    browser
        .until(
            "the new matching row",
            "return document.querySelectorAll('#task-rows tr').length === 2",
        )
        .await;
    // The other task's own refresh has been and gone by the time it finished.
    sw.finished(&other).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(browser.rows().await, [again, created[17].clone()]);

    // Worker output and a prompt carrying a script render as text.
    let evil = create(&sw, "cat", PAYLOAD).await;
    let done = sw.finished(&evil).await;
    assert_eq!(done["status"], "pass", "{done}");
    browser.show(&format!("#/task/{evil}")).await;
    // `cat`'s Final is `{raw, stderr}`: the payload sits in it as a JSON string.
    let final_text = browser.text(".final-value").await;
    assert!(
        final_text.contains(r#""raw": "<script>window.__pwned = 1</script><img src=x onerror="#),
        "{final_text}"
    );
    assert_eq!(browser.text("#task-prompt").await, PAYLOAD);
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#view script, #view img').length")
            .await,
        json!(0)
    );
    assert_eq!(
        browser.js("return window.__pwned === undefined").await,
        json!(true)
    );

    // A running NDJSON task: progress arrives live, the UI cancels it.
    let ticker = create(&sw, "ticker", "tick").await;
    let pid = read_pid(&sw.dir().join(format!("{ticker}.pid"))).await;
    browser.show(&format!("#/task/{ticker}")).await;
    let first = browser
        .until(
            "progress",
            "const n = document.querySelectorAll('#output .progress li').length; return n >= 2 && n",
        )
        .await;
    let first = first.as_u64().unwrap();
    browser
        .until(
            "more progress, live",
            &format!("return document.querySelectorAll('#output .progress li').length > {first}"),
        )
        .await;
    let partial = browser.text("#output .partial").await;
    assert!(partial.starts_with("p1 p2 "), "{partial}");
    assert_eq!(browser.text("#task-status").await, "running");
    // Cancel asks first: declined, nothing is cancelled.
    browser
        .js("window.__asked = []; window.confirm = (m) => { window.__asked.push(m); return false; }; return true")
        .await;
    browser.click("#cancel").await;
    let asked = browser
        .until(
            "the confirmation",
            "return window.__asked.length && window.__asked",
        )
        .await;
    assert_eq!(asked, json!([format!("Cancel task {ticker}?")]));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(sw.task(&ticker).await["status"], "running");
    assert_eq!(browser.text("#task-status").await, "running");
    browser.js("window.confirm = () => true; return true").await;
    browser.click("#cancel").await;
    browser
        .until(
            "the cancelled status",
            "return document.getElementById('task-status')?.textContent === 'cancelled'",
        )
        .await;
    assert_eq!(sw.finished(&ticker).await["status"], "cancelled");
    eventually("the ticker's process to be gone", || process_gone(pid)).await;
    assert_eq!(
        browser.js("return document.getElementById('cancel')").await,
        Value::Null,
        "a finished task offers no cancel"
    );

    // kill -9 and a restart on the same port: the page resumes its feed and
    // lists the new tasks, with no row lost or repeated.
    browser.show("#/tasks").await;
    browser
        .until(
            "the list again",
            "return document.querySelectorAll('#task-rows tr').length === 50",
        )
        .await;
    let before = browser.rows().await;
    sw.kill9().await;
    browser
        .until(
            "the feed to notice",
            "return document.getElementById('live').dataset.state === 'retrying'",
        )
        .await;
    sw.restart().await;
    browser
        .until(
            "the feed to come back",
            "return document.getElementById('live').dataset.state === 'live'",
        )
        .await;
    let mut after_restart = Vec::new();
    for i in 0..3 {
        after_restart.push(create(&sw, "cat", &format!("after restart {i}")).await);
    }
    // The live first page is the newest 50: the three new rows on top,
    // then the rows it showed before, in order, none lost or repeated.
    assert_eq!(before.len(), 50, "{before:?}");
    let expected: Vec<String> = after_restart
        .iter()
        .rev()
        .chain(&before[..47])
        .cloned()
        .collect();
    browser
        .until(
            "the new rows",
            &format!(
                "return document.querySelector('#task-rows tr')?.dataset.id === {}",
                json!(after_restart[2])
            ),
        )
        .await;
    let shown = browser.rows().await;
    let unique: HashSet<&String> = shown.iter().collect();
    assert_eq!(unique.len(), shown.len(), "a row repeats: {shown:?}");
    assert_eq!(shown, expected);
    assert_eq!(
        browser.js("return window.__marker").await,
        json!("same page")
    );

    // An observer reads a running task but is offered no cancel.
    let observer = observer_token(&sw).await;
    let running = create(&sw, "ticker", "watch").await;
    browser.sign_out().await;
    browser.sign_in(&observer).await;
    assert_eq!(browser.text("#who").await, "observer");
    browser.show(&format!("#/task/{running}")).await;
    browser
        .until(
            "the observer's live progress",
            "return document.querySelectorAll('#output .progress li').length >= 2",
        )
        .await;
    assert_eq!(browser.text("#task-status").await, "running");
    assert_eq!(
        browser.js("return document.getElementById('cancel')").await,
        Value::Null
    );
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

/// `swarmd token mint --role observer` against the daemon's keys.
pub(super) async fn observer_token(sw: &Swarmd) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args([
            "token", "mint", "--role", "observer", "--ttl", "600", "--config",
        ])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}
