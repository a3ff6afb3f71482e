//! Log lines as an operator reads them with `SWARMD_LOG_FORMAT=json`: every
//! line on stderr is one JSON object (the lines for a person too), and every
//! line an attempt's pipeline writes, its spawner's included, carries the
//! attempt's span (task, attempt number, agent).

use serde_json::{Value, json};

use crate::daemon::Swarmd;

/// `flaky` is blocked (non-zero exit) on its first attempt and passes its
/// second.
const AGENTS: &str = r#"
[agents.flaky]
kind = "process"
program = "/bin/sh"
args = ["-c", 'if [ "$SWARM_ATTEMPT" -ge 2 ]; then echo done; else exit 3; fi']
stdin = "none"
"#;

/// The `attempt` span among a JSON log line's spans, if it has one.
fn attempt_span(line: &Value) -> Option<&Value> {
    line["spans"]
        .as_array()?
        .iter()
        .find(|span| span["name"] == "attempt")
}

#[tokio::test]
async fn the_process_spawners_log_line_carries_task_attempt_and_agent_in_json() {
    let sw = Swarmd::new(AGENTS)
        .env("SWARMD_LOG_FORMAT", "json")
        .start()
        .await;
    let policy = json!({"max_attempts": 2, "retry_on": ["blocked"], "retry_backoff_ms": 0});
    let (status, answer) = sw
        .create(json!({"agent": "flaky", "prompt": "p", "policy": policy}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let task = answer["task_id"].as_str().unwrap().to_owned();
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", sw.log());

    let log = sw.log();
    let started: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == "process agent started")
        .collect();
    assert_eq!(started.len(), 2, "one line per attempt:\n{log}");
    // Every line is one JSON object, the lines for a person included (the
    // harness marks each start with a `--- ` line of its own).
    for line in log.lines().filter(|line| !line.starts_with("--- ")) {
        let parsed = serde_json::from_str::<Value>(line);
        assert!(parsed.is_ok_and(|v| v.is_object()), "not JSON: {line}");
    }
    assert!(log.contains("sign in with the admin token"), "{log}");
    for (n, line) in started.iter().enumerate() {
        let span = attempt_span(line).unwrap_or_else(|| panic!("no attempt span: {line}"));
        assert_eq!(span["task_id"], task.as_str(), "{line}");
        assert_eq!(span["attempt"], n + 1, "{line}");
        assert_eq!(span["agent"], "flaky", "{line}");
    }
}
