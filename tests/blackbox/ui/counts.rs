//! The daemon's own history and counters behind the overview and the
//! agents view: `GET /v1/agents` counts each agent's tasks by outcome since
//! start with p50/p99 bounds, and an overview opened after tasks ran shows
//! the last minutes at once (`GET /v1/metrics/history`, sampled every 5 s).

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::harness::parts;
use crate::ui::Browser;

/// `cat` passes, `refuse` reports a Final with `ok: false` (blocked),
/// `stall` outlives its one-second attempt timeout (failed); `nap` takes
/// about 300 ms.
const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"

[agents.refuse]
kind = "process"
program = "/bin/sh"
args = ["-c", """printf '{"type":"final","content":{"kind":"inline","value":"no"},"ok":false}\n'"""]
stdin = "none"
stream = "ndjson"

[agents.stall]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"

[agents.nap]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 0.3; echo done"]
stdin = "none"
"#;

async fn run(sw: &Swarmd, agent: &str) -> Value {
    // Only `stall` is meant to time out; the others get room on a busy host.
    let timeout = if agent == "stall" { 1 } else { 60 };
    let policy = json!({"max_attempts": 1, "attempt_timeout_secs": timeout});
    let (status, body) = sw
        .create(json!({"agent": agent, "prompt": "p", "policy": policy}))
        .await;
    assert_eq!(status, 201, "{body}");
    sw.finished(body["task_id"].as_str().unwrap()).await
}

async fn agents(sw: &Swarmd) -> Value {
    let (status, page) = parts(sw.get("/v1/agents", &sw.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    page
}

fn agent<'p>(page: &'p Value, name: &str) -> &'p Value {
    page["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no agent {name}: {page}"))
}

#[tokio::test]
async fn agents_count_outcomes_and_durations_since_start() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let mut expected = Vec::new();
    for (name, times, status) in [
        ("cat", 3, "pass"),
        ("refuse", 2, "blocked"),
        ("stall", 1, "failed"),
        ("nap", 2, "pass"),
    ] {
        for _ in 0..times {
            assert_eq!(run(&sw, name).await["status"], status);
        }
        expected.push((name, times, status));
    }
    let page = agents(&sw).await;
    for (name, times, status) in expected {
        let counts = &agent(&page, name)["since_start"];
        assert_eq!(counts["finished"], times, "{name}: {counts}");
        assert_eq!(counts[status], times, "{name}: {counts}");
        let others: u64 = ["pass", "blocked", "failed", "cancelled"]
            .iter()
            .filter(|s| **s != status)
            .map(|s| counts[*s].as_u64().unwrap())
            .sum();
        assert_eq!(others, 0, "{name}: {counts}");
    }
    // `nap` sleeps 300 ms: its quantiles sit in a bucket from 0.5 s up.
    let nap = &agent(&page, "nap")["since_start"];
    let p50 = nap["p50_le_ms"].as_u64().unwrap();
    assert!((500..=5_000).contains(&p50), "{nap}");
    assert!(nap["p99_le_ms"].as_u64().unwrap() >= p50, "{nap}");
    let cat = &agent(&page, "cat")["since_start"];
    assert!(cat["p50_le_ms"].as_u64().unwrap() <= p50, "{page}");

    // The counters are the process's own: a restart starts them again, and
    // an agent with no finished task has no quantiles.
    sw.sigterm();
    sw.exited().await;
    sw.restart().await;
    let page = agents(&sw).await;
    let cat = &agent(&page, "cat")["since_start"];
    assert_eq!(cat["finished"], 0, "{cat}");
    assert!(cat.get("p50_le_ms").is_none(), "{cat}");
}

#[tokio::test]
async fn an_overview_opened_later_shows_the_minutes_before_it() {
    let sw = Swarmd::new(AGENTS).start().await;
    for _ in 0..20 {
        run(&sw, "cat").await;
    }
    // Two samples (5 s apart) have counted the tasks before any page opens.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let history = loop {
        let (status, history) = parts(
            sw.get("/v1/metrics/history", &sw.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{history}");
        let samples = history["samples"].as_array().unwrap();
        let finished: u64 = samples
            .iter()
            .map(|s| s["finished"].as_u64().unwrap())
            .sum();
        if finished >= 20 {
            break history;
        }
        assert!(std::time::Instant::now() < deadline, "{history}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(history["every_ms"], 5000);
    let samples = history["samples"].as_array().unwrap();
    let created: u64 = samples.iter().map(|s| s["created"].as_u64().unwrap()).sum();
    assert_eq!(created, 20, "{history}");
    let dispatched: u64 = samples
        .iter()
        .flat_map(|s| s["dispatch"].as_array().unwrap())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(dispatched, 20, "{history}");
    // It takes a credential.
    let (status, _) = parts(sw.get("/v1/metrics/history", "nope").send().await.unwrap()).await;
    assert_eq!(status, 401);

    // A page opened now shows non-zero rates and a dispatch p50 at once,
    // without waiting for samples of its own.
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    let created = browser.text("#ov-created").await;
    let rate: f64 = created.trim_end_matches("/s").parse().unwrap_or(0.0);
    assert!(rate > 0.0, "{created}");
    let rates = browser.text("#ov-rates").await;
    assert!(rates.contains("dispatch latency p50≤"), "{rates}");
    let window = browser.text("#ov-window").await;
    assert!(window.contains("last "), "{window}");
    let points = browser
        .js("return document.querySelectorAll('#ov-throughput .series circle').length")
        .await;
    assert!(points.as_u64().unwrap() >= 1, "{points}");
    // The overview follows only the sessions' comings and goings, not the
    // task events it does not show (its badge's tooltip names what the feed
    // asked for); the task list follows its unfinished rows (none: every
    // task here has finished) and a tick of new tasks.
    assert_eq!(
        browser
            .js("return document.getElementById('live').title")
            .await,
        json!("following session_attached, session_detached")
    );
    browser.show("#/tasks").await;
    browser
        .until(
            "the task list's feed",
            "return document.getElementById('live').title === 'following no unfinished row; new tasks once a second'",
        )
        .await;
    browser
        .until(
            "the live task list",
            "return document.getElementById('live').dataset.state === 'live'",
        )
        .await;
    browser.client.clone().close().await.unwrap();
}
