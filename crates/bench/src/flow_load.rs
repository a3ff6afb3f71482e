//! The `flows` workload: C workers in a closed loop each run a flow end to
//! end (`POST /v1/runs`, then `GET /v1/runs/{id}?wait=` until it ends; a run
//! counts when it passed with the expected result, its latency from the
//! POST to the answer saying `passed`), then the same steps as plain tasks
//! (`POST /v1/tasks` with `wait_secs`: 3 in sequence for `seq3`, 5 at once
//! and then 1 for `fan5`, each given the previous results as the flow's
//! steps are), in the same daemon, so `flow / plain` of time and CPU is the
//! flow's overhead. Server CPU per run comes from `/proc`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};
use swarmd_client::RunRequest;

use crate::daemon::Target;
use crate::flow_defs::{AGENT, FAN_WIDTH, SEQ_LEN, Shape};
use crate::http_load::waited_task;
use crate::measure::{RunClock, Sampler, Usage};
use crate::stats::{Summary, Tally, errors_text};
use crate::subagent::error_code;

/// Seconds each request waits for its task or run.
const WAIT_SECS: u64 = 60;
/// Longest a run may take before it counts as an error.
const RUN_PATIENCE: Duration = Duration::from_secs(300);
/// The run's input text, which the steps pass on.
const TEXT: &str = "bench";

/// How a shape is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// As a flow run.
    Flow,
    /// As plain tasks.
    Plain,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Flow => "flow",
            Mode::Plain => "tasks",
        }
    }
}

/// How a flow is named in `POST /v1/runs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowSource {
    /// By name (a spawned daemon has the flows in its `[flows_dir]`).
    Named,
    /// As IR with each run (a daemon given with `--url`).
    Inline,
}

/// One measurement: `runs` runs of a shape in one mode.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub shape: Shape,
    pub mode: Mode,
    pub in_flight: usize,
    pub summary: Summary,
    pub usage: Usage,
}

impl Measured {
    /// Daemon CPU milliseconds per finished run.
    pub(crate) fn server_ms_per_run(&self) -> Option<f64> {
        per_run(self.usage.server_cpu, self.summary.completed)
    }

    /// The line printed after the measurement.
    pub(crate) fn one_line(&self) -> String {
        format!(
            "{} {} C={}: {} runs, {:.0} runs/s ({:.0} steps/s), p50 {} p99 {}, errors {}, \
             srv CPU {} ms/run, load {}",
            self.mode.label(),
            self.shape.label(),
            self.in_flight,
            self.summary.completed,
            self.summary.tasks_per_sec,
            self.summary.tasks_per_sec * self.shape.steps() as f64,
            ms(self.summary.p50),
            ms(self.summary.p99),
            self.summary.errors_text(),
            opt(self.server_ms_per_run(), 3),
            opt(self.usage.load, 2),
        )
    }
}

/// Runs `runs` runs of `shape` in `mode`, `in_flight` at once.
pub(crate) async fn measure(
    target: &Target,
    http: &reqwest::Client,
    shape: Shape,
    mode: Mode,
    source: FlowSource,
    runs: u64,
    in_flight: usize,
) -> anyhow::Result<Measured> {
    let workers = in_flight.max(1);
    let clock = RunClock::new(&crate::cli::Bound {
        duration: Duration::ZERO,
        warmup: Duration::ZERO,
        count: Some(runs),
        drain: RUN_PATIENCE,
    });
    let sampler = Sampler::begin(target.pid);
    let mut handles = Vec::with_capacity(workers);
    for index in 0..workers {
        let worker = Worker {
            api: Api {
                http: http.clone(),
                target: target.clone(),
            },
            shape,
            mode,
            source,
            clock,
            quota: clock.share(workers, index).unwrap_or(0),
        };
        handles.push(tokio::spawn(worker.run()));
    }
    let mut tally = Tally::default();
    for handle in handles {
        tally.merge(handle.await?);
    }
    let usage = sampler.end();
    Ok(Measured {
        shape,
        mode,
        in_flight: workers,
        summary: tally.summarize(clock.measured(&tally)),
        usage,
    })
}

/// One closed-loop worker.
struct Worker {
    api: Api,
    shape: Shape,
    mode: Mode,
    source: FlowSource,
    clock: RunClock,
    quota: u64,
}

impl Worker {
    async fn run(self) -> Tally {
        let mut tally = Tally::default();
        let expected = expected_result(self.shape);
        for _ in 0..self.quota {
            let began = Instant::now();
            let outcome = match self.mode {
                Mode::Flow => self.api.flow_run(self.shape, self.source).await,
                Mode::Plain => self.api.plain_run(self.shape).await,
            };
            match outcome {
                Ok(result) if result == expected => {
                    let done = Instant::now();
                    tally.record(self.clock.start, done, done - began);
                }
                Ok(other) => tally.error_with("wrong_result", &other.to_string()),
                Err((code, message)) => tally.error_with(code, &message),
            }
        }
        tally
    }
}

/// What a run of `shape` returns: seq3 passes the input's text through
/// three steps; fan5's last step gets every part's result.
pub(crate) fn expected_result(shape: Shape) -> Value {
    match shape {
        Shape::Seq3 => json!(TEXT),
        Shape::Fan5 => json!(fan_join(
            &(0..FAN_WIDTH)
                .map(|n| format!("{TEXT} {n}"))
                .collect::<Vec<_>>()
        )),
    }
}

/// The prompt of fan5's last step: every part's result, `;`-terminated
/// (the flow's template writes the same).
fn fan_join(parts: &[String]) -> String {
    parts.iter().map(|p| format!("{p};")).collect()
}

/// A failed call: its error code and a message.
pub(crate) type Failure = (String, String);

/// The daemon's API as the admin.
#[derive(Clone)]
pub(crate) struct Api {
    pub http: reqwest::Client,
    pub target: Target,
}

impl Api {
    /// Sends `request` as the admin; the JSON answer when its status is
    /// `expect`, else the error code of the body.
    pub(crate) async fn call(
        &self,
        request: reqwest::RequestBuilder,
        expect: &[u16],
    ) -> Result<Value, Failure> {
        let response = request
            .bearer_auth(&self.target.admin_token)
            .send()
            .await
            .map_err(|e| ("transport".to_owned(), e.to_string()))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ("transport".to_owned(), e.to_string()))?;
        if !expect.contains(&status) {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            return Err((error_code(status, &bytes), text));
        }
        serde_json::from_slice(&bytes).map_err(|e| ("bad_answer".to_owned(), e.to_string()))
    }

    /// Starts a run of flow `flow` (a name or IR); its id.
    pub(crate) async fn start_run(&self, flow: Value, input: Value) -> Result<String, Failure> {
        let request = self
            .http
            .post(self.target.url("/v1/runs"))
            .json(&RunRequest {
                flow,
                input,
                idempotency_key: None,
            });
        let view = self.call(request, &[201]).await?;
        view["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ("bad_answer".to_owned(), view.to_string()))
    }

    /// Waits for run `id` to end; its result when it passed.
    pub(crate) async fn wait_run(&self, id: &str) -> Result<Value, Failure> {
        let deadline = Instant::now() + RUN_PATIENCE;
        let url = self.target.url(&format!("/v1/runs/{id}?wait={WAIT_SECS}"));
        loop {
            let view = self.call(self.http.get(&url), &[200]).await?;
            match view["status"].as_str() {
                Some("passed") => return Ok(view["result"].clone()),
                Some(status @ ("failed" | "cancelled")) => {
                    return Err((format!("run_{status}"), view["error"].to_string()));
                }
                Some(_) if Instant::now() < deadline => {}
                _ => return Err(("run_not_ended".to_owned(), view.to_string())),
            }
        }
    }

    /// One run as a flow; its result.
    async fn flow_run(&self, shape: Shape, source: FlowSource) -> Result<Value, Failure> {
        let flow = match source {
            FlowSource::Named => json!(shape.flow_name()),
            FlowSource::Inline => shape.flow(),
        };
        let id = self.start_run(flow, json!({"text": TEXT})).await?;
        self.wait_run(&id).await
    }

    /// One run's steps as plain tasks; the last one's result.
    async fn plain_run(&self, shape: Shape) -> Result<Value, Failure> {
        match shape {
            Shape::Seq3 => {
                let mut value = json!(TEXT);
                for _ in 0..SEQ_LEN {
                    let prompt = value.as_str().unwrap_or_default().to_owned();
                    value = self.task(prompt).await?;
                }
                Ok(value)
            }
            Shape::Fan5 => {
                let parts = (0..FAN_WIDTH).map(|n| self.task(format!("{TEXT} {n}")));
                let mut results = Vec::with_capacity(FAN_WIDTH);
                for part in join_all(parts).await {
                    results.push(part?.as_str().unwrap_or_default().to_owned());
                }
                self.task(fan_join(&results)).await
            }
        }
    }

    /// One task of the Lua agent, waited for; its result's value.
    async fn task(&self, prompt: String) -> Result<Value, Failure> {
        let request = self
            .http
            .post(self.target.url("/v1/tasks"))
            .json(&waited_task(AGENT, &prompt, WAIT_SECS));
        let answer = self.call(request, &[201]).await?;
        match answer["status"].as_str() {
            Some("pass") => Ok(task_value(&answer)),
            Some(other) => Err((format!("task_{other}"), answer.to_string())),
            None => Err(("bad_answer".to_owned(), answer.to_string())),
        }
    }
}

/// The value a finished task's answer carries (`result.value`).
fn task_value(answer: &Value) -> Value {
    answer["result"]["value"].clone()
}

/// The table of the measurements and, per shape, flow against plain.
pub(crate) fn markdown(rows: &[Measured], store: &str) -> String {
    let mut out = format!(
        "Store: {store}. A run is one flow run, or its steps as plain tasks.\n\n\
         | shape | as | C | runs | runs/s | p50 ms | p90 ms | p99 ms | max ms | errors \
         | srv CPU ms/run | gen CPU ms/run | load avg |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n"
    );
    for r in rows {
        let s = &r.summary;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.shape.label(),
            r.mode.label(),
            r.in_flight,
            s.completed,
            s.tasks_per_sec,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max),
            errors_text(&s.errors),
            opt(r.server_ms_per_run(), 3),
            opt(per_run(r.usage.generator_cpu, s.completed), 3),
            opt(r.usage.load, 2),
        );
    }
    out.push_str(
        "\n| shape | flow / tasks: time per run (1 / runs/s) | p50 | p99 | srv CPU per run |\n\
         |---|--:|--:|--:|--:|\n",
    );
    for shape in [Shape::Seq3, Shape::Fan5] {
        let of = |mode| {
            rows.iter()
                .filter(move |r| r.shape == shape && r.mode == mode)
        };
        for (flow, plain) in of(Mode::Flow).zip(of(Mode::Plain)) {
            let (f, p) = (&flow.summary, &plain.summary);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                shape.label(),
                opt(ratio(Some(p.tasks_per_sec), Some(f.tasks_per_sec)), 2),
                opt(ratio(secs(f.p50), secs(p.p50)), 2),
                opt(ratio(secs(f.p99), secs(p.p99)), 2),
                opt(
                    ratio(flow.server_ms_per_run(), plain.server_ms_per_run()),
                    2
                ),
            );
        }
    }
    out
}

/// `a / b` when both are known and `b` is not zero.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (b > 0.0).then(|| a / b)
}

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

fn per_run(secs: Option<f64>, runs: u64) -> Option<f64> {
    (runs > 0).then_some(secs? * 1000.0 / runs as f64)
}

pub(crate) fn ms(duration: Option<Duration>) -> String {
    match duration {
        Some(d) => format!("{:.2}", d.as_secs_f64() * 1000.0),
        None => "-".to_owned(),
    }
}

pub(crate) fn opt(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_owned(),
    }
}

#[cfg(test)]
#[path = "flow_load_tests.rs"]
mod tests;
