//! The daemon's life (docs/tasks.md, Late writes; Process agents; docs/operations.md): kill -9
//! mid-task and a restart on the same state directory, SIGTERM draining to exit status 0, `READY=1`
//! and `STOPPING=1` on a test-owned `NOTIFY_SOCKET`, a real cancel of a
//! process agent, and the agents of the example configuration.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::net::UnixDatagram;

use crate::daemon::{Swarmd, delegate_frame, eventually, process_gone, read_pid, repo_root};
use crate::harness::{PATIENCE, expect_error, parts};

/// Agents of these tests. `@DIR@` is the test's temp directory.
/// - `steps`: NDJSON progress, partial and Final;
/// - `sleeper`: writes its pid to `@DIR@/<task>.pid`, then sleeps 30 s;
/// - `family`: a shell that starts a `sleep` child, writes both pids
///   (`<task>.pid`, `<task>.child`) and its handle (`<task>.handle`), waits;
/// - `hold`: writes its pid, waits until `@DIR@/<task>.go` exists (at most
///   30 s), then prints `{"released": true}`.
const AGENTS: &str = r#"
[agents.steps]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf '{"type":"progress","stage":"one"}\n'
printf '{"type":"partial","chunk":{"kind":"inline","value":"half"}}\n'
printf '{"type":"final","content":{"kind":"inline","value":{"steps":2}},"ok":true}\n'
"""]
stdin = "none"
stream = "ndjson"

[agents.sleeper]
kind = "process"
program = "/bin/sh"
args = ["-c", 'echo $$ > "@DIR@/$SWARM_TASK_ID.pid.tmp" && mv "@DIR@/$SWARM_TASK_ID.pid.tmp" "@DIR@/$SWARM_TASK_ID.pid" && exec /bin/sleep 30']
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.family]
kind = "process"
program = "/bin/sh"
args = ["-c", """
d="@DIR@/$SWARM_TASK_ID"
/bin/sleep 30 &
echo $! > "$d.child.tmp" && mv "$d.child.tmp" "$d.child"
printf '%s' "$SWARM_WORKER_HANDLE" > "$d.handle.tmp" && mv "$d.handle.tmp" "$d.handle"
echo $$ > "$d.pid.tmp" && mv "$d.pid.tmp" "$d.pid"
wait
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", """
d="@DIR@/$SWARM_TASK_ID"
echo $$ > "$d.pid.tmp" && mv "$d.pid.tmp" "$d.pid"
i=0
while [ ! -e "$d.go" ] && [ $i -lt 600 ]; do /bin/sleep 0.05; i=$((i+1)); done
printf '{"released": true}'
"""]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

fn id_of(body: &Value) -> String {
    body["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task_id in {body}"))
        .to_owned()
}

/// Creates a task as the admin and returns its id.
async fn create(sw: &Swarmd, body: Value) -> String {
    let (status, answer) = sw.create(body).await;
    assert_eq!(status, 201, "{answer}\n{}", sw.log());
    id_of(&answer)
}

/// Kills a process this test's agents left behind (its pid is known).
fn reap_orphan(pid: i32) {
    if !process_gone(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[tokio::test]
async fn kill_9_mid_task_then_restart_loses_nothing_and_the_old_handle_still_submits() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;

    // Finished before the crash: a task with NDJSON output.
    let (status, finished) = sw
        .create(json!({"agent": "steps", "prompt": "go", "wait_secs": 10}))
        .await;
    assert_eq!(
        (status, &finished["status"]),
        (201, &json!("pass")),
        "{finished}"
    );
    let done_before = id_of(&finished);
    let outputs_before = sw.output(&done_before).await;
    assert_eq!(outputs_before.len(), 3, "{outputs_before:?}");

    // Running in a process at the crash.
    let sleeping = create(&sw, json!({"agent": "sleeper", "prompt": "zzz"})).await;
    let sleeper_pid = read_pid(&sw.dir().join(format!("{sleeping}.pid"))).await;

    // Delegated to the MainAI at the crash, its spawn frame received.
    ws.send(delegate_frame("k-1", "researcher", "survive a crash"))
        .await;
    let delegated = id_of(&ws.recv_type("task_accepted").await);
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], delegated);
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    let prompt = sw
        .get(&format!("/v1/worker/prompt?task_id={delegated}"), &handle)
        .send()
        .await
        .unwrap();
    assert_eq!(prompt.status(), 200);

    sw.kill9().await;
    drop(ws);
    sw.restart().await;

    // The session comes back with the same sid and token.
    let mut ws = sw.connect(&login).await;
    let (status, session) = parts(
        sw.get(&format!("/v1/operators/{}", login.sid), &login.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["sid"], login.sid.as_str());
    assert_eq!(session["roles"], json!(["main-ai"]));

    // The SubAgent submits with the handle it got before the crash.
    let (status, ack) = parts(
        sw.post(&format!("/v1/worker/submit?task_id={delegated}"), &handle)
            .body("made it")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{ack}\n{}", sw.log());
    assert_eq!(
        ack,
        json!({"task_id": delegated, "attempt": 1, "accepted": true})
    );
    let view = sw.finished(&delegated).await;
    assert_eq!(
        (&view["status"], &view["result"]),
        (&json!("pass"), &json!({"value": "made it", "ok": true})),
        "{view}"
    );
    let done = ws.done(&delegated).await;
    assert_eq!(
        (&done["status"], &done["value"]),
        (&json!("pass"), &json!("made it"))
    );

    // What finished before the crash is still there, output and all.
    let view = sw.task(&done_before).await;
    assert_eq!(
        (&view["status"], &view["result"]),
        (&json!("pass"), &json!({"value": {"steps": 2}, "ok": true}))
    );
    assert_eq!(sw.output(&done_before).await, outputs_before);

    // The process attempt died with the old daemon: failed, interrupted.
    let view = sw.finished(&sleeping).await;
    reap_orphan(sleeper_pid);
    assert_eq!(view["status"], "failed", "{view}");
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("interrupted"), "{view}");
}

#[tokio::test]
async fn sigterm_lets_running_attempts_finish_refuses_new_tasks_and_exits_0() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    // A connected MainAI: its socket and ops worker must end with the daemon.
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let _main_ai = sw.connect(&login).await;
    let released = create(&sw, json!({"agent": "hold", "prompt": "a"})).await;
    let stuck = create(&sw, json!({"agent": "hold", "prompt": "b"})).await;
    read_pid(&sw.dir().join(format!("{released}.pid"))).await;
    let stuck_pid = read_pid(&sw.dir().join(format!("{stuck}.pid"))).await;

    sw.sigterm();
    // Draining: new tasks are refused, the daemon is not ready.
    let mut refused = None;
    for _ in 0..100 {
        let response = sw
            .post("/v1/tasks", &sw.admin)
            .json(&json!({"agent": "hold", "prompt": "late"}))
            .send()
            .await
            .unwrap();
        if response.status() != 201 {
            refused = Some(response);
            break;
        }
        let late = id_of(&response.json().await.unwrap());
        std::fs::write(sw.dir().join(format!("{late}.go")), b"").unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    expect_error(
        refused.expect("new tasks accepted while draining"),
        503,
        "draining",
    )
    .await;
    let ready = sw.http.get(sw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);

    // One running attempt finishes within the grace; the other is stopped.
    std::fs::write(sw.dir().join(format!("{released}.go")), b"").unwrap();
    let status = sw.exited().await;
    assert_eq!(status.code(), Some(0), "{status}\n{}", sw.log());
    eventually("the stuck worker is stopped", || process_gone(stuck_pid)).await;
    // The background tasks (event router, idle sweep, the socket's ops
    // worker) ended before the store was flushed.
    let log = sw.log();
    let line = |text: &str| log.lines().position(|l| l.ends_with(text));
    let joined = line(": background tasks stopped").unwrap_or_else(|| panic!("{log}"));
    let stopped = line(": stopped").unwrap_or_else(|| panic!("{log}"));
    assert!(joined < stopped, "{log}");
    assert!(!log.contains("did not stop in time"), "{log}");

    sw.restart().await;
    let view = sw.finished(&released).await;
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (&json!("pass"), &json!({"released": true})),
        "{view}"
    );
    let view = sw.finished(&stuck).await;
    assert_eq!(view["status"], "failed", "{view}");
}

/// Reads datagrams into `heard` until one has the line `state`.
async fn notified(socket: &UnixDatagram, state: &str, heard: &mut Vec<String>) {
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !heard.iter().any(|m| m.lines().any(|l| l == state)) {
        let received = tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await;
        let n = received
            .unwrap_or_else(|_| panic!("no {state} on NOTIFY_SOCKET; heard {heard:?}"))
            .unwrap();
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
}

#[tokio::test]
async fn ready_and_stopping_reach_a_test_owned_notify_socket() {
    let sw = Swarmd::new(AGENTS);
    let path = sw.dir().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let mut sw = sw
        .env("NOTIFY_SOCKET", path.to_str().unwrap())
        .start()
        .await;

    let mut heard = Vec::new();
    notified(&socket, "READY=1", &mut heard).await;
    let ready = sw.http.get(sw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "ready means ready");
    assert!(heard.iter().all(|m| !m.contains("STOPPING=1")), "{heard:?}");

    sw.sigterm();
    notified(&socket, "STOPPING=1", &mut heard).await;
    let status = sw.exited().await;
    assert_eq!(status.code(), Some(0), "{status}");
    let ready_at = heard.iter().position(|m| m.contains("READY=1"));
    let stopping_at = heard.iter().position(|m| m.contains("STOPPING=1"));
    assert!(ready_at < stopping_at, "{heard:?}");
}

#[tokio::test]
async fn cancel_kills_the_process_agent_and_its_children() {
    let sw = Swarmd::new(AGENTS).start().await;
    let task = create(&sw, json!({"agent": "family", "prompt": "p"})).await;
    let shell = read_pid(&sw.dir().join(format!("{task}.pid"))).await;
    let child = read_pid(&sw.dir().join(format!("{task}.child"))).await;
    let handle = std::fs::read_to_string(sw.dir().join(format!("{task}.handle"))).unwrap();
    assert!(!process_gone(shell) && !process_gone(child));

    let (status, cancelled) = parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .json(&json!({"reason": "no longer needed"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    eventually("the agent's shell is gone", || process_gone(shell)).await;
    eventually("the agent's child is gone", || process_gone(child)).await;
    reap_orphan(child);

    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    // A result arriving afterwards is refused.
    let late = sw
        .post(&format!("/v1/worker/submit?task_id={task}"), &handle)
        .body("too late")
        .send()
        .await
        .unwrap();
    expect_error(late, 410, "task_terminal").await;
}

#[tokio::test]
async fn the_example_configuration_runs_its_process_lua_and_ndjson_agents() {
    let sw = Swarmd::example().env("LANG", "C.UTF-8").start().await;

    let (status, echo) = sw
        .create(json!({"agent": "echo", "prompt": "hello \"swarm\"", "wait_secs": 10}))
        .await;
    assert_eq!(status, 201, "{echo}");
    let task = id_of(&echo);
    assert_eq!(echo["status"], "pass", "{echo}\n{}", sw.log());
    assert_eq!(
        echo["result"],
        json!({"value": {"echo": "hello \"swarm\"", "task": task}, "ok": true})
    );

    let (status, upper) = sw
        .create(json!({"agent": "upper", "prompt": "make me loud", "wait_secs": 10}))
        .await;
    assert_eq!((status, &upper["status"]), (201, &json!("pass")), "{upper}");
    assert_eq!(
        upper["result"],
        json!({"value": "MAKE ME LOUD", "ok": true})
    );
    let events: Vec<Value> = sw
        .output(&id_of(&upper))
        .await
        .into_iter()
        .map(|r| r["event"].clone())
        .collect();
    assert_eq!(
        events[0],
        json!({"type": "progress", "stage": "upper", "note": "converting"})
    );

    let (status, streamed) = sw
        .create(json!({"agent": "ndjson-demo", "prompt": "abc", "wait_secs": 10}))
        .await;
    assert_eq!(
        (status, &streamed["status"]),
        (201, &json!("pass")),
        "{streamed}"
    );
    let events: Vec<Value> = sw
        .output(&id_of(&streamed))
        .await
        .into_iter()
        .map(|r| r["event"].clone())
        .collect();
    assert_eq!(
        events,
        [
            json!({"type": "progress", "stage": "start", "note": "received 3 bytes"}),
            json!({"type": "partial", "chunk": {"kind": "inline", "value": "working"}}),
            json!({"type": "final", "content": {"kind": "inline", "value": "done"}, "ok": true}),
        ]
    );

    // The README's CLI quickstart against the same daemon.
    let spawned = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .current_dir(repo_root())
        .args([
            "task", "-o", "json", "--url", &sw.base, "--token", &sw.admin,
        ])
        .args([
            "spawn",
            "--agent",
            "echo",
            "--prompt",
            "from the cli",
            "--wait",
            "10",
        ])
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(
        spawned.status.success(),
        "{}",
        String::from_utf8_lossy(&spawned.stderr)
    );
    let printed: Value = serde_json::from_slice(&spawned.stdout).unwrap();
    assert_eq!(printed["status"], "pass", "{printed}");
    assert_eq!(printed["result"]["value"]["echo"], "from the cli");

    // Policy, metadata and an idempotency key: running it again is the same task.
    let keyed = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .current_dir(repo_root())
            .args([
                "task", "-o", "json", "--url", &sw.base, "--token", &sw.admin,
            ])
            .args([
                "spawn", "--agent", "echo", "--prompt", "once", "--wait", "10",
            ])
            .args(["--policy", r#"{"max_attempts": 2}"#])
            .args(["--metadata", r#"{"ticket": 42}"#])
            .args(["--idempotency-key", "ticket-42"])
            .env_clear()
            .output()
    };
    let first: Value = serde_json::from_slice(&keyed().await.unwrap().stdout).unwrap();
    let again: Value = serde_json::from_slice(&keyed().await.unwrap().stdout).unwrap();
    assert_eq!(first["task_id"], again["task_id"], "{first}\n{again}");
    let stored = sw.task(first["task_id"].as_str().unwrap()).await;
    assert_eq!(stored["metadata"], json!({"ticket": 42}), "{stored}");
    assert_eq!(stored["policy"]["max_attempts"], 2, "{stored}");
}

/// `task wait` and `task spawn --wait` exit by the task's outcome: 0 when it
/// passed, 2 when it finished otherwise, 3 when it had not finished in time.
#[tokio::test]
async fn task_wait_exits_by_the_outcome() {
    let sw = Swarmd::new(
        r#"
[defaults]
max_attempts = 1

[agents.yes]
kind = "process"
program = "/bin/cat"

[agents.no]
kind = "process"
program = "/bin/false"

[agents.slow]
kind = "process"
program = "/bin/sleep"
args = ["30"]
"#,
    )
    .start()
    .await;
    let run = |args: Vec<String>| {
        let base = sw.base.clone();
        let admin = sw.admin.clone();
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
                .args(["task", "-o", "json", "--url", &base, "--token", &admin])
                .args(&args)
                .env_clear()
                .output()
                .await
                .unwrap();
            let printed: Value = serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
            (output.status.code(), printed)
        }
    };
    let spawn = |agent: &str, wait: &str| {
        ["spawn", "--agent", agent, "--prompt", "p", "--wait", wait]
            .map(String::from)
            .to_vec()
    };
    let (code, passed) = run(spawn("yes", "10")).await;
    assert_eq!(
        (code, &passed["status"]),
        (Some(0), &json!("pass")),
        "{passed}"
    );
    let (code, failed) = run(spawn("no", "10")).await;
    assert_eq!(code, Some(2), "{failed}");
    // An attempt a finished task never had is named, not an empty stream.
    let tail = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["task", "--url", &sw.base, "--token", &sw.admin, "tail"])
        .args([passed["id"].as_str().unwrap(), "--attempt", "5"])
        .env_clear()
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&tail.stderr);
    assert_eq!(tail.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("it has no attempt 5"), "{stderr}");
    let (code, slow) = run(spawn("slow", "1")).await;
    assert_eq!(code, Some(3), "{slow}");
    let id = slow["task_id"].as_str().unwrap().to_owned();
    let (code, _) = run(["wait".into(), id.clone(), "--timeout".into(), "1".into()].to_vec()).await;
    assert_eq!(code, Some(3));
    let (code, got) = run(["get".into(), id.clone()].to_vec()).await;
    assert_eq!(
        code,
        Some(0),
        "get exits 0 whatever the task's state: {got}"
    );
    let cancel = ["cancel", &id, "--reason", "not needed"].map(String::from);
    run(cancel.to_vec()).await;
    let (code, cancelled) =
        run(["wait".into(), id, "--timeout".into(), "10".into()].to_vec()).await;
    assert_eq!((code, &cancelled["status"]), (Some(2), &json!("cancelled")));
    assert!(
        cancelled.to_string().contains("not needed"),
        "the reason given is the task's: {cancelled}"
    );
}

/// `swarmd task … | head`: a reader that closed stdout ends the command
/// quietly, with the status of a process SIGPIPE ended, not an error line.
#[tokio::test]
async fn a_closed_stdout_ends_a_task_command_quietly() {
    let sw = Swarmd::new("[agents.yes]\nkind = \"process\"\nprogram = \"/bin/cat\"\n")
        .start()
        .await;
    let id = sw
        .create_as(&sw.admin, json!({"agent": "yes", "prompt": "p"}))
        .await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["task", "--url", &sw.base, "--token", &sw.admin, "get", &id])
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the answer is printed.
    drop(child.stdout.take());
    let output = child.wait_with_output().await.unwrap();
    assert_eq!(
        output.status.code(),
        Some(141),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
