//! The per-attempt output budget (`limits.max_output_bytes_per_attempt`)
//! against the real binary: one rule for every agent kind. A SubAgent's
//! output over HTTP is refused with 413 once its attempt's budget is spent
//! (its result too), a Lua agent that keeps emitting fails its attempt, and
//! every refusal is counted in `/metrics`.

use serde_json::json;

use crate::daemon::{Swarmd, delegate_frame};
use crate::harness::parts;

/// `chatty` emits 1 KiB partials until it is stopped; the budget is 8 KiB.
const CONFIG: &str = r#"
[limits]
max_output_bytes_per_attempt = 8192

[agents.chatty]
kind = "lua"
script = "@DIR@/chatty.lua"
"#;

const CHATTY_LUA: &str = "for i = 1, 1000 do emit_partial(string.rep('x', 1024)) end\n\
                          return { value = 'never', ok = true }\n";

fn partial(bytes: usize) -> serde_json::Value {
    json!({"type": "partial", "chunk": {"kind": "inline", "value": "y".repeat(bytes)}})
}

#[tokio::test]
async fn output_past_the_attempt_budget_is_refused_for_every_agent_kind() {
    let sw = Swarmd::new(CONFIG);
    std::fs::write(sw.dir().join("chatty.lua"), CHATTY_LUA).unwrap();
    let sw = sw.start().await;

    // A SubAgent over HTTP: 3 KiB twice fits, a third time does not.
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&main_ai).await;
    ws.send(delegate_frame("r-1", "researcher", "talk")).await;
    let spawn = ws.recv_type("spawn").await;
    let task = spawn["task_id"].as_str().unwrap().to_owned();
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    let write = |body: serde_json::Value| {
        sw.http
            .post(sw.url(&format!("/v1/worker/output?task_id={task}")))
            .bearer_auth(&handle)
            .json(&body)
            .send()
    };
    for _ in 0..2 {
        let (status, body) = parts(write(partial(3000)).await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = parts(write(partial(3000)).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("output_budget_exceeded")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap_or_default().contains("8192"),
        "{body}"
    );
    // A result past the budget is refused the same way.
    let (status, body) = parts(
        sw.http
            .post(sw.url(&format!("/v1/worker/submit?task_id={task}")))
            .bearer_auth(&handle)
            .body("z".repeat(3000))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("output_budget_exceeded"))
    );
    let stored: usize = sw
        .output(&task)
        .await
        .iter()
        .map(|r| r.to_string().len())
        .sum();
    assert!(stored < 8192 + 1024, "{stored} bytes stored");

    // A Lua agent that keeps emitting fails its attempt, naming the budget.
    let (status, created) = sw.create(json!({"agent": "chatty", "prompt": "go"})).await;
    assert_eq!(status, 201, "{created}");
    let lua = created["task_id"].as_str().unwrap().to_owned();
    let view = sw.finished(&lua).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert!(
        view["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("output budget"),
        "{view}"
    );

    // Every refusal is counted.
    let metrics = sw.metrics().await;
    let refusals: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("swarmd_output_budget_refusals_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no refusal counter in:\n{metrics}"));
    assert!(refusals >= 3, "{refusals}");
}
