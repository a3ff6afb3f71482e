//! What a command runs: one workload against one daemon, the matrix (every
//! store × every C, the open loop and the http agents, one daemon per
//! store), the flows workload (flow runs against the same steps as plain
//! tasks, then recovery across a kill -9), or the smoke run (every workload
//! with small counts, asserting that each finished everything it started
//! without an error).

use std::time::Duration;

use anyhow::{Context, bail};

use crate::cli::{
    Bound, Cli, Command, DEFAULT_PROMPT_BYTES, FlowArgs, HttpArgs, IdleArgs, MatrixArgs, McpArgs,
    Revision, StoreKind, TargetArgs, WsArgs,
};
use crate::config::Capacity;
use crate::daemon::{SpawnedDaemon, Target};
use crate::flow_defs::Shape;
use crate::flow_load::{FlowSource, Mode};
use crate::report::{RunReport, markdown};
use crate::{flow_load, flow_recovery, http_load, idle, machine, mcp, remote_pool, ws_delegated};

/// Runs the command; returns how many errors the runs saw.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<u64> {
    let http = client()?;
    let stores = &cli.target.store;
    let first_store = stores.first().copied().unwrap_or(StoreKind::Sqlite);
    match cli.command {
        Command::WsDelegated(args) => {
            let daemon = Running::open(&cli.target, first_store).await?;
            let result = ws_delegated::run(&daemon.target, &http, &args).await;
            finish_runs(daemon, result.map(|r| vec![r])).await
        }
        Command::Http(args) => {
            let daemon = Running::open(&cli.target, first_store).await?;
            let result = http_load::run(&daemon.target, &http, &args).await;
            finish_runs(daemon, result.map(|r| vec![r])).await
        }
        Command::Mcp(args) => {
            let daemon = Running::open(&cli.target, first_store).await?;
            let result = mcp::run(&daemon.target, &http, &args).await;
            let report = daemon.close(result).await?;
            println!("{}\n\n{}", machine::description(), report.markdown());
            Ok(report.error_count())
        }
        Command::IdleCapacity(args) => {
            let mut target = cli.target.clone();
            if args.queued {
                target.max_running = Some(1);
            }
            let daemon = Running::open(&target, first_store).await?;
            let result = idle::run(&daemon.target, &http, &args).await;
            let report = daemon.close(result).await?;
            println!("{}", report.markdown());
            Ok(report.errors.error_count())
        }
        Command::Matrix(args) => {
            let stores = if stores.is_empty() {
                vec![
                    StoreKind::Sqlite,
                    StoreKind::SqliteNormal,
                    StoreKind::Memory,
                ]
            } else {
                stores.clone()
            };
            let mut reports = Vec::new();
            for store in stores {
                let daemon = Running::open(&cli.target, store).await?;
                let result = matrix(&daemon.target, &http, &args).await;
                reports.extend(daemon.close(result).await?);
            }
            println!("{}\n{}", machine::description(), markdown(&reports));
            Ok(reports.iter().map(|r| r.summary.error_count()).sum())
        }
        Command::RemotePool(args) => {
            let Some(binary) = cli.target.spawn_daemon.clone() else {
                bail!("remote-pool starts its own daemon and pool: give --spawn-daemon PATH");
            };
            let daemon = Running::open(&cli.target, first_store).await?;
            let spawned = daemon.spawned.as_ref().context("no spawned daemon")?;
            let result = remote_pool::run(&binary, spawned, &http, &args).await;
            let report = daemon.close(result).await?;
            println!("{}\n\n{}", machine::description(), report.markdown());
            Ok(report.error_count())
        }
        Command::Flows(args) => {
            let mut daemon = Running::open(&cli.target, first_store).await?;
            println!("{}\n", machine::description());
            let result = flows(&mut daemon, &http, &args.effective()).await;
            daemon.close(result).await
        }
        Command::Smoke => {
            let daemon = Running::open(&cli.target, first_store).await?;
            let result = smoke(&daemon.target, &http).await;
            let (reports, idle_errors) = daemon.close(result).await?;
            println!("{}", markdown(&reports));
            // Queued tasks need a daemon with one running slot: only one
            // this run starts itself can be given that.
            let queued_errors = if cli.target.spawn_daemon.is_some() {
                let mut target = cli.target.clone();
                target.max_running = Some(1);
                let daemon = Running::open(&target, first_store).await?;
                let result = smoke_idle(&daemon.target, &http, true).await;
                daemon.close(result).await?
            } else {
                0
            };
            // The flows on a daemon of their own: its recovery kills it.
            let mut daemon = Running::open(&cli.target, first_store).await?;
            let result = flows(&mut daemon, &http, &FlowArgs::quick()).await;
            let flow_errors = daemon.close(result).await?;
            Ok(reports.iter().map(|r| r.summary.error_count()).sum::<u64>()
                + idle_errors
                + queued_errors
                + flow_errors)
        }
    }
}

/// The shared keep-alive client of every HTTP call.
fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .timeout(Duration::from_secs(120))
        .build()
        .context("cannot build the HTTP client")
}

/// The runs of one store in the matrix.
async fn matrix(
    target: &Target,
    http: &reqwest::Client,
    args: &MatrixArgs,
) -> anyhow::Result<Vec<RunReport>> {
    let mut reports = Vec::new();
    let mut record = |report: RunReport| {
        eprintln!("{}", report.one_line());
        reports.push(report);
    };
    for &in_flight in &args.in_flight {
        let ws = WsArgs {
            sessions: args.sessions,
            in_flight,
            rate: None,
            bound: args.bound.clone(),
            latency_csv: None,
            prompt_bytes: DEFAULT_PROMPT_BYTES,
        };
        record(ws_delegated::run(target, http, &ws).await?);
    }
    if args.rate > 0.0 {
        let ws = WsArgs {
            sessions: args.sessions,
            in_flight: 0,
            rate: Some(args.rate),
            bound: args.bound.clone(),
            latency_csv: None,
            prompt_bytes: DEFAULT_PROMPT_BYTES,
        };
        record(ws_delegated::run(target, http, &ws).await?);
    }
    if args.http_in_flight > 0 {
        for agent in ["true", "lua"] {
            let run = HttpArgs {
                agent: agent.to_owned(),
                in_flight: args.http_in_flight,
                bound: args.bound.clone(),
                latency_csv: None,
            };
            record(http_load::run(target, http, &run).await?);
        }
    }
    Ok(reports)
}

/// Every workload, small; fails when a run did not finish all it started.
async fn smoke(target: &Target, http: &reqwest::Client) -> anyhow::Result<(Vec<RunReport>, u64)> {
    let counted = |count: u64| Bound {
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        count: Some(count),
        drain: Duration::from_secs(10),
    };
    let mut reports = Vec::new();
    let closed = WsArgs {
        sessions: 2,
        in_flight: 8,
        rate: None,
        bound: counted(200),
        latency_csv: None,
        // A coding agent's prompt runs to kilobytes.
        prompt_bytes: 4096,
    };
    reports.push(expect_count(
        ws_delegated::run(target, http, &closed).await?,
        200,
    )?);
    let open = WsArgs {
        sessions: 2,
        in_flight: 0,
        rate: Some(200.0),
        bound: counted(100),
        latency_csv: None,
        prompt_bytes: DEFAULT_PROMPT_BYTES,
    };
    reports.push(expect_count(
        ws_delegated::run(target, http, &open).await?,
        100,
    )?);
    for agent in ["true", "cat", "lua"] {
        let args = HttpArgs {
            agent: agent.to_owned(),
            in_flight: 4,
            bound: counted(20),
            latency_csv: None,
        };
        reports.push(expect_count(
            http_load::run(target, http, &args).await?,
            20,
        )?);
    }
    for report in &reports {
        eprintln!("{}", report.one_line());
    }
    let mcp_errors = smoke_mcp(target, http).await?;
    let idle_errors = smoke_idle(target, http, false).await?;
    Ok((reports, idle_errors + mcp_errors))
}

/// The flows workload: per shape, warm-up runs, then `rounds` of flow runs
/// and the same steps as plain tasks; then, on a spawned daemon, the
/// recovery. Prints the tables; returns the errors seen; fails if a
/// measurement finished fewer runs than it was given.
async fn flows(
    daemon: &mut Running,
    http: &reqwest::Client,
    args: &FlowArgs,
) -> anyhow::Result<u64> {
    let source = match daemon.spawned {
        Some(_) => FlowSource::Named,
        None => FlowSource::Inline,
    };
    let target = daemon.target.clone();
    let mut rows = Vec::new();
    let mut errors = 0;
    for shape in [Shape::Seq3, Shape::Fan5] {
        for mode in [Mode::Flow, Mode::Plain] {
            if args.warmup > 0 {
                let warm = flow_load::measure(
                    &target,
                    http,
                    shape,
                    mode,
                    source,
                    args.warmup,
                    args.in_flight,
                )
                .await?;
                errors += warm.summary.error_count();
            }
        }
        for _ in 0..args.rounds {
            for mode in [Mode::Flow, Mode::Plain] {
                let measured = flow_load::measure(
                    &target,
                    http,
                    shape,
                    mode,
                    source,
                    args.runs,
                    args.in_flight,
                )
                .await?;
                eprintln!("{}", measured.one_line());
                let (done, failed) = (measured.summary.completed, measured.summary.error_count());
                if done + failed != args.runs {
                    bail!(
                        "{}: {done} of {} runs finished",
                        measured.one_line(),
                        args.runs
                    );
                }
                errors += failed;
                rows.push(measured);
            }
        }
    }
    println!("{}", flow_load::markdown(&rows, &target.store_label));
    if args.recovery > 0 {
        match daemon.spawned.as_mut() {
            Some(spawned) => {
                let recovery =
                    flow_recovery::run(spawned, http, args.recovery, args.in_flight).await?;
                daemon.target = spawned.target.clone();
                eprintln!(
                    "flows recovery: {} runs held, passed {:.2} s after the restart",
                    recovery.runs,
                    recovery.passed.as_secs_f64()
                );
                println!("{}", recovery.markdown());
                errors += recovery.error_count();
            }
            None => eprintln!("swarmd-bench: the flows' recovery needs --spawn-daemon; skipped"),
        }
    }
    Ok(errors)
}

/// The smoke run's MCP stage: a few round trips per path, 100 tasks fanned
/// out in calls of 50, then over two loops. Returns the errors seen; fails
/// if a measurement finished fewer tasks than it was given.
async fn smoke_mcp(target: &Target, http: &reqwest::Client) -> anyhow::Result<u64> {
    let args = McpArgs {
        agent: "lua".to_owned(),
        round_trips: 5,
        warmup: 1,
        fanout: 100,
        batch: 50,
        concurrent: 2,
        revision: Revision::Latest,
        session_token: false,
    };
    let report = mcp::run(target, http, &args).await?;
    eprintln!("{}", report.markdown());
    let errors = report.error_count();
    if errors == 0 && !report.finished_all(&args) {
        bail!("mcp: a measurement finished fewer tasks than it was given");
    }
    Ok(errors)
}

/// The smoke run's idle-capacity stages (50, then 100 tasks held): waiting
/// on SubAgents, or `queued` (which needs a daemon with one running slot).
/// Returns the errors seen; fails if a stage was not reached.
async fn smoke_idle(target: &Target, http: &reqwest::Client, queued: bool) -> anyhow::Result<u64> {
    let idle_args = IdleArgs {
        at: vec![50, 100],
        sessions: 2,
        patience: Duration::from_secs(20),
        queued,
    };
    let held = idle::run(target, http, &idle_args).await?;
    eprintln!("{}", held.markdown());
    if held.checkpoints.len() != idle_args.at.len() {
        bail!(
            "idle-capacity reached {} of its checkpoints",
            held.checkpoints.len()
        );
    }
    Ok(held.errors.error_count())
}

/// Fails when a counted run finished fewer tasks than it was given.
fn expect_count(report: RunReport, count: u64) -> anyhow::Result<RunReport> {
    let done = report.summary.completed;
    if done != count && report.summary.error_count() == 0 {
        bail!("{}: {done} of {count} tasks finished", report.workload);
    }
    Ok(report)
}

/// The daemon of a command: started here, or given.
struct Running {
    target: Target,
    spawned: Option<SpawnedDaemon>,
}

impl Running {
    async fn open(args: &TargetArgs, store: StoreKind) -> anyhow::Result<Running> {
        match &args.spawn_daemon {
            Some(binary) => {
                let capacity = Capacity {
                    max_running: args.max_running.unwrap_or(args.capacity),
                    park_max: args.capacity,
                };
                let daemon = SpawnedDaemon::start(
                    binary,
                    store,
                    capacity,
                    args.worktree_files,
                    &args.daemon_log,
                    args.pg_url.as_deref().zip(args.pg_password_file.as_deref()),
                )
                .await?;
                eprintln!(
                    "swarmd-bench: started {} [{}] at {}, pid {}, config {}",
                    binary.display(),
                    store.label(),
                    daemon.target.base,
                    daemon.target.pid.map_or("?".to_owned(), |p| p.to_string()),
                    daemon.dir().join("swarmd.toml").display(),
                );
                Ok(Running {
                    target: daemon.target.clone(),
                    spawned: Some(daemon),
                })
            }
            None => Ok(Running {
                target: Target::external(args)?,
                spawned: None,
            }),
        }
    }

    /// Stops a started daemon; a failed run's error carries its log.
    async fn close<T>(self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let Some(daemon) = self.spawned else {
            return result;
        };
        match result {
            Ok(value) => {
                daemon.stop().await?;
                Ok(value)
            }
            Err(error) => {
                let log = daemon.log();
                let _ = daemon.stop().await;
                Err(error.context(format!("the daemon's last stderr lines:\n{log}")))
            }
        }
    }
}

/// Prints the reports of single runs and counts their errors.
async fn finish_runs(
    daemon: Running,
    result: anyhow::Result<Vec<RunReport>>,
) -> anyhow::Result<u64> {
    let reports = daemon.close(result).await?;
    for report in &reports {
        eprintln!("{}", report.one_line());
    }
    println!("{}", markdown(&reports));
    Ok(reports.iter().map(|r| r.summary.error_count()).sum())
}
