//! The recovery part of the `flows` workload: N runs of `bench-hold` are
//! started and left on their wait, the daemon is killed with SIGKILL and
//! started again on the same state, and the time from the restart is taken
//! until it listens, until every run is listed again as waiting
//! (`GET /v1/runs?status=waiting`, paged), and until every run, its wait
//! then answered, has passed. An answer the daemon refuses while the run
//! is still listed as waiting (the runner has not read it back yet) is
//! retried and counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use futures_util::StreamExt as _;
use futures_util::stream;
use serde_json::json;

use crate::daemon::SpawnedDaemon;
use crate::flow_defs::{HOLD_NAME, HOLD_WAIT};
use crate::flow_load::{Api, Failure};
use crate::stats::errors_text;

/// Runs per listing page (the daemon's maximum).
const PAGE: usize = 500;
/// Longest any phase may take.
const PATIENCE: Duration = Duration::from_secs(120);
/// Pause between listings or retried answers.
const POLL: Duration = Duration::from_millis(5);

/// What the recovery measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recovery {
    pub runs: usize,
    /// Starting the runs, until all were listed as waiting.
    pub started_in: Duration,
    /// From the restart: the daemon reported its address.
    pub listening: Duration,
    /// From the restart: every run listed as waiting again.
    pub listed: Duration,
    /// From the restart: every run passed after its wait was answered.
    pub passed: Duration,
    /// Answers refused with a run still listed as waiting, then retried.
    pub early_refusals: BTreeMap<String, u64>,
    /// Errors by code (runs that did not pass).
    pub errors: BTreeMap<String, u64>,
}

impl Recovery {
    /// Runs that did not pass.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The report.
    pub(crate) fn markdown(&self) -> String {
        let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
        format!(
            "| runs held | start + listed s | restart → listening s | → all listed waiting s \
             | → all answered and passed s | early answers refused | errors |\n\
             |--:|--:|--:|--:|--:|---|---|\n\
             | {} | {} | {} | {} | {} | {} | {} |\n",
            self.runs,
            s(self.started_in),
            s(self.listening),
            s(self.listed),
            s(self.passed),
            errors_text(&self.early_refusals),
            errors_text(&self.errors),
        )
    }
}

/// Holds `runs` runs on a wait, kills and restarts `daemon`, and times the
/// way back; `in_flight` requests at once.
pub(crate) async fn run(
    daemon: &mut SpawnedDaemon,
    http: &reqwest::Client,
    runs: usize,
    in_flight: usize,
) -> anyhow::Result<Recovery> {
    let in_flight = in_flight.max(1);
    let began = Instant::now();
    let api = Api {
        http: http.clone(),
        target: daemon.target.clone(),
    };
    let started: Vec<Result<String, Failure>> = stream::iter(0..runs)
        .map(|_| api.start_run(json!(HOLD_NAME), json!({})))
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut ids = Vec::with_capacity(runs);
    for result in started {
        match result {
            Ok(id) => ids.push(id),
            Err((code, message)) => bail!("a held run did not start: {code}: {message}"),
        }
    }
    wait_listed(&api, runs).await?;
    let started_in = began.elapsed();

    daemon.kill_hard().await?;
    let restart = Instant::now();
    daemon.restart().await?;
    let listening = restart.elapsed();
    let api = Api {
        http: http.clone(),
        target: daemon.target.clone(),
    };
    wait_listed(&api, runs).await?;
    let listed = restart.elapsed();

    let answered: Vec<Result<BTreeMap<String, u64>, Failure>> = stream::iter(ids.iter())
        .map(|id| answer_and_wait(&api, id))
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let passed = restart.elapsed();
    let mut recovery = Recovery {
        runs,
        started_in,
        listening,
        listed,
        passed,
        ..Recovery::default()
    };
    for result in answered {
        match result {
            Ok(refused) => {
                for (code, count) in refused {
                    *recovery.early_refusals.entry(code).or_default() += count;
                }
            }
            Err((code, message)) => {
                if recovery.error_count() < 3 {
                    eprintln!("swarmd-bench: recovery error {code}: {message}");
                }
                *recovery.errors.entry(code).or_default() += 1;
            }
        }
    }
    Ok(recovery)
}

/// Waits until `runs` runs are listed as waiting.
async fn wait_listed(api: &Api, runs: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let seen = match count_waiting(api).await {
            Ok(seen) => seen,
            Err((code, message)) => bail!("listing the runs failed: {code}: {message}"),
        };
        if seen >= runs {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{seen} of {runs} runs listed as waiting after {PATIENCE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs listed as waiting, page by page.
async fn count_waiting(api: &Api) -> Result<usize, Failure> {
    let mut count = 0;
    let mut before: Option<String> = None;
    loop {
        let mut url = api
            .target
            .url(&format!("/v1/runs?status=waiting&limit={PAGE}"));
        if let Some(id) = &before {
            url.push_str("&before=");
            url.push_str(id);
        }
        let page = api.call(api.http.get(url), &[200]).await?;
        let runs = page["runs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        count += runs.len();
        match runs.last().and_then(|r| r["id"].as_str()) {
            Some(last) if runs.len() == PAGE => before = Some(last.to_owned()),
            _ => return Ok(count),
        }
    }
}

/// Answers run `id`'s wait and waits for it to pass; the answers refused
/// while it was still waiting, by code.
async fn answer_and_wait(api: &Api, id: &str) -> Result<BTreeMap<String, u64>, Failure> {
    let deadline = Instant::now() + PATIENCE;
    let url = api.target.url(&format!("/v1/runs/{id}/waits/{HOLD_WAIT}"));
    let mut refused = BTreeMap::new();
    loop {
        let request = api.http.post(&url).json(&json!({"value": "go"}));
        match api.call(request, &[200]).await {
            Ok(_) => break,
            Err((code, message)) => {
                let status = api
                    .call(
                        api.http.get(api.target.url(&format!("/v1/runs/{id}"))),
                        &[200],
                    )
                    .await?;
                if status["status"] != "waiting" || Instant::now() > deadline {
                    return Err((code, message));
                }
                *refused.entry(code).or_default() += 1;
                tokio::time::sleep(POLL).await;
            }
        }
    }
    let result = api.wait_run(id).await?;
    if result != json!("go") {
        return Err(("wrong_result".to_owned(), result.to_string()));
    }
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_refusals_and_errors() {
        let mut recovery = Recovery {
            runs: 1000,
            listening: Duration::from_millis(250),
            passed: Duration::from_millis(2500),
            ..Recovery::default()
        };
        recovery.early_refusals.insert("run_terminal".into(), 7);
        let table = recovery.markdown();
        let row = table.lines().nth(2).unwrap();
        assert_eq!(
            row,
            "| 1000 | 0.00 | 0.25 | 0.00 | 2.50 | run_terminal×7 | 0 |"
        );
        assert_eq!(recovery.error_count(), 0);
        recovery.errors.insert("run_failed".into(), 2);
        assert_eq!(recovery.error_count(), 2);
    }
}
