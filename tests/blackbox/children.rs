//! Process agents and the daemon's death (docs/tasks.md, Process agents; Recovery): a kill -9 of
//! the daemon takes its process groups with it; a group that outlived the
//! daemon anyway is killed by recovery before the attempt is retried; and a
//! configured process agent delegated to a MainAI is a delegated attempt,
//! whose SubAgent still submits with its handle after the restart. Under its
//! supervisor, a command still gets the daemon's SIGTERM on a cancel.

use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{Swarmd, delegate_frame, eventually, process_gone, read_pid};
use crate::harness::parts;

/// Agents of these tests (`@DIR@` is the test's temp directory):
/// - `family`: on its first attempt a shell that starts a `sleep` child and
///   writes both pids (`<task>.1.pid`, `<task>.1.child`), then waits; on a
///   later attempt it prints whether that first child was still alive;
/// - `graceful`: writes its pid (`<task>.pid`), and `<task>.term` when it
///   gets SIGTERM;
/// - `mask`: prints the signals blocked in it (`SigBlk`).
const AGENTS: &str = r#"
[agents.family]
kind = "process"
program = "/bin/sh"
args = ["-c", """
first="@DIR@/$SWARM_TASK_ID.1"
if [ "$SWARM_ATTEMPT" != 1 ]; then
  st=$(cat "/proc/$(cat "$first.child")/stat" 2>/dev/null)
  case "$st" in ""|*") Z"*) seen=gone ;; *) seen=alive ;; esac
  printf '{"first_child": "%s"}' "$seen"
  exit 0
fi
/bin/sleep 300 &
echo $! > "$first.child.tmp" && mv "$first.child.tmp" "$first.child"
echo $$ > "$first.pid.tmp" && mv "$first.pid.tmp" "$first.pid"
wait
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.mask]
kind = "process"
program = "/bin/grep"
args = ["^SigBlk", "/proc/self/status"]
stdin = "none"

[agents.graceful]
kind = "process"
program = "/bin/sh"
args = ["-c", """
d="@DIR@/$SWARM_TASK_ID"
trap 'echo stopped > "$d.term"; exit 0' TERM
echo $$ > "$d.pid.tmp" && mv "$d.pid.tmp" "$d.pid"
i=0
while [ $i -lt 600 ]; do /bin/sleep 0.05; i=$((i+1)); done
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

/// How long a group may take to die once its daemon is gone.
const PROMPTLY: Duration = Duration::from_secs(5);

fn id_of(body: &Value) -> String {
    body["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task_id in {body}"))
        .to_owned()
}

/// The process group of `pid`, from `/proc/<pid>/stat`.
fn group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    // After the name: state, ppid, pgrp.
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Kills what a failing test left behind, so nothing outlives it.
struct Leftovers(Vec<i32>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !process_gone(pid) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// Starts a `family` task and waits until its shell and child are running.
async fn start_family(sw: &Swarmd, policy: Value) -> (String, i32, i32) {
    let (status, answer) = sw
        .create(json!({"agent": "family", "prompt": "p", "policy": policy}))
        .await;
    assert_eq!(status, 201, "{answer}\n{}", sw.log());
    let task = id_of(&answer);
    let shell = read_pid(&sw.dir().join(format!("{task}.1.pid"))).await;
    let child = read_pid(&sw.dir().join(format!("{task}.1.child"))).await;
    assert!(!process_gone(shell) && !process_gone(child));
    (task, shell, child)
}

#[tokio::test]
async fn kill_9_of_the_daemon_takes_its_process_groups_with_it() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let (_task, shell, child) = start_family(&sw, json!({"max_attempts": 1})).await;
    let leader = group_of(shell);
    let _leftovers = Leftovers(vec![leader, shell, child]);

    sw.kill9().await;
    let deadline = Instant::now() + PROMPTLY;
    while !(process_gone(shell) && process_gone(child) && process_gone(leader)) {
        assert!(
            Instant::now() < deadline,
            "the agent's group outlived the daemon by {PROMPTLY:?}: shell {}, child {}",
            if process_gone(shell) { "gone" } else { "alive" },
            if process_gone(child) { "gone" } else { "alive" },
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn recovery_kills_a_surviving_group_before_the_retry_runs() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let (task, shell, child) = start_family(&sw, json!({"max_attempts": 2})).await;
    let leader = group_of(shell);
    let _leftovers = Leftovers(vec![leader, shell, child]);
    // The group is recorded with the attempt once it started (queued, not
    // awaited): wait until the store has it, as a crash later would.
    let mut recorded = Value::Null;
    for _ in 0..500 {
        recorded = sw.task(&task).await["attempts"][0]["process_group"].clone();
        if !recorded.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(recorded["pgid"], json!(leader), "{recorded}");

    // A group whose leader cannot act on the daemon's death: stopped, it
    // stands for one that missed it. This test process adopts the orphans
    // (in the daemon's session, so the group is not orphaned, and the
    // kernel does not hang up and continue it as it would a stopped
    // orphaned group).
    prctl::set_child_subreaper(true).unwrap();
    kill(Pid::from_raw(leader), Signal::SIGSTOP).unwrap();
    sw.kill9().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !process_gone(shell) && !process_gone(child),
        "the simulated survivor died with the daemon"
    );

    sw.restart().await;
    let view = sw.finished(&task).await;
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (&json!("pass"), &json!({"first_child": "gone"})),
        "the retry ran beside the first attempt's group: {view}\n{}",
        sw.log()
    );
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("interrupted"), "{view}");
    eventually("the old group's leader is gone", || process_gone(leader)).await;
    eventually("the old shell is gone", || process_gone(shell)).await;
}

#[tokio::test]
async fn a_delegated_process_agent_survives_a_restart_as_a_delegated_attempt() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    ws.send(delegate_frame("k-1", "family", "done elsewhere"))
        .await;
    let task = id_of(&ws.recv_type("task_accepted").await);
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task);
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    let view = sw.task(&task).await;
    assert_eq!(view["attempts"][0]["spawner"], "operator", "{view}");

    sw.kill9().await;
    drop(ws);
    sw.restart().await;

    let (status, ack) = parts(
        sw.post(&format!("/v1/worker/submit?task_id={task}"), &handle)
            .body("done by the SubAgent")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{ack}\n{}", sw.log());
    let view = sw.finished(&task).await;
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (&json!("pass"), &json!("done by the SubAgent")),
        "{view}"
    );
    assert_eq!(view["attempts"].as_array().map(Vec::len), Some(1), "{view}");
    // The process itself never ran: the attempt went to the MainAI.
    assert!(!sw.dir().join(format!("{task}.1.pid")).exists());
}

#[tokio::test]
async fn a_cancel_still_reaches_the_command_with_sigterm_first() {
    let sw = Swarmd::new(AGENTS).start().await;
    // The command starts with no signal blocked, whatever its supervisor does.
    let (status, masked) = sw
        .create(json!({"agent": "mask", "prompt": "p", "wait_secs": 10}))
        .await;
    assert_eq!(status, 201, "{masked}");
    let blocked = masked["result"]["value"]["raw"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(blocked.trim(), "SigBlk:\t0000000000000000", "{masked}");

    let (status, answer) = sw.create(json!({"agent": "graceful", "prompt": "p"})).await;
    assert_eq!(status, 201, "{answer}");
    let task = id_of(&answer);
    let shell = read_pid(&sw.dir().join(format!("{task}.pid"))).await;
    let _leftovers = Leftovers(vec![group_of(shell), shell]);

    let (status, cancelled) = parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .json(&json!({"reason": "enough"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    eventually("the command is gone", || process_gone(shell)).await;
    let term = std::fs::read_to_string(sw.dir().join(format!("{task}.term")));
    assert_eq!(
        term.ok().as_deref(),
        Some("stopped\n"),
        "the command never saw the SIGTERM"
    );
}
