//! The `http` workload: C workers each loop on `POST /v1/tasks` with
//! `wait_secs` for one agent (a process or Lua agent of the generated
//! config), as the admin. A task counts when the answer says `pass`; its
//! latency is the request's round trip. With a process agent the rate is
//! the process spawner's attempts per second.

use std::time::Instant;

use serde_json::Value;
use swarmd_client::SpawnRequest;

use crate::cli::HttpArgs;
use crate::daemon::Target;
use crate::measure::{RunClock, Sampler};
use crate::report::RunReport;
use crate::stats::Tally;
use crate::subagent::error_code;

/// Seconds the daemon holds each request for its task.
const WAIT_SECS: u64 = 60;

/// Runs the workload and reports it.
pub(crate) async fn run(
    target: &Target,
    http: &reqwest::Client,
    args: &HttpArgs,
) -> anyhow::Result<RunReport> {
    let workers = args.in_flight.max(1);
    let clock = RunClock::new(&args.bound);
    let window_sampler = Sampler::over_window(target.pid, &clock);
    let count_sampler = Sampler::begin(target.pid);
    let mut handles = Vec::with_capacity(workers);
    for index in 0..workers {
        let worker = Worker {
            http: http.clone(),
            url: target.url("/v1/tasks"),
            admin: target.admin_token.clone(),
            agent: args.agent.clone(),
            clock,
            quota: clock.share(workers, index),
        };
        handles.push(tokio::spawn(worker.run()));
    }
    let mut tally = Tally::default();
    for handle in handles {
        tally.merge(handle.await?);
    }
    let usage = match window_sampler {
        Some(handle) => handle.await?,
        None => count_sampler.end(),
    };
    if let Some(path) = &args.latency_csv {
        tally.write_csv(path)?;
    }
    Ok(RunReport {
        workload: format!("http {}", args.agent),
        store: target.store_label.clone(),
        sessions: "-".to_owned(),
        load_shape: format!("C={workers}"),
        summary: tally.summarize(clock.measured(&tally)),
        usage,
    })
}

/// One request loop.
struct Worker {
    http: reqwest::Client,
    url: String,
    admin: String,
    agent: String,
    clock: RunClock,
    quota: Option<u64>,
}

impl Worker {
    async fn run(mut self) -> Tally {
        let mut tally = Tally::default();
        let body = waited_task(&self.agent, "\"bench\"", WAIT_SECS);
        loop {
            let now = Instant::now();
            let in_time = self.clock.stop_at().is_none_or(|stop| now < stop);
            if !in_time || self.quota == Some(0) {
                break;
            }
            if let Some(quota) = self.quota.as_mut() {
                *quota -= 1;
            }
            match spawn_and_wait(&self.http, &self.url, &self.admin, &body).await {
                Ok(()) => {
                    let done = Instant::now();
                    tally.record(self.clock.start, done, done - now);
                }
                Err(code) => tally.error(code),
            }
        }
        tally
    }
}

/// The body of a `POST /v1/tasks` of `agent` with `prompt` that waits up to
/// `wait_secs` for the task to end (`swarmd-client`'s request).
pub(crate) fn waited_task(agent: &str, prompt: &str, wait_secs: u64) -> SpawnRequest {
    SpawnRequest {
        agent: agent.to_owned(),
        prompt: prompt.to_owned(),
        wait_secs: Some(wait_secs),
        ..SpawnRequest::default()
    }
}

/// `POST /v1/tasks` with `body` (which carries `wait_secs`) as the admin:
/// `Ok` when the task passed, else the error code.
pub(crate) async fn spawn_and_wait(
    http: &reqwest::Client,
    url: &str,
    admin: &str,
    body: &SpawnRequest,
) -> Result<(), String> {
    let response = http
        .post(url)
        .bearer_auth(admin)
        .json(body)
        .send()
        .await
        .map_err(|_| "transport".to_owned())?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|_| "transport".to_owned())?;
    if status != 201 {
        return Err(error_code(status, &bytes));
    }
    let answer: Value = serde_json::from_slice(&bytes).map_err(|_| "bad_answer".to_owned())?;
    match answer["status"].as_str() {
        Some("pass") => Ok(()),
        Some(other) => Err(format!("task_{other}")),
        None => Err("bad_answer".to_owned()),
    }
}
