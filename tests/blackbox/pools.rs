//! Worker pools (docs/protocol.md, Worker pools): real `swarmd worker pool` processes on
//! loopback run a remote agent's attempts as real children. Two pools share
//! an agent's load; a pool killed with SIGKILL takes its child with it and
//! its attempt is retried by the other after its lease; a cancel reaches the
//! pool's child at once, long ahead of the child's own end; a superseded
//! attempt's late writes are refused and change nothing; and a pool token
//! can do nothing else.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::daemon::{Swarmd, eventually, process_gone, read_pid};
use crate::harness::parts;

mod access;
mod draining;
mod lifecycle;
mod tls;
mod worktrees;

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// `remote` and `other` are remote agents; `local` runs in the daemon.
pub(super) const AGENTS: &str = r#"
[agents.remote]
kind = "remote"
stream = "ndjson"

[agents.other]
kind = "remote"

[agents.local]
kind = "process"
program = "/bin/cat"
"#;

/// What every pool of these tests runs (`$0` is the pool's name): writes its
/// pid, handle and pool (`<task>.<attempt>.pid|handle|pool`), reports
/// progress, and for the prompt `hold` waits for `<task>.<attempt>.go` (at
/// most 30 s) before its Final, `{pool, attempt}`.
const CHILD: &str = r#"
p=$(cat)
d="@DIR@/$SWARM_TASK_ID.$SWARM_ATTEMPT"
echo "$SWARM_WORKER_HANDLE" > "$d.handle"
echo "$0" > "$d.pool"
echo $$ > "$d.pid.tmp" && mv "$d.pid.tmp" "$d.pid"
printf '{"type":"progress","stage":"started"}\n'
if [ "$p" = hold ]; then
  i=0
  while [ $i -lt 600 ] && [ ! -e "$d.go" ]; do sleep 0.05; i=$((i+1)); done
fi
printf '{"type":"final","content":{"kind":"inline","value":{"pool":"%s","attempt":%s}},"ok":true}\n' "$0" "$SWARM_ATTEMPT"
"#;

/// How a test pool is started, beyond its agent and name.
#[derive(Default)]
pub(super) struct Setup<'a> {
    /// The daemon's URL [default: the daemon's own].
    pub(super) server: Option<&'a str>,
    /// Added to the pool's environment.
    pub(super) env: Vec<(&'a str, &'a std::path::Path)>,
    /// More flags before `--`.
    pub(super) args: Vec<String>,
    /// The child's script (`@DIR@`: the daemon's directory) [default: `CHILD`].
    pub(super) script: Option<&'a str>,
    /// `--drain-secs` [default: 5].
    pub(super) drain_secs: Option<u64>,
}

/// A `swarmd worker pool` process; killed when dropped.
pub(super) struct Pool {
    pub(super) child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Reads the pool's stderr into `log` until the pipe closes.
    reader: tokio::task::JoinHandle<()>,
}

impl Pool {
    pub(super) async fn start(
        sw: &Swarmd,
        token: &str,
        agent: &str,
        name: &str,
        concurrency: u32,
    ) -> Pool {
        Pool::start_with(sw, token, agent, name, concurrency, Setup::default()).await
    }

    /// A pool of `sw`'s agent started as `setup` says.
    pub(super) async fn start_with(
        sw: &Swarmd,
        token: &str,
        agent: &str,
        name: &str,
        concurrency: u32,
        setup: Setup<'_>,
    ) -> Pool {
        let script = setup
            .script
            .unwrap_or(CHILD)
            .replace("@DIR@", &sw.dir().display().to_string());
        let server = setup.server.unwrap_or(&sw.base);
        let drain = setup.drain_secs.unwrap_or(5).to_string();
        let mut child = Command::new(BINARY)
            .args(["worker", "pool", "--server", server, "--agent", agent])
            .args(["--concurrency", &concurrency.to_string(), "--pool-id", name])
            .args([
                "--env",
                "PATH",
                "--kill-grace-secs",
                "1",
                "--drain-secs",
                &drain,
            ])
            .args(&setup.args)
            .args(["--", "/bin/sh", "-c", &script, name])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SWARMD_TOKEN", token)
            .env("RUST_LOG", "debug")
            .envs(setup.env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
        Pool { child, log, reader }
    }

    /// Waits up to `within` for the pool to exit, then for its log's last
    /// lines: the reader may still hold them when the process is gone.
    pub(super) async fn exited(&mut self, within: Duration) -> std::process::ExitStatus {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the pool did not exit within {within:?}\n{}", self.log()))
            .unwrap();
        // The pipe closes when the pool and every child holding it are gone.
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.reader).await;
        status
    }

    pub(super) fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).unwrap()
    }

    pub(super) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

/// `swarmd token mint --role worker-pool` for `agents`, as an operator would.
pub(super) fn mint(sw: &Swarmd, agents: &[&str]) -> String {
    let mut command = std::process::Command::new(BINARY);
    command
        .args(["token", "mint", "--role", "worker-pool", "--config"])
        .arg(sw.dir().join("swarmd.toml"));
    for agent in agents {
        command.args(["--agent", agent]);
    }
    let out = command.env_clear().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub(super) async fn create(sw: &Swarmd, body: Value) -> String {
    let (status, answer) = sw.create(body).await;
    assert_eq!(status, 201, "{answer}\n{}", sw.log());
    answer["task_id"].as_str().unwrap().to_owned()
}

pub(super) fn file(sw: &Swarmd, task: &str, attempt: u32, ext: &str) -> std::path::PathBuf {
    sw.dir().join(format!("{task}.{attempt}.{ext}"))
}

#[tokio::test]
async fn two_pools_share_a_remote_agents_load() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let a = Pool::start(&sw, &token, "remote", "pool-a", 2).await;
    let b = Pool::start(&sw, &token, "remote", "pool-b", 2).await;
    // Held until both pools hold two: each pool must take a share.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(create(&sw, json!({"agent": "remote", "prompt": "hold"})).await);
    }
    for task in &tasks {
        read_pid(&file(&sw, task, 1, "pid")).await;
    }
    for task in &tasks {
        std::fs::write(file(&sw, task, 1, "go"), "").unwrap();
    }
    let mut ran_by = Vec::new();
    for task in &tasks {
        let view = sw.finished(task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}\n{}", a.log(), b.log());
        ran_by.push(view["result"]["value"]["pool"].as_str().unwrap().to_owned());
        let stages: Vec<Value> = sw
            .output(task)
            .await
            .iter()
            .filter_map(|r| r["event"]["stage"].as_str().map(Value::from))
            .collect();
        assert_eq!(stages, vec![json!("started")], "progress went through");
    }
    ran_by.sort();
    assert_eq!(ran_by, ["pool-a", "pool-a", "pool-b", "pool-b"]);
    // An attempt that passed is over on the daemon, and no news to log.
    for log in [a.log(), b.log()] {
        assert!(!log.contains("attempt gone"), "{log}");
    }

    // `/v1/agents` lists the remote agent, and the metrics count the pools.
    let (_, agents) = parts(sw.get("/v1/agents", &sw.admin).send().await.unwrap()).await;
    let remote = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "remote")
        .cloned()
        .unwrap_or_default();
    assert_eq!(remote["kind"], "remote", "{agents}");
    let metrics = sw.metrics().await;
    assert!(metrics.contains("swarmd_pools_connected 2"), "{metrics}");
    assert!(
        metrics.contains("swarmd_remote_attempts_claimed_total 4"),
        "{metrics}"
    );
    assert!(metrics.contains("swarmd_pool_claim_wait_seconds_count 4"));
}

#[tokio::test]
async fn a_pool_killed_mid_attempt_takes_its_child_and_another_pool_retries_it() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let mut a = Pool::start(&sw, &token, "remote", "pool-a", 1).await;
    let policy = json!({"max_attempts": 2, "attempt_timeout_secs": 2});
    let task = create(
        &sw,
        json!({"agent": "remote", "prompt": "hold", "policy": policy}),
    )
    .await;
    let first = read_pid(&file(&sw, &task, 1, "pid")).await;
    let b = Pool::start(&sw, &token, "remote", "pool-b", 1).await;

    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    eventually("the killed pool's child is gone", || process_gone(first)).await;

    // The retry is claimed by the other pool once the lease ran out.
    let second = read_pid(&file(&sw, &task, 2, "pid")).await;
    assert!(!process_gone(second));
    std::fs::write(file(&sw, &task, 2, "go"), "").unwrap();
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", b.log());
    assert_eq!(
        view["result"]["value"],
        json!({"pool": "pool-b", "attempt": 2})
    );
    let reason = view["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("lease expired"), "{view}");
}

#[tokio::test]
async fn a_cancel_reaches_the_pools_child_at_once() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let pool = Pool::start(&sw, &token, "remote", "pool-a", 1).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "hold"})).await;
    let child = read_pid(&file(&sw, &task, 1, "pid")).await;

    let asked = Instant::now();
    let (status, body) = parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The child waits 30 s for its `go` file. The cancel answers the pool's
    // pending heartbeat at once and ends the child well within 5 s even on
    // a loaded machine; a cancel the pool learned of only when a heartbeat
    // timed out (up to 10 s) or when the child ended would take longer.
    while !process_gone(child) {
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "the child outlived its cancel by 5 s\n{}",
            pool.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sw.finished(&task).await["status"], "cancelled");
}

#[tokio::test]
async fn a_superseded_attempts_late_writes_are_refused_and_change_nothing() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let pool = Pool::start(&sw, &token, "remote", "pool-a", 1).await;
    let policy = json!({"max_attempts": 2, "attempt_timeout_secs": 2});
    let task = create(
        &sw,
        json!({"agent": "remote", "prompt": "hold", "policy": policy}),
    )
    .await;
    read_pid(&file(&sw, &task, 1, "pid")).await;
    let handle = std::fs::read_to_string(file(&sw, &task, 1, "handle")).unwrap();
    let handle = handle.trim();

    // A pool that stops answering (a partition, a paused VM) loses the lease.
    kill(Pid::from_raw(pool.pid()), Signal::SIGSTOP).unwrap();
    // The lease (2 s) and the backoff (1 s) pass in about 3 s; a loaded
    // machine is given the harness's patience.
    let mut view = Value::Null;
    let asked = Instant::now();
    while asked.elapsed() < crate::harness::PATIENCE {
        view = sw.task(&task).await;
        if view["attempts"].as_array().is_some_and(|a| a.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(view["attempts"].as_array().map(Vec::len), Some(2), "{view}");
    let before = sw.output(&task).await;

    let progress = json!({"type": "progress", "stage": "late"});
    let (status, body) = parts(
        sw.post("/v1/worker/output", handle)
            .json(&progress)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(matches!(status, 409 | 410), "{status} {body}");
    let (status, body) = parts(
        sw.post("/v1/worker/result", handle)
            .json(&json!({"value": "late", "ok": true}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(matches!(status, 409 | 410), "{status} {body}");
    assert_eq!(
        sw.output(&task).await,
        before,
        "a refused write changed nothing"
    );

    // Back, the pool's own writes for attempt 1 are refused the same way;
    // it runs attempt 2, which decides.
    std::fs::write(file(&sw, &task, 1, "go"), "").unwrap();
    kill(Pid::from_raw(pool.pid()), Signal::SIGCONT).unwrap();
    read_pid(&file(&sw, &task, 2, "pid")).await;
    std::fs::write(file(&sw, &task, 2, "go"), "").unwrap();
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(
        view["result"]["value"],
        json!({"pool": "pool-a", "attempt": 2})
    );
    let late_finals = sw
        .output(&task)
        .await
        .iter()
        .filter(|r| r["attempt"] == 1 && r["event"]["type"] == "final")
        .count();
    assert_eq!(late_finals, 0, "attempt 1 never got a Final");
    // At debug level, neither the pool nor the daemon logs a credential.
    for (who, log) in [("pool", pool.log()), ("daemon", sw.log())] {
        assert!(!log.contains(handle), "the {who} logged a handle");
        assert!(!log.contains(&token), "the {who} logged the pool token");
    }
}
