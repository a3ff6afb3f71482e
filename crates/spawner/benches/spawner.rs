//! Spawner benchmarks (issue budgets): process attempts with a `/bin/true`
//! child and Lua attempts returning a constant, both end to end through the
//! engine over memory stores; and the stack's own overhead per attempt (base
//! layers plus three hint layers around a no-op spawner).
//!
//! Run with `cargo bench -p swarmd-spawner --bench spawner`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use swarmd_engine::ids::{AttemptId, TaskId, WorkerId};
use swarmd_engine::task::{SpawnerKind, TaskSpec, TaskStatus};
use swarmd_engine::testing::{engine_host, memory_engine};
use swarmd_engine::{
    Attempt, Ctx, Engine, EngineConfig, SpawnError, SpawnerAdapter, SpawnerResolver, Worker,
    WorkerCredential, WorkerError,
};
use swarmd_spawner::operator::{NoSessions, SessionDirectory};
use swarmd_spawner::process::StdinMode;
use swarmd_spawner::{
    AgentEntry, AgentKind, AgentSpec, HostEnv, LuaAgentSpec, LuaLimits, LuaPool, ProcessSpec,
    SpawnerSettings, StackResolver, standard_layers,
};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const IN_FLIGHT: usize = 32;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temp dir");
        let settings = SpawnerSettings::new(
            "http://127.0.0.1:7700",
            HostEnv::from_pairs([("PATH", "/usr/bin:/bin")]),
        );
        let lua = LuaPool::new(2, LuaLimits::default()).expect("lua threads");

        let rate = process_attempts(&settings, &lua, 2_000).await;
        report(
            "process spawner, /bin/true, through the engine",
            rate,
            "attempts/s",
            300.0,
            true,
        );

        let script = dir.path().join("constant.lua");
        std::fs::write(&script, "return 42").expect("script");
        let rate = lua_attempts(&settings, &lua, &script, 40_000).await;
        report(
            "lua agent returning a constant, through the engine",
            rate,
            "attempts/s",
            5_000.0,
            true,
        );

        let (stacked, bare) = stack_overhead(&settings, &lua, 200_000).await;
        println!("  bare no-op spawner: {bare:.2} us per attempt");
        report(
            "stack overhead (audit, long_hold, main_ai, senior_escalation, operator_delegate)",
            stacked - bare,
            "us per attempt",
            20.0,
            false,
        );
    });
}

fn report(what: &str, value: f64, unit: &str, budget: f64, floor: bool) {
    let ok = if floor {
        value >= budget
    } else {
        value <= budget
    };
    let bound = if floor { ">=" } else { "<=" };
    let verdict = if ok { "ok" } else { "OVER BUDGET" };
    println!("{what}: {value:.1} {unit} (budget {bound} {budget}) {verdict}");
}

/// Runs `n` tasks of `agent`, `IN_FLIGHT` at a time; returns tasks per second.
async fn run_tasks(engine: &Engine, agent: &str, n: usize) -> f64 {
    let started = Instant::now();
    let mut running = JoinSet::new();
    for i in 0..n {
        if running.len() >= IN_FLIGHT {
            check(running.join_next().await);
        }
        let engine = engine.clone();
        let spec = TaskSpec {
            agent: agent.to_owned(),
            prompt: format!("task {i}"),
            ..TaskSpec::default()
        };
        running.spawn(async move {
            let task = engine.create_task(spec).await.expect("spawned");
            engine
                .wait_task(task.id, Duration::from_secs(60))
                .await
                .expect("waited")
                .status()
        });
    }
    while let Some(done) = running.join_next().await {
        check(Some(done));
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn check(done: Option<Result<TaskStatus, tokio::task::JoinError>>) {
    if let Some(done) = done {
        assert_eq!(done.expect("no panic"), TaskStatus::Pass);
    }
}

async fn process_attempts(settings: &SpawnerSettings, lua: &LuaPool, n: usize) -> f64 {
    let mut spec = ProcessSpec::new("/bin/true");
    spec.stdin = StdinMode::None;
    let agent = agent("true", AgentKind::Process(spec));
    let resolver =
        StackResolver::from_config(settings, &[agent], lua, no_operators()).expect("config");
    let engine = memory_engine(Arc::new(resolver), EngineConfig::default());
    run_tasks(&engine, "true", n / 10).await;
    run_tasks(&engine, "true", n).await
}

async fn lua_attempts(
    settings: &SpawnerSettings,
    lua: &LuaPool,
    script: &std::path::Path,
    n: usize,
) -> f64 {
    let agent = agent(
        "const",
        AgentKind::Lua(LuaAgentSpec {
            script: script.to_owned(),
        }),
    );
    let resolver =
        StackResolver::from_config(settings, &[agent], lua, no_operators()).expect("config");
    let engine = memory_engine(Arc::new(resolver), EngineConfig::default());
    run_tasks(&engine, "const", n / 10).await;
    run_tasks(&engine, "const", n).await
}

fn no_operators() -> Arc<dyn SessionDirectory> {
    Arc::new(NoSessions)
}

fn agent(name: &str, kind: AgentKind) -> AgentSpec {
    AgentSpec {
        name: name.to_owned(),
        kind,
        layers: Vec::new(),
        concurrency: None,
        allow_subtasks: false,
        input_schema: None,
        worktree: None,
    }
}

/// Microseconds per spawn + join: through the linked stack, and of the bare
/// no-op spawner. The stack is called directly, outside dispatch, so that
/// only the layers' own work is measured.
async fn stack_overhead(settings: &SpawnerSettings, lua: &LuaPool, n: u32) -> (f64, f64) {
    let noop: Arc<dyn SpawnerAdapter> = Arc::new(Noop);
    let registry = standard_layers(settings, &[], lua, &no_operators()).expect("layers");
    let entry = AgentEntry {
        kind: SpawnerKind::InProcess,
        spawner: Arc::clone(&noop),
        layers: ["main_ai", "senior_escalation", "operator_delegate"]
            .map(str::to_owned)
            .to_vec(),
        concurrency: None,
        allow_subtasks: false,
        credential_leaves: false,
        input_schema: None,
        route: None,
    };
    let resolver = StackResolver::new(HashMap::from([("noop".to_owned(), entry)]), registry);
    let stack = resolver.link("noop", &[]).expect("linked");
    let engine = memory_engine(Arc::new(resolver), EngineConfig::default());
    let stacked = per_attempt(&engine, &stack, n).await;
    let bare = per_attempt(&engine, &noop, n).await;
    (stacked, bare)
}

async fn per_attempt(engine: &Engine, stack: &Arc<dyn SpawnerAdapter>, n: u32) -> f64 {
    let credential = WorkerCredential::new("swc1.k.p.t".into(), "wh-0".into(), u64::MAX);
    let started = Instant::now();
    for attempt in 1..=n {
        let id = AttemptId::new(TaskId::new(), attempt);
        let ctx = Ctx {
            id,
            agent: "noop".into(),
            layers: Vec::new(),
            session: None,
            operator_sid: None,
            lease_deadline_ms: u64::MAX,
            delegated: false,
            long_hold_warn_secs: 0,
            continued_from: None,
            resume_session: None,
            meta: serde_json::Map::new(),
        };
        let attempt = Attempt {
            ctx,
            credential: credential.clone(),
            host: engine_host(engine, id),
        };
        let worker = stack.spawn(attempt).await.expect("spawned");
        std::hint::black_box(worker.join().await.ok());
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

/// Spawns workers that complete at once.
#[derive(Debug)]
struct Noop;

#[async_trait]
impl SpawnerAdapter for Noop {
    async fn spawn(&self, _attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        Ok(Box::new(NoopWorker(WorkerId::new())))
    }
}

#[derive(Debug)]
struct NoopWorker(WorkerId);

#[async_trait]
impl Worker for NoopWorker {
    fn id(&self) -> WorkerId {
        self.0
    }

    fn cancel_token(&self) -> CancellationToken {
        CancellationToken::new()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        Ok(())
    }
}
