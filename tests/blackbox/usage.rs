//! Usage and budgets against the real binary (docs/tasks.md, Budgets): a
//! stand-in for Claude Code replays `assistant` lines whose running usage
//! passes `policy.max_tokens` mid-run, then waits on a child of its own.
//! The engine stops the attempt: its process group is killed (the child is
//! gone), the task fails `budget_exceeded` after one attempt although
//! policy retries failures, and the usage shows on the attempt, in
//! `/metrics` and in `/v1/status`.

use serde_json::{Value, json};

use crate::daemon::{Swarmd, eventually, process_gone, read_pid};
use crate::harness::parts;

/// `claude` writes its child's pid to `@DIR@/<task>.child`, then an init
/// line and two assistant messages (1 100 input and 70 output tokens in
/// all, the first message on two lines), then waits for the child.
const CONFIG: &str = r#"
[agents.claude]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
cat > /dev/null
/bin/sleep 300 &
echo $! > "@DIR@/$SWARM_TASK_ID.child.tmp" && mv "@DIR@/$SWARM_TASK_ID.child.tmp" "@DIR@/$SWARM_TASK_ID.child"
printf '%s\n' '{"type":"system","subtype":"init","session_id":"sess-1","model":"claude-sonnet-4-5","claude_code_version":"2.1.197"}'
printf '%s\n' '{"type":"assistant","message":{"id":"msg_01","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Looking."}],"usage":{"input_tokens":400,"output_tokens":5}},"parent_tool_use_id":null,"session_id":"sess-1"}'
printf '%s\n' '{"type":"assistant","message":{"id":"msg_01","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":400,"output_tokens":20}},"parent_tool_use_id":null,"session_id":"sess-1"}'
/bin/sleep 0.2
printf '%s\n' '{"type":"assistant","message":{"id":"msg_02","model":"claude-sonnet-4-5","content":[{"type":"text","text":"More."}],"usage":{"input_tokens":700,"output_tokens":50,"cache_read_input_tokens":300}},"parent_tool_use_id":null,"session_id":"sess-1"}'
wait
''', "claude"]
stream = "claude"
env = { PATH = "/usr/bin:/bin" }
"#;

/// The value of the first sample line of `/metrics` starting with `prefix`.
fn sample(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[tokio::test]
async fn running_usage_past_max_tokens_kills_the_group_and_fails_once() {
    let sw = Swarmd::new(CONFIG);
    let dir = sw.dir().to_path_buf();
    let sw = sw.start().await;
    let policy = json!({"max_tokens": 1000, "max_attempts": 3, "retry_on": ["failed"],
                        "retry_backoff_ms": 0});
    let (status, created) = sw
        .create(json!({"agent": "claude", "prompt": "fix it", "policy": policy}))
        .await;
    assert_eq!(status, 201, "{created}\n{}", sw.log());
    let task = created["task_id"].as_str().unwrap().to_owned();
    let child = read_pid(&dir.join(format!("{task}.child"))).await;

    sw.finished(&task).await;
    let view = sw.task(&task).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(
        view["reason"], "budget_exceeded: 1170 tokens used, policy.max_tokens is 1000",
        "{view}"
    );
    eventually("the CLI's child to be killed with its group", || {
        process_gone(child)
    })
    .await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "a budget stop is never retried: {view}");
    assert_eq!(attempts[0]["outcome"], "failed");
    let usage = &attempts[0]["usage"];
    assert_eq!(
        (
            &usage["cli"],
            &usage["session_id"],
            &usage["input_tokens"],
            &usage["output_tokens"],
            &usage["cache_read_tokens"],
        ),
        (
            &json!("claude"),
            &json!("sess-1"),
            &json!(1100),
            &json!(70),
            &json!(300)
        ),
        "{view}"
    );
    assert_eq!(
        usage["models"]["claude-sonnet-4-5"]["output_tokens"], 70,
        "{view}"
    );
    assert_eq!(
        view["usage"]["input_tokens"], 1100,
        "the task's total: {view}"
    );

    let metrics = sw.metrics().await;
    let tokens = |kind: &str| {
        sample(
            &metrics,
            &format!(
                "swarmd_tokens_total{{agent=\"claude\",model=\"claude-sonnet-4-5\",kind=\"{kind}\"}}"
            ),
        )
    };
    assert_eq!(tokens("input"), Some(1100.0), "{metrics}");
    assert_eq!(tokens("output"), Some(70.0), "{metrics}");
    assert_eq!(tokens("cache_read"), Some(300.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "swarmd_budget_stops_total{limit=\"tokens\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        metrics.contains("swarmd_cost_usd_total{agent=\"claude\",model=\"claude-sonnet-4-5\"}"),
        "{metrics}"
    );

    let (status, body): (u16, Value) =
        parts(sw.get("/v1/status", &sw.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["claude"]["input_tokens"], 1100, "{body}");
    assert_eq!(body["usage"]["claude"]["output_tokens"], 70, "{body}");
}
