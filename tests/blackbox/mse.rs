//! The upstream MainAI client, unchanged (docs/protocol.md, Upstream
//! clients): the real `mse mcp` of mlua-swarm-cli 0.32.1, installed by
//! `scripts/mse-env.sh` (a no-op once it is in the tools cache), runs as an
//! MCP stdio server driven by the official Python SDK
//! (`tests/blackbox/mcp/mse.py`, in the venv of `scripts/mcp-client-env.sh`),
//! joined to a real swarmd that allows loopback login, as upstream's client
//! logs in without a credential. If the install fails, the test fails and
//! says why; it is never skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::daemon::{Swarmd, repo_root};

const CONFIG: &str = r#"
[auth]
loopback_login = true

[agents.helper]
kind = "operator"
description = "Any MainAI's SubAgent"

[agents.doubtful]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '{\"reason\":\"tests fail\"}'; exit 1"]
stdin = "none"
layers = ["senior_escalation"]
"#;

/// The `mse` binary, installed once per test run.
fn mse() -> PathBuf {
    static MSE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::installed(&MSE, "scripts/mse-env.sh", "the upstream client `mse`")
}

/// Runs one scenario of `mse.py` against `sw` and returns what it saw. A
/// line `{"restart": …}` on its stdout asks for a restart of the daemon
/// (SIGKILL, then the same address and state directory), answered with a
/// line on its stdin once the daemon listens again.
pub(crate) async fn run(sw: &mut Swarmd, scenario: &str) -> Value {
    let home = sw.dir().join("mse-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut child = Command::new(crate::mcp::python())
        .arg(repo_root().join("tests/blackbox/mcp/mse.py"))
        .arg(mse())
        .args([sw.base.as_str(), scenario])
        .env("SWARMD_TOKEN", &sw.admin)
        .env("MSE_HOME", &home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the mse scenario starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let seen = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let line = lines.next_line().await.unwrap().unwrap_or_default();
            let said: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if said.get("restart").is_none() {
                return said;
            }
            sw.kill9().await;
            sw.restart().await;
            stdin.write_all(b"restarted\n").await.unwrap();
        }
    })
    .await
    .expect("the mse scenario finished in time");
    let status = child.wait().await.unwrap();
    let errors = errors.await.unwrap();
    assert!(
        status.success() && seen.get("exception").is_none(),
        "mse.py {scenario}: {status}, saw {seen:#}\nmse:\n{errors}\ndaemon:\n{}",
        sw.log()
    );
    seen
}

/// `ST-` and the hex of a `T-` task id.
fn step(task: &Value) -> String {
    let task = task.as_str().expect("a task id");
    format!("ST-{}", task.strip_prefix("T-").expect("a T- id"))
}

fn listed(sessions: &Value, sid: &str) -> Option<Value> {
    sessions
        .as_array()
        .expect("GET /v1/operators lists sessions")
        .iter()
        .find(|s| s["sid"] == sid)
        .cloned()
}

#[tokio::test]
async fn mse_mcp_joins_takes_a_spawn_through_its_subagent_tools_and_leaves() {
    let mut sw = Swarmd::new(CONFIG).start().await;
    let seen = run(&mut sw, "delegated").await;

    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        tools,
        [
            "mse_ack",
            "mse_operator_join",
            "mse_operator_leave",
            "mse_pending_wait",
            "mse_worker_fetch",
            "mse_worker_submit"
        ]
    );

    // `mse_operator_join {desc}`: a MainAI session with no roles.
    let sid = seen["joined"]["sid"].as_str().expect("a sid").to_owned();
    let session = listed(&seen["operators_joined"], &sid).expect("the joined session is listed");
    assert_eq!(session["description"], "swarmd black-box test", "{session}");
    assert_eq!(session["roles"], serde_json::json!([]), "{session}");
    assert_eq!(session["kind"], "main_ai", "{session}");
    assert_eq!(session["connected"], true, "{session}");

    // A task pinned to that session reaches `mse_pending_wait` as a spawn
    // named by its step id.
    let created = &seen["created"];
    assert_eq!(created["status"], 201, "{created}");
    let task = &created["body"]["task_id"];
    let frame = &seen["frame"];
    assert_eq!(frame["timed_out"], false, "{frame}");
    assert_eq!(frame["type"], "spawn", "{frame}");
    let payload = &frame["payload"];
    assert_eq!(payload["task_id"], step(task), "{frame}");
    assert_eq!(payload["agent"], "helper", "{frame}");
    assert_eq!(payload["attempt"], 1, "{frame}");
    let handle = payload["worker_handle"].as_str().unwrap();
    assert!(handle.starts_with("wh-"), "{frame}");
    let directive = payload["directive"].as_str().unwrap();
    assert!(directive.contains(&step(task)), "{directive}");

    // Its SubAgent tools fetch the prompt and submit by the handle alone.
    let fetched = &seen["fetched"];
    assert_eq!(fetched["prompt"], "count to three", "{fetched}");
    assert_eq!(fetched["task_id"], step(task), "{fetched}");
    // A named part (`name`) is an `artifact` output event of the attempt.
    assert_eq!(seen["part"], serde_json::json!({"submitted": true}));
    let records = seen["output"]["body"]["records"].as_array().unwrap();
    let artifact = records
        .iter()
        .find(|r| r["event"]["type"] == "artifact")
        .unwrap_or_else(|| panic!("no artifact in {records:?}"));
    assert_eq!(artifact["event"]["name"], "plan.md", "{artifact}");
    assert_eq!(
        artifact["event"]["content"]["value"], "# one two three",
        "{artifact}"
    );
    // So are the `degradations` and `stats` it posts before the result.
    let stages: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"]["type"] == "progress")
        .map(|r| &r["event"]["stage"])
        .collect();
    assert_eq!(stages, ["degradation", "stats"], "{records:?}");
    assert_eq!(seen["submitted"], serde_json::json!({"submitted": true}));
    assert_eq!(seen["acked"], serde_json::json!({"sent": true}));
    let done = &seen["done"];
    assert_eq!(done["status"], 200, "{done}");
    assert_eq!(done["body"]["status"], "pass", "{done}");
    assert_eq!(done["body"]["result"]["value"], "one two three", "{done}");
    assert_eq!(done["body"]["result"]["ok"], true, "{done}");

    // Without `operator_sid` the agent (no `operator_role`) goes to the
    // least-loaded MainAI: the only one there is.
    let unpinned = &seen["unpinned_frame"];
    assert_eq!(unpinned["type"], "spawn", "{unpinned}");
    assert_eq!(
        unpinned["payload"]["task_id"],
        step(&seen["unpinned"]["body"]["task_id"])
    );
    assert_eq!(seen["unpinned_submitted"]["submitted"], true, "{seen}");
    let done = &seen["unpinned_done"]["body"];
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], "{\"n\": 2}", "{done}");

    // A task cancelled after its spawn was popped: `mse` drops `cancel`
    // frames, so its SubAgent learns it when it writes (410); reading the
    // prompt is no write and still answers.
    assert_eq!(seen["cancel"]["status"], 200, "{seen}");
    assert_eq!(seen["cancelled_fetch"]["prompt"], "never mind", "{seen}");
    let refused = seen["cancelled_submit"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("the late submit succeeded: {seen}"));
    assert!(refused.contains("HTTP 410"), "{refused}");
    assert!(refused.contains("task_terminal"), "{refused}");
    assert_eq!(seen["cancelled_ack"], serde_json::json!({"sent": true}));
    assert_eq!(seen["cancelled_done"]["body"]["status"], "cancelled");
    assert_eq!(seen["after_cancel"]["timed_out"], true, "{seen}");

    // `spawn_halt` through `mse_ack` is a graceful stop: its Final passes.
    assert_eq!(seen["halted_ack"], serde_json::json!({"sent": true}));
    let done = &seen["halted_done"]["body"];
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(
        done["result"]["value"],
        serde_json::json!({"halted": true, "reason": "enough", "value": {"partial": 1}}),
        "{done}"
    );
    // `mse_worker_submit {ok: false}` blocks the task with the body.
    assert_eq!(
        seen["failed_submit"],
        serde_json::json!({"submitted": true})
    );
    let done = &seen["failed_done"]["body"];
    assert_eq!(done["status"], "blocked", "{done}");
    assert_eq!(done["result"]["value"], "it broke", "{done}");
    assert_eq!(done["result"]["ok"], false, "{done}");

    // `mse_operator_leave` ends the session.
    assert_eq!(seen["left"], serde_json::json!({"removed": true}));
    assert!(
        listed(&seen["operators_left"], &sid).is_none(),
        "{}",
        seen["operators_left"]
    );

    let log = sw.log();
    assert!(!log.contains(handle), "a worker handle was logged");
    assert!(!log.contains("sws-"), "a session secret was logged");
}

#[tokio::test]
async fn mse_mcp_keeps_its_session_through_a_daemon_restart() {
    let mut sw = Swarmd::new(CONFIG).start().await;
    let seen = run(&mut sw, "restart").await;
    let sid = seen["joined"]["sid"].as_str().expect("a sid");
    assert_eq!(seen["restarted"], "restarted");
    // The session outlived the daemon: a task pinned to it is created, and
    // the next `mse_pending_wait` reconnects the same sid and gets its spawn.
    assert_eq!(seen["created"]["status"], 201, "{seen}");
    let task = &seen["created"]["body"]["task_id"];
    let frame = &seen["frame"];
    assert_eq!(frame["type"], "spawn", "{frame}");
    assert_eq!(frame["payload"]["task_id"], step(task), "{frame}");
    assert_eq!(seen["submitted"]["submitted"], true, "{seen}");
    let done = &seen["done"]["body"];
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"]["value"], "after a restart", "{done}");
    assert_eq!(seen["left"]["removed"], true, "{seen}");
    let (status, _) = crate::harness::parts(
        sw.get(&format!("/v1/operators/{sid}"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "the session is gone after mse_operator_leave");
}

#[tokio::test]
async fn two_mse_sessions_share_unpinned_operator_tasks() {
    let mut sw = Swarmd::new(CONFIG).start().await;
    let seen = run(&mut sw, "pool").await;
    let sids: Vec<&str> = seen["sids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(sids.len(), 2, "{seen}");
    // The first task went to either; the second, created while the first
    // waited for its answer, to the other one (least loaded).
    let mut all = Vec::new();
    for sid in &sids {
        let got = seen["got"][sid].as_array().unwrap();
        assert_eq!(got.len(), 1, "{sid} got {got:?}; {seen:#}");
        all.push(got[0].as_str().unwrap().to_owned());
    }
    let mut expected: Vec<String> = seen["tasks"].as_array().unwrap().iter().map(step).collect();
    all.sort();
    expected.sort();
    assert_eq!(all, expected);
    // Each task passed with the sid of the session that took it.
    for done in seen["done"].as_array().unwrap() {
        assert_eq!(done["status"], "pass", "{done}");
        let by = done["result"]["value"].as_str().unwrap();
        let step = step(&done["id"]);
        assert_eq!(seen["got"][by][0], step.as_str(), "{seen:#}");
    }
}

#[tokio::test]
async fn mse_mcp_answers_the_ask_of_a_task_pinned_to_its_session() {
    let mut sw = Swarmd::new(CONFIG).start().await;
    let seen = run(&mut sw, "ask").await;
    let frame = &seen["frame"];
    assert_eq!(frame["type"], "ask", "{seen:#}");
    assert_eq!(frame["payload"]["task_id"], step(&seen["task"]).as_str());
    assert_eq!(
        frame["payload"]["question"]["reason"], "tests fail",
        "{seen:#}"
    );
    assert_eq!(seen["ack"]["sent"], true, "{seen:#}");
    let done = &seen["done"];
    assert_eq!(done["status"], "pass", "{seen:#}");
    assert_eq!(done["result"]["value"]["senior_answer"], "accept: flaky");
}
