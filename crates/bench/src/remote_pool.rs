//! `remote-pool`: the dispatch overhead of a worker pool on loopback. The
//! spawned daemon has a remote agent `remote` and a local process agent
//! `stamp` that run the same trivial command, `/bin/date +%s%N`: its output
//! (the child's start, in unix nanoseconds) is the task's result. A real
//! `swarmd worker pool` runs `remote`'s attempts. N sequential round trips
//! per agent, interleaved (the order alternating), each a `POST /v1/tasks`
//! with `wait_secs`; per agent, the time from just before the request to
//! the child's start (dispatch) and to the answer (end to end), and the
//! remote agent's excess over the local one at p50 and p99.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::process::Command;

use crate::cli::RemoteArgs;
use crate::daemon::SpawnedDaemon;
use crate::http_load::waited_task;
use crate::mcp::report::Spread;

/// The two agents, local first.
const AGENTS: [&str; 2] = ["stamp", "remote"];

/// Latencies and errors of one agent.
#[derive(Debug, Default)]
struct Samples {
    dispatch: Vec<Duration>,
    end_to_end: Vec<Duration>,
    errors: BTreeMap<String, u64>,
}

/// One agent's row: its dispatch and end-to-end spreads, and its errors.
#[derive(Debug)]
struct Row {
    agent: String,
    dispatch: Option<Spread>,
    end_to_end: Option<Spread>,
    errors: BTreeMap<String, u64>,
}

/// The report: a row per agent and the overhead.
#[derive(Debug)]
pub(crate) struct RemoteReport {
    rows: Vec<Row>,
}

impl RemoteReport {
    pub(crate) fn error_count(&self) -> u64 {
        self.rows.iter().flat_map(|r| r.errors.values()).sum()
    }

    pub(crate) fn markdown(&self) -> String {
        let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1000.0);
        let mut out = String::from(
            "| agent | n | dispatch p50 ms | dispatch p99 ms | end-to-end p50 ms | end-to-end p99 ms | errors |\n|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let Row {
                agent,
                dispatch,
                end_to_end,
                errors,
            } = row;
            let (Some(d), Some(e)) = (dispatch, end_to_end) else {
                out.push_str(&format!("| {agent} | 0 | – | – | – | – | {errors:?} |\n"));
                continue;
            };
            out.push_str(&format!(
                "| {agent} | {} | {} | {} | {} | {} | {} |\n",
                d.count,
                ms(d.p50),
                ms(d.p99),
                ms(e.p50),
                ms(e.p99),
                errors.values().sum::<u64>()
            ));
        }
        if let [local, remote] = &self.rows[..]
            && let (Some(ld), Some(le), Some(rd), Some(re)) = (
                &local.dispatch,
                &local.end_to_end,
                &remote.dispatch,
                &remote.end_to_end,
            )
        {
            let excess = |r: Duration, l: Duration| {
                format!("{:+.2}", (r.as_secs_f64() - l.as_secs_f64()) * 1000.0)
            };
            out.push_str(&format!(
                "| remote − local | | {} | {} | {} | {} | |\n",
                excess(rd.p50, ld.p50),
                excess(rd.p99, ld.p99),
                excess(re.p50, le.p50),
                excess(re.p99, le.p99),
            ));
        }
        out
    }
}

/// Mints the pool's token, starts the pool, and runs the round trips.
pub(crate) async fn run(
    binary: &Path,
    daemon: &SpawnedDaemon,
    http: &reqwest::Client,
    args: &RemoteArgs,
) -> anyhow::Result<RemoteReport> {
    let token_file = daemon.dir().join("pool.token");
    let minted = Command::new(binary)
        .args([
            "token",
            "mint",
            "--role",
            "worker-pool",
            "--agent",
            "remote",
        ])
        .arg("--config")
        .arg(daemon.dir().join("swarmd.toml"))
        .env_clear()
        .output()
        .await
        .context("cannot run `swarmd token mint`")?;
    if !minted.status.success() {
        bail!(
            "token mint failed: {}",
            String::from_utf8_lossy(&minted.stderr)
        );
    }
    std::fs::write(&token_file, &minted.stdout)?;
    let mut pool = Command::new(binary)
        .args([
            "worker",
            "pool",
            "--server",
            &daemon.target.base,
            "--agent",
            "remote",
        ])
        .args([
            "--concurrency",
            &args.concurrency.to_string(),
            "--pool-id",
            "bench",
        ])
        .arg("--token-file")
        .arg(&token_file)
        .args(["--", "/bin/date", "+%s%N"])
        .env_clear()
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start `swarmd worker pool`")?;

    let url = daemon.target.url("/v1/tasks");
    let mut samples = [Samples::default(), Samples::default()];
    for round in 0..args.warmup + args.round_trips {
        let measured = round >= args.warmup;
        for turn in 0..2 {
            let which = (round + turn) % 2;
            let outcome = round_trip(http, &url, &daemon.target.admin_token, AGENTS[which]).await;
            let one = &mut samples[which];
            match outcome {
                Ok((dispatch, e2e)) if measured => {
                    one.dispatch.push(dispatch);
                    one.end_to_end.push(e2e);
                }
                Ok(_) => {}
                Err(code) => *one.errors.entry(code).or_default() += 1,
            }
        }
    }
    let _ = pool.start_kill();
    let _ = pool.wait().await;
    Ok(RemoteReport {
        rows: AGENTS
            .iter()
            .zip(samples)
            .map(|(agent, s)| Row {
                agent: (*agent).to_owned(),
                dispatch: Spread::of(&s.dispatch),
                end_to_end: Spread::of(&s.end_to_end),
                errors: s.errors,
            })
            .collect(),
    })
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// One task of `agent`: (created → child started, created → answered).
async fn round_trip(
    http: &reqwest::Client,
    url: &str,
    admin: &str,
    agent: &str,
) -> Result<(Duration, Duration), String> {
    let body = waited_task(agent, "bench", 60);
    let sent_ns = unix_nanos();
    let started = Instant::now();
    let response = http
        .post(url)
        .bearer_auth(admin)
        .json(&body)
        .send()
        .await
        .map_err(|_| "transport".to_owned())?;
    let status = response.status().as_u16();
    let answer: Value = response.json().await.map_err(|_| "bad_answer".to_owned())?;
    let e2e = started.elapsed();
    if status != 201 || answer["status"] != "pass" {
        return Err(format!(
            "{status}_{}",
            answer["status"].as_str().unwrap_or("?")
        ));
    }
    let child_ns = answer["result"]["value"]
        .as_u64()
        .ok_or_else(|| "no_stamp".to_owned())?;
    let dispatch = u64::try_from(u128::from(child_ns).saturating_sub(sent_ns)).unwrap_or(0);
    Ok((Duration::from_nanos(dispatch), e2e))
}
