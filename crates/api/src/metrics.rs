//! Prometheus metrics of the daemon (docs/operations.md, Observing), rendered as OpenMetrics text
//! by `GET /metrics`.
//!
//! Two sources meet here. The HTTP side counts what only it sees (token
//! verification failures by reason, store append latency as the worker routes
//! measure it, requests by route and status) in `prometheus-client` metrics
//! that live as long as the daemon. The engine keeps its own atomics
//! (`EngineStats`, admission load); those are read once per scrape into a
//! plain snapshot and encoded by a collector, so nothing is copied between
//! scrapes and the engine never depends on this crate.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use swarmd_engine::Engine;
use swarmd_engine::budget::BudgetLimit;
use swarmd_engine::metrics::Histogram;
use swarmd_engine::task::{AttemptOutcome, TaskStatus};
use swarmd_engine::usage::UsageTotals;
use swarmd_output_store::SqliteDb;
use swarmd_postgres::PgDb;
use swarmd_spawner::remote::RemotePools;

use crate::history::History;

mod guards;

pub use guards::GuardMetrics;

/// Every metric name starts with this.
pub const PREFIX: &str = "swarmd";

/// The `Content-Type` of a scrape answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type ReasonLabel = [(&'static str, &'static str); 1];
type OutcomeLabel = [(&'static str, &'static str); 1];
type HttpLabels = [(&'static str, String); 2];

/// The daemon's own metrics; one per daemon, in `AppState`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    token_failures: Family<ReasonLabel, Counter>,
    http_requests: Family<HttpLabels, Counter>,
    forwarded: Family<OutcomeLabel, Counter>,
    mcp_sessions_refused: Family<ReasonLabel, Counter>,
    /// What the accept loop and the request guards refused.
    guards: GuardMetrics,
    /// The SQLite database, whose writer counters are read at each scrape.
    db: Option<SqliteDb>,
    /// The PostgreSQL database, whose writer counters are read at each scrape.
    pg: Option<PgDb>,
    /// The overview's recent samples (`history`).
    history: History,
    /// Remote agents' attempts and their pools, read at each scrape.
    pools: Option<Arc<RemotePools>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of HTTP-side metrics, all zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let token_failures = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "token_verify_failures",
            "Credentials refused, by precise reason (never shown to clients)",
            token_failures.clone(),
        );
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template and status",
            http_requests.clone(),
        );
        let forwarded = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "cluster_forwarded_requests",
            "Requests about a live task another cluster node holds: relayed from it \
             (forwarded) or answered 503 owner_unavailable (unavailable)",
            forwarded.clone(),
        );
        let mcp_sessions_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "mcp_sessions_refused",
            "New MCP sessions refused with 429, by the cap they were over: the \
             credential's share (credential) or the operators' table (total)",
            mcp_sessions_refused.clone(),
        );
        let guards = GuardMetrics::register(&mut registry);
        Metrics {
            registry,
            token_failures,
            http_requests,
            forwarded,
            mcp_sessions_refused,
            guards,
            db: None,
            pg: None,
            history: History::default(),
            pools: None,
        }
    }

    /// Also reports the group commits and WAL syncs of `db`.
    pub fn with_store(mut self, db: Option<SqliteDb>) -> Metrics {
        self.db = db;
        self
    }

    /// Also reports the group commits of the PostgreSQL writer of `pg`.
    pub fn with_postgres(mut self, pg: Option<PgDb>) -> Metrics {
        self.pg = pg;
        self
    }

    /// The SQLite database, when the store is one.
    pub fn store(&self) -> Option<&SqliteDb> {
        self.db.as_ref()
    }

    /// The PostgreSQL database, when the store is one.
    pub fn postgres(&self) -> Option<&PgDb> {
        self.pg.as_ref()
    }

    /// The samples of the last minutes (`GET /v1/metrics/history`).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Also reports the worker pools of `pools`.
    pub fn with_pools(mut self, pools: Arc<RemotePools>) -> Metrics {
        self.pools = Some(pools);
        self
    }

    /// Counts a refused credential; `reason` is a `TokenError::reason()` or
    /// one of the HTTP-side reasons (`forbidden`, `handle_expired`,
    /// `task_mismatch`, `unknown_secret`, `malformed`, `too_long`).
    pub fn token_failure(&self, reason: &'static str) {
        self.token_failures
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// Counts a request or MCP call about a task another node holds;
    /// `outcome` is `forwarded` or `unavailable`.
    pub fn forwarded(&self, outcome: &'static str) {
        self.forwarded.get_or_create(&[("outcome", outcome)]).inc();
    }

    /// The counters of the accept loop and the request guards, shared with
    /// them (cheap to clone).
    pub fn guards(&self) -> GuardMetrics {
        self.guards.clone()
    }

    /// Counts a new MCP session refused over a cap; `reason` is
    /// `credential` or `total`.
    pub fn mcp_session_refused(&self, reason: &'static str) {
        self.mcp_sessions_refused
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// Counts one answered request; `route` is the matched route template.
    pub fn http_request(&self, route: &str, status: u16) {
        let labels = [("route", route.to_owned()), ("status", status.to_string())];
        self.http_requests.get_or_create(&labels).inc();
    }

    /// The whole scrape: engine counters and gauges read now, then the HTTP
    /// side, then the OpenMetrics `# EOF` line.
    ///
    /// # Errors
    /// Only if formatting into a `String` fails, which it does not.
    pub fn render(&self, engine: &Engine, sessions_connected: usize) -> Result<String, fmt::Error> {
        let mut scrape = Registry::with_prefix(PREFIX);
        scrape.register_collector(Box::new(EngineSnapshot::take(engine, sessions_connected)));
        if let Some(db) = &self.db {
            scrape.register_collector(Box::new(StoreSnapshot::take(db)));
        }
        if let Some(pg) = &self.pg {
            scrape.register_collector(Box::new(PgStoreSnapshot::take(pg)));
        }
        if let Some(pools) = &self.pools {
            scrape.register_collector(Box::new(PoolSnapshot::take(pools)));
        }
        let mut out = String::with_capacity(4096);
        text::encode_registry(&mut out, &scrape)?;
        text::encode_registry(&mut out, &self.registry)?;
        text::encode_eof(&mut out)?;
        Ok(out)
    }
}

/// The engine's numbers at one instant.
#[derive(Debug)]
struct EngineSnapshot {
    tasks_created: u64,
    tasks_finished: [(TaskStatus, u64); 4],
    attempts_started: u64,
    attempts_finished: [(AttemptOutcome, u64); 4],
    dispatch: HistogramSnapshot,
    append: HistogramSnapshot,
    settle: HistogramSnapshot,
    blobs_swept: u64,
    blob_bytes_swept: u64,
    output_budget_refusals: u64,
    /// Tokens and cost workers reported, by (agent, model).
    usage: Vec<((String, String), UsageTotals)>,
    budget_stops: [(BudgetLimit, u64); 2],
    queued: usize,
    running: usize,
    live: usize,
    sessions_connected: usize,
    draining: bool,
}

impl EngineSnapshot {
    fn take(engine: &Engine, sessions_connected: usize) -> EngineSnapshot {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = engine.stats();
        let (queued, running) = engine.load();
        EngineSnapshot {
            tasks_created: stats.tasks_created.load(Relaxed),
            tasks_finished: stats.tasks_finished(),
            attempts_started: stats.attempts_started.load(Relaxed),
            attempts_finished: stats.attempts_finished(),
            dispatch: HistogramSnapshot::take(&stats.dispatch_latency),
            append: HistogramSnapshot::take(&stats.store_append_latency),
            settle: HistogramSnapshot::take(&stats.settle_latency),
            blobs_swept: stats.blobs_swept.load(Relaxed),
            blob_bytes_swept: stats.blob_bytes_swept.load(Relaxed),
            output_budget_refusals: stats.output_budget_refusals.load(Relaxed),
            usage: stats.usage.by_agent_model(),
            budget_stops: [
                (
                    BudgetLimit::Tokens,
                    stats.usage.budget_stops_tokens.load(Relaxed),
                ),
                (
                    BudgetLimit::Cost,
                    stats.usage.budget_stops_cost.load(Relaxed),
                ),
            ],
            queued,
            running,
            live: engine.live_tasks(),
            sessions_connected,
            draining: engine.is_draining(),
        }
    }
}

impl EngineSnapshot {
    /// Tokens by kind and cost by agent and model, and budget stops.
    fn encode_usage(&self, encoder: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        {
            let mut family = encoder.encode_descriptor(
                "tokens",
                "Tokens workers reported since start, by agent, model and kind (input, output, cache_read, cache_write)",
                None,
                MetricType::Counter,
            )?;
            for ((agent, model), totals) in &self.usage {
                for (kind, value) in [
                    ("input", totals.input_tokens),
                    ("output", totals.output_tokens),
                    ("cache_read", totals.cache_read_tokens),
                    ("cache_write", totals.cache_write_tokens),
                ] {
                    let labels = [
                        ("agent", agent.as_str()),
                        ("model", model.as_str()),
                        ("kind", kind),
                    ];
                    ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "cost_usd",
                "Cost in US dollars workers reported since start, by agent and model",
                None,
                MetricType::Counter,
            )?;
            for ((agent, model), totals) in &self.usage {
                let labels = [("agent", agent.as_str()), ("model", model.as_str())];
                ConstCounter::new(totals.cost_usd).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "budget_stops",
            "Attempts stopped, or tasks not started again, because the task passed policy.max_tokens (tokens) or policy.max_cost_usd (cost)",
            None,
            MetricType::Counter,
        )?;
        for (limit, count) in self.budget_stops {
            let labels = [("limit", limit.as_str())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The SQLite writer's counters at one instant.
#[derive(Debug)]
struct StoreSnapshot {
    commits: u64,
    syncs: u64,
    jobs: u64,
    failed_jobs: u64,
    sync: HistogramSnapshot,
    commit: HistogramSnapshot,
}

/// A fixed-bucket histogram read at one instant.
#[derive(Debug)]
struct HistogramSnapshot {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum_secs: f64,
}

impl HistogramSnapshot {
    fn take(histogram: &Histogram) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: histogram.bounds(),
            counts: histogram.counts(),
            sum_secs: histogram.sum_secs(),
        }
    }
}

impl StoreSnapshot {
    fn take(db: &SqliteDb) -> StoreSnapshot {
        let stats = db.stats();
        StoreSnapshot {
            commits: stats.commits(),
            syncs: stats.syncs(),
            jobs: stats.jobs(),
            failed_jobs: stats.failed_jobs(),
            sync: HistogramSnapshot::take(stats.sync_latency()),
            commit: HistogramSnapshot::take(stats.commit_latency()),
        }
    }
}

impl Collector for StoreSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let counters = [
            (
                "store_commits",
                "SQLite group commits since start",
                self.commits,
            ),
            (
                "store_syncs",
                "fdatasyncs of the WAL since start (synchronous = full; one covers every group committed before it)",
                self.syncs,
            ),
            (
                "store_write_jobs",
                "Write jobs run by the SQLite writer since start",
                self.jobs,
            ),
            (
                "store_failed_write_jobs",
                "Write jobs that failed or panicked since start",
                self.failed_jobs,
            ),
        ];
        for (name, help, value) in counters {
            counter(&mut encoder, name, help, value)?;
        }
        histogram(
            &mut encoder,
            "store_sync_seconds",
            "Time of each fdatasync of the WAL (synchronous = full): the disk's share of a durable acknowledgement",
            &self.sync,
        )?;
        histogram(
            &mut encoder,
            "store_commit_seconds",
            "Time of each group commit's COMMIT on the writer thread (WAL page writes, and a WAL-restart checkpoint when due); writes queued meanwhile wait",
            &self.commit,
        )
    }
}

/// The PostgreSQL writer's counters at one instant. The server's own WAL
/// flushes are PostgreSQL's to report (`pg_stat_wal`), so there is no
/// `store_syncs` here.
#[derive(Debug)]
struct PgStoreSnapshot {
    commits: u64,
    jobs: u64,
    failed_groups: u64,
    commit: HistogramSnapshot,
}

impl PgStoreSnapshot {
    fn take(pg: &PgDb) -> PgStoreSnapshot {
        let stats = pg.stats();
        PgStoreSnapshot {
            commits: stats.commits(),
            jobs: stats.jobs(),
            failed_groups: stats.failed_groups(),
            commit: HistogramSnapshot::take(stats.commit_latency()),
        }
    }
}

impl Collector for PgStoreSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let counters = [
            (
                "store_commits",
                "PostgreSQL group commits since start",
                self.commits,
            ),
            (
                "store_write_jobs",
                "Write jobs run by the PostgreSQL writer since start",
                self.jobs,
            ),
            (
                "store_failed_write_groups",
                "Group commits that failed and were retried job by job since start",
                self.failed_groups,
            ),
        ];
        for (name, help, value) in counters {
            counter(&mut encoder, name, help, value)?;
        }
        histogram(
            &mut encoder,
            "store_commit_seconds",
            "Time of each group commit from BEGIN to the answer of its COMMIT (synchronous_commit = on: includes the server's WAL flush); writes queued meanwhile wait",
            &self.commit,
        )
    }
}

/// The worker pools' numbers at one instant.
#[derive(Debug)]
struct PoolSnapshot {
    connected: usize,
    claimed: u64,
    claim_wait: HistogramSnapshot,
}

impl PoolSnapshot {
    fn take(pools: &RemotePools) -> PoolSnapshot {
        PoolSnapshot {
            connected: pools.connected_pools(),
            claimed: pools.claimed_total(),
            claim_wait: HistogramSnapshot::take(pools.claim_wait()),
        }
    }
}

impl Collector for PoolSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let gauge = ConstGauge::new(i64::try_from(self.connected).unwrap_or(i64::MAX));
        gauge.encode(encoder.encode_descriptor(
            "pools_connected",
            "Worker pools that claimed or heartbeat in the last 30 seconds",
            None,
            gauge.metric_type(),
        )?)?;
        counter(
            &mut encoder,
            "remote_attempts_claimed",
            "Remote agents' attempts claimed by worker pools since start",
            self.claimed,
        )?;
        histogram(
            &mut encoder,
            "pool_claim_wait_seconds",
            "Time a remote attempt waited in its agent's queue before a pool claimed it",
            &self.claim_wait,
        )
    }
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Encodes a fixed-bucket histogram read by `HistogramSnapshot::take`.
fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    snapshot: &HistogramSnapshot,
) -> Result<(), fmt::Error> {
    let HistogramSnapshot {
        bounds,
        counts,
        sum_secs,
    } = snapshot;
    let mut buckets: Vec<(f64, u64)> = bounds.iter().copied().zip(counts.iter().copied()).collect();
    // The encoder writes `f64::MAX` as `+Inf`.
    buckets.push((f64::MAX, counts.last().copied().unwrap_or(0)));
    let count = counts.iter().sum();
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    metric.encode_histogram::<()>(*sum_secs, count, &buckets, None)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: usize,
) -> Result<(), fmt::Error> {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for EngineSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        counter(
            &mut encoder,
            "tasks_created",
            "Tasks created since start",
            self.tasks_created,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "tasks_finished",
                "Tasks that became terminal since start, by status",
                None,
                MetricType::Counter,
            )?;
            for (status, count) in self.tasks_finished {
                let labels = [("status", status.as_str())];
                ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
            }
        }
        counter(
            &mut encoder,
            "attempts_started",
            "Attempts started since start",
            self.attempts_started,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "attempts_finished",
                "Attempts finished since start, by outcome",
                None,
                MetricType::Counter,
            )?;
            for (outcome, count) in self.attempts_finished {
                let labels = [("outcome", outcome.as_str())];
                ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
            }
        }
        counter(
            &mut encoder,
            "blobs_swept",
            "Spilled blob files deleted by retention once no output referenced them",
            self.blobs_swept,
        )?;
        counter(
            &mut encoder,
            "blob_bytes_swept",
            "Bytes of the spilled blob files retention deleted",
            self.blob_bytes_swept,
        )?;
        counter(
            &mut encoder,
            "output_budget_refusals",
            "Output writes refused because their attempt's output budget was spent",
            self.output_budget_refusals,
        )?;
        self.encode_usage(&mut encoder)?;
        histogram(
            &mut encoder,
            "dispatch_latency_seconds",
            "Time from admission to the worker being spawned",
            &self.dispatch,
        )?;
        histogram(
            &mut encoder,
            "store_append_latency_seconds",
            "Time from an output append to its durable commit",
            &self.append,
        )?;
        histogram(
            &mut encoder,
            "settle_latency_seconds",
            "Time from a worker's end to its attempt's outcome being durable and published",
            &self.settle,
        )?;
        gauge(
            &mut encoder,
            "queue_depth",
            "Tasks waiting for a slot",
            self.queued,
        )?;
        gauge(
            &mut encoder,
            "attempts_running",
            "Attempts running (workers alive)",
            self.running,
        )?;
        gauge(
            &mut encoder,
            "tasks_live",
            "Tasks not yet terminal, held in memory",
            self.live,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "tasks",
                "Tasks waiting for a slot (queued) and attempts running (running)",
                None,
                MetricType::Gauge,
            )?;
            for (status, count) in [
                (TaskStatus::Queued, self.queued),
                (TaskStatus::Running, self.running),
            ] {
                let labels = [("status", status.as_str())];
                let value = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
                value.encode(family.encode_family(&labels)?)?;
            }
        }
        gauge(
            &mut encoder,
            "sessions_connected",
            "Operator sessions with a WebSocket attached",
            self.sessions_connected,
        )?;
        gauge(
            &mut encoder,
            "draining",
            "1 while the daemon is draining",
            usize::from(self.draining),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use swarmd_engine::testing::{StaticResolver, memory_engine};

    #[test]
    fn scrape_lists_every_metric_and_ends_with_eof() {
        let engine = memory_engine(Arc::new(StaticResolver::new()), Default::default());
        let metrics = Metrics::new();
        metrics.token_failure("bad_signature");
        engine
            .stats()
            .store_append_latency
            .observe(std::time::Duration::from_millis(3));
        metrics.http_request("/v1/tasks", 201);
        let text = metrics.render(&engine, 2).unwrap();
        for name in [
            "swarmd_tasks_created_total 0",
            "swarmd_tasks_finished_total{status=\"pass\"} 0",
            "swarmd_attempts_finished_total{outcome=\"blocked\"} 0",
            "swarmd_dispatch_latency_seconds_bucket{le=\"+Inf\"} 0",
            "swarmd_dispatch_latency_seconds_count 0",
            "swarmd_settle_latency_seconds_count 0",
            "swarmd_blobs_swept_total 0",
            "swarmd_blob_bytes_swept_total 0",
            "swarmd_queue_depth 0",
            "swarmd_attempts_running 0",
            "swarmd_tasks{status=\"queued\"} 0",
            "swarmd_sessions_connected 2",
            "swarmd_token_verify_failures_total{reason=\"bad_signature\"} 1",
            "swarmd_store_append_latency_seconds_count 1",
            "swarmd_http_requests_total{route=\"/v1/tasks\",status=\"201\"} 1",
        ] {
            assert!(text.contains(name), "missing `{name}` in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[tokio::test]
    async fn a_sqlite_store_adds_its_commits_and_syncs() {
        let engine = memory_engine(Arc::new(StaticResolver::new()), Default::default());
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteDb::open(swarmd_output_store::SqliteOptions::new(
            dir.path().join("swarmd.db"),
        ))
        .unwrap();
        db.write(|tx| Ok(tx.execute_batch("CREATE TABLE t (x)")?))
            .await
            .unwrap();
        let metrics = Metrics::new().with_store(Some(db.clone()));
        let text = metrics.render(&engine, 0).unwrap();
        for name in [
            "swarmd_store_commits_total 1",
            "swarmd_store_syncs_total 1",
            "swarmd_store_write_jobs_total 1",
            "swarmd_store_failed_write_jobs_total 0",
            "swarmd_store_sync_seconds_count 1",
            "swarmd_store_sync_seconds_bucket{le=\"0.0001\"}",
            "swarmd_store_sync_seconds_bucket{le=\"+Inf\"} 1",
            "swarmd_store_commit_seconds_count 1",
        ] {
            assert!(text.contains(name), "missing `{name}` in:\n{text}");
        }
        assert!(
            !Metrics::new()
                .render(&engine, 0)
                .unwrap()
                .contains("store_commits")
        );
        db.close().unwrap();
    }
}
