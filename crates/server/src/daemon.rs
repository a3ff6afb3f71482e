//! The composition root: turns the validated configuration and the prepared
//! state directory into stores, the engine, the spawner stack and the
//! session registry, wires them together, and recovers before anything is
//! served. Everything is built here and passed in; nothing is global.

use std::sync::Arc;
use std::time::{Duration, Instant};

use swarmd_engine::auth::{AuthorityConfig, Keyring, TokenAuthority};
use swarmd_engine::clock::{Clock, SystemClock};
use swarmd_engine::store::{MemoryTaskStore, SqliteTaskStore, TaskStore};
use swarmd_engine::task::Policy;
use swarmd_engine::{Engine, EngineConfig, EngineParts, RecoveryReport};
use swarmd_git::worktree::{self, Worktrees};
use swarmd_output_store::{
    MemoryOutputStore, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore, StoreError,
};
use swarmd_postgres::{PgDb, PgOptions, PgOutputStore, PgTaskStore};
use swarmd_spawner::layers::SeniorSettings;
use swarmd_spawner::operator::{NoSessions, SessionDirectory};
use swarmd_spawner::remote::RemotePools;
use swarmd_spawner::{
    AgentSpec, ConfigErrors, HostEnv, LuaLimits, LuaPool, SpawnerSettings, StackResolver,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::state::{PreparedState, SecretSource};
use swarmd_api::app::{AppInner, AppState};
use swarmd_api::http::guard::Guards;
use swarmd_api::metrics::Metrics;
use swarmd_cluster as cluster;
use swarmd_config::environment::Environment;
use swarmd_config::{Config, ConfigError, StoreBackend};
use swarmd_sessions::{EventRouter, SessionRegistry};

/// Lua runs on its own small pool of OS threads, never on the async executor.
const LUA_THREADS: usize = 2;
/// How often retention looks for finished work to prune.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);
/// How often it looks with the memory backend, which evicts terminal tasks
/// beyond `store.memory_keep_finished` as they finish: each run forgets the
/// evicted tasks' outputs, so they must not pile up for an hour.
const MEMORY_RETENTION_EVERY: Duration = Duration::from_secs(5);

/// Why the daemon could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot open the store at {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: StoreError,
    },
    #[error("cannot start the Lua pool: {0}")]
    Lua(String),
    #[error("invalid agents: {0}")]
    Agents(ConfigErrors),
    #[error("recovery failed: {0}")]
    Recovery(#[source] swarmd_engine::EngineError),
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("invalid flows: {}", .0.join("; "))]
    Flows(Vec<String>),
    #[error("invalid configuration: {0}")]
    ToolName(ConfigError),
}

/// The assembled daemon, recovered and ready to serve.
#[derive(Debug)]
pub struct Daemon {
    pub app: AppState,
    /// The shared SQLite handle, closed (flushed) at shutdown.
    pub db: Option<SqliteDb>,
    /// The shared PostgreSQL handle, closed (flushed) at shutdown.
    pub pg: Option<PgDb>,
    pub recovery: RecoveryReport,
    /// Stops the cluster node's heartbeat and event pump (on PostgreSQL),
    /// once the engine has drained.
    pub cluster_stop: CancellationToken,
}

/// Builds every part from `config` and recovers the engine's state.
pub async fn build(
    config: Arc<Config>,
    state: PreparedState,
    env: &Environment,
    bound: std::net::SocketAddr,
    shutdown: CancellationToken,
) -> Result<Daemon, BuildError> {
    let base_url = config.base_url(bound);
    // Settings that start but are risky (`check-config` prints the same).
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let Stores {
        tasks: store,
        outputs,
        sqlite: db,
        postgres: pg,
    } = open_stores(&config, &state, env).await?;
    // On PostgreSQL this daemon is a node: registered (a new epoch) before
    // recovery, which then reads the live tasks it owns.
    let cluster = cluster::settings(&config);
    let mut forwarder = None;
    let mut node = None;
    if let Some(db) = &pg {
        let id = cluster::node_id(&cluster, &config.store.state_dir)
            .map_err(|e| BuildError::Cluster(e.to_string()))?;
        let advertise = cluster.advertise_url.as_deref().unwrap_or(&base_url);
        cluster::register(db, id, advertise, &config)
            .await
            .map_err(|e| BuildError::Cluster(e.to_string()))?;
        forwarder = Some(
            cluster::Forwarder::new(db.cluster(), id)
                .map_err(|e| BuildError::Cluster(format!("cannot build the peer client: {e}")))?,
        );
        node = Some(id);
    }
    let catalog = load_flows(&config)?;
    let wait_secret = state.keyring.current().derive("flow wait tokens");
    let tokens = Arc::new(token_authority(&config, state.keyring, clock.clone()));
    let sessions = match (&pg, node) {
        (Some(db), Some(node)) => SessionRegistry::in_cluster(
            swarmd_api::app::session_settings(&config),
            clock.clone(),
            cluster::session_peers(db),
            node,
        ),
        _ => SessionRegistry::new(swarmd_api::app::session_settings(&config), clock.clone()),
    };
    let remote = Arc::new(RemotePools::new());
    check_tool_names(&config)?;
    let resolver = Arc::new(resolver(
        &config,
        env,
        &base_url,
        sessions.clone(),
        Arc::clone(&remote),
    )?);
    let engine = Engine::new(EngineParts {
        config: engine_config(&config),
        store,
        outputs,
        tokens,
        resolver,
        clock,
    });
    // Subscribed before recovery so that events recovery publishes reach
    // their sessions; it starts routing once the sessions are restored.
    let router = EventRouter::subscribe(&engine, sessions.clone());
    let mut recovery = engine.recover().await.map_err(BuildError::Recovery)?;
    // After the engine's recovery killed the process groups that outlived
    // the old daemon, before any attempt starts again.
    recover_worktrees(&config, env, &engine).await;
    // Once the worktrees' artifacts name the branches: the attempts the
    // stop interrupted that can resume their CLI session go on.
    engine
        .resume_interrupted(&mut recovery)
        .await
        .map_err(BuildError::Recovery)?;
    // Sessions homed on other nodes are restored as copies (sessions' homes).
    sessions
        .join_cluster()
        .await
        .map_err(|e| BuildError::Cluster(e.to_string()))?;
    sessions.restore(&engine, std::mem::take(&mut recovery.sessions));
    let tasks = TaskTracker::new();
    router.start(shutdown.clone(), &tasks);
    engine.start_recovered();
    let branches = swarmd_git::worktree::branches::Branches::new(&HostEnv::from_pairs(
        env.iter().map(|(k, v)| (k.to_owned(), v.to_owned())),
    ))
    .with_attempts_root(worktrees_root(&config));
    let runner = swarmd_flow_run::Runner::new(
        engine.clone(),
        catalog,
        config.agents.keys().cloned().collect(),
        swarmd_flow::Limits::default(),
        wait_secret,
        Some(Arc::new(swarmd_mcp::changes::StepChanges {
            engine: engine.clone(),
            bases: worktree_bases(&config),
            git: branches.clone(),
        })),
    )
    .with_merge_agents(merge_agents(&config))
    .with_worktree_agents(worktree_bases(&config).into_keys().collect())
    .with_input_schemas(input_schemas(&config));
    tasks.spawn(runner.clone().run(shutdown.clone().cancelled_owned()));
    // The node heartbeats until the engine has drained, not just until
    // draining starts: its peers must not take over what it still finishes.
    let cluster_stop = CancellationToken::new();
    if let Some(db) = &pg {
        let keyring_in_database = matches!(state.keys_source, SecretSource::Database);
        cluster::start(
            &engine,
            &runner,
            db,
            &cluster,
            keyring_in_database,
            &cluster_stop,
            &tasks,
        );
    }
    sessions.start_idle_sweep(engine.clone(), shutdown.clone(), &tasks);
    sessions.start_mail_pump(engine.clone(), shutdown.clone(), &tasks);
    tracing::info!(
        requeued = recovery.requeued,
        decided = recovery.decided,
        interrupted = recovery.interrupted,
        continued = recovery.continued,
        retried = recovery.retried,
        resumed = recovery.resumed,
        handles = recovery.handles,
        "recovered"
    );
    let keep = Duration::from_secs(u64::from(config.retention.days) * 86_400);
    let every = match config.store.backend {
        StoreBackend::Memory => MEMORY_RETENTION_EVERY,
        StoreBackend::Sqlite | StoreBackend::Postgres => RETENTION_EVERY,
    };
    tasks.spawn(engine.retention_loop(keep, every));
    let metrics = Metrics::new()
        .with_store(db.clone())
        .with_postgres(pg.clone())
        .with_pools(Arc::clone(&remote));
    let guards = Guards::new(&config, metrics.guards());
    let app = AppState::new(AppInner {
        engine,
        sessions,
        admin: state.admin_token,
        bound,
        base_url,
        started: Instant::now(),
        shutdown,
        tasks,
        config,
        metrics,
        guards,
        upstream_attempts: Default::default(),
        remote,
        runner,
        cluster: forwarder,
        branches,
    });
    Ok(Daemon {
        app,
        db,
        pg,
        recovery,
        cluster_stop,
    })
}

/// The stores the engine is built over, and the database handle to close
/// at shutdown.
struct Stores {
    tasks: Arc<dyn TaskStore>,
    outputs: Arc<dyn OutputStore>,
    sqlite: Option<SqliteDb>,
    postgres: Option<PgDb>,
}

async fn open_stores(
    config: &Config,
    state: &PreparedState,
    env: &Environment,
) -> Result<Stores, BuildError> {
    let inline_max = usize::try_from(config.limits.inline_max_bytes).unwrap_or(usize::MAX);
    match config.store.backend {
        StoreBackend::Memory => Ok(Stores {
            tasks: Arc::new(MemoryTaskStore::keeping(
                usize::try_from(config.store.memory_keep_finished).unwrap_or(usize::MAX),
            )),
            outputs: Arc::new(MemoryOutputStore::new()),
            sqlite: None,
            postgres: None,
        }),
        StoreBackend::Postgres => {
            let url = config.store.url.clone().unwrap_or_default();
            let err = |source| BuildError::Store {
                path: swarmd_postgres::redact_url(&url.0),
                source,
            };
            let mut opts = PgOptions::new(url.0.clone());
            opts.password = crate::state::database::pg_password(config, env).map_err(err)?;
            opts.pool_size = config.store.pg_pool as usize;
            let db = PgDb::open(opts).await.map_err(err)?;
            let outputs = PgOutputStore::open(db.clone(), inline_max);
            outputs
                .import_blob_files(&state.dir.blobs())
                .await
                .map_err(err)?;
            Ok(Stores {
                tasks: Arc::new(PgTaskStore::new(db.clone())),
                outputs: Arc::new(outputs),
                sqlite: None,
                postgres: Some(db),
            })
        }
        StoreBackend::Sqlite => {
            let path = state.dir.database();
            let err = |source| BuildError::Store {
                path: path.display().to_string(),
                source,
            };
            let mut opts = SqliteOptions::new(&path);
            opts.synchronous = config.store.synchronous.into();
            let db = SqliteDb::open(opts).map_err(err)?;
            let tasks = SqliteTaskStore::open(db.clone()).map_err(err)?;
            let outputs =
                SqliteOutputStore::open(db.clone(), state.dir.blobs(), inline_max).map_err(err)?;
            Ok(Stores {
                tasks: Arc::new(tasks),
                outputs: Arc::new(outputs),
                sqlite: Some(db),
                postgres: None,
            })
        }
    }
}

/// How this daemon starts its process agents: under `swarmd supervise`,
/// executed as `/proc/self/exe` (the running binary, even if the file was
/// replaced since) with this process as the parent to check.
pub fn supervisor() -> swarmd_spawner::process::Supervisor {
    swarmd_spawner::process::Supervisor {
        program: std::path::PathBuf::from("/proc/self/exe"),
        args: vec![
            "supervise".into(),
            "--parent".into(),
            std::process::id().to_string().into(),
            "--".into(),
        ],
    }
}

fn token_authority(config: &Config, keyring: Keyring, clock: Arc<dyn Clock>) -> TokenAuthority {
    let authority = AuthorityConfig {
        max_ttl_secs: config.auth.max_token_ttl_secs,
        ..AuthorityConfig::default()
    };
    TokenAuthority::new(keyring, clock, authority)
}

/// The engine's settings from `[limits]`, `[defaults]`, `[auth]` and `[spawner]`.
pub fn engine_config(config: &Config) -> EngineConfig {
    EngineConfig {
        defaults: Policy::from(&config.defaults),
        max_running: config.limits.max_running as usize,
        max_spawn_depth: config.limits.max_spawn_depth,
        worker_token_ttl_secs: config.auth.worker_token_ttl_secs,
        kill_grace: Duration::from_secs(config.spawner.kill_grace_secs),
        max_output_bytes_per_attempt: config.limits.max_output_bytes_per_attempt,
        unavailable_wait: Duration::from_secs(config.spawner.session_wait_secs),
    }
}

/// Links every agent and middleware of `config` as `serve` would (scripts
/// compiled, programs found, environments checked) without starting
/// anything else: `check-config` uses it so that a configuration it accepts
/// also starts.
///
/// # Errors
/// `Agents` listing every problem; `Lua` if no Lua thread can start.
pub fn link_agents(config: &Config, env: &Environment) -> Result<(), BuildError> {
    check_tool_names(config)?;
    let base_url = config.base_url(config.server.bind);
    let remote = Arc::new(RemotePools::new());
    resolver(config, env, &base_url, Arc::new(NoSessions), remote).map(drop)
}

/// Every agent exposed as an MCP tool is named as model APIs take a
/// function and hides no other tool (`swarmd_mcp::check_tool_name`).
fn check_tool_names(config: &Config) -> Result<(), BuildError> {
    for (name, _) in config.agents.iter().filter(|(_, a)| a.expose_as_tool) {
        swarmd_mcp::check_tool_name(name).map_err(|reason| {
            BuildError::ToolName(ConfigError::Invalid {
                key: format!("agents.{name}.expose_as_tool"),
                reason,
            })
        })?;
    }
    Ok(())
}

fn resolver(
    config: &Config,
    env: &Environment,
    base_url: &str,
    operators: Arc<dyn SessionDirectory>,
    remote: Arc<RemotePools>,
) -> Result<StackResolver, BuildError> {
    let limits = LuaLimits {
        memory_limit_bytes: usize::try_from(config.lua.memory_limit_mb * 1024 * 1024)
            .unwrap_or(usize::MAX),
        instruction_limit: config.lua.instruction_limit,
        timeout: Duration::from_secs(config.lua.timeout_secs),
    };
    let lua = LuaPool::new(LUA_THREADS, limits).map_err(|e| BuildError::Lua(e.to_string()))?;
    let host_env = HostEnv::from_pairs(env.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    let mut settings = SpawnerSettings::new(base_url, host_env);
    settings.supervisor = config.spawner.supervise.then(supervisor);
    settings.remote = remote;
    settings.worktrees = Some(Arc::new(Worktrees::new(
        worktrees_root(config),
        &settings.host_env,
    )));
    settings.senior = SeniorSettings {
        agent: config.senior.agent.clone(),
        timeout: Duration::from_secs(config.senior.timeout_secs),
    };
    settings.middleware = config
        .lua
        .middleware
        .iter()
        .map(|(name, m)| m.spec(name))
        .collect();
    let agents = agent_specs(config);
    StackResolver::from_config(&settings, &agents, &lua, operators).map_err(BuildError::Agents)
}

/// The spawner crate's view of `[agents.*]` and the agents directory.
pub fn agent_specs(config: &Config) -> Vec<AgentSpec> {
    let kill_grace = Duration::from_secs(config.spawner.kill_grace_secs);
    config
        .agents
        .iter()
        .map(|(name, agent)| agent.spec(name, kill_grace))
        .collect()
}

/// Each worktree agent's repository and `base`: where a flow fan-out's
/// coding children are pinned from.
fn worktree_bases(
    config: &Config,
) -> std::collections::BTreeMap<String, (std::path::PathBuf, String)> {
    config
        .agents
        .iter()
        .filter_map(|(name, agent)| {
            let worktree = agent.kind.worktree()?;
            Some((name.clone(), (worktree.repo.clone(), worktree.base.clone())))
        })
        .collect()
}

/// `<state_dir>/worktrees`: where attempts' worktrees are added.
fn worktrees_root(config: &Config) -> std::path::PathBuf {
    config.store.state_dir.join("worktrees")
}

/// Ends the worktrees of attempts that died with the previous process:
/// leftovers committed on their branches, the `worktree` artifact appended
/// to the attempt each belonged to (as its epilogue), directories removed
/// (per `keep`, as failed attempts), `git worktree prune` run on their
/// repositories. Runs after the engine's recovery decided those attempts.
async fn recover_worktrees(config: &Config, env: &Environment, engine: &Engine) {
    let host_env = HostEnv::from_pairs(env.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    for found in Worktrees::new(worktrees_root(config), &host_env)
        .recover()
        .await
    {
        match &found.report {
            Ok(report) => {
                tracing::info!(
                    worktree = %found.name,
                    branch = %report.branch,
                    head = %report.head,
                    files = report.files.len(),
                    committed_leftovers = report.committed_leftovers,
                    "recovered the worktree of an attempt that died with the previous process"
                );
                let recorded = match found.attempt() {
                    Some(attempt) => engine
                        .record_epilogue(attempt, worktree::PRODUCER, vec![report.artifact()])
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    None => Err("its name names no attempt".to_owned()),
                };
                if let Err(error) = recorded {
                    tracing::warn!(
                        worktree = %found.name,
                        %error,
                        "the recovered worktree's artifact was not recorded; the work is on its branch"
                    );
                }
            }
            Err(error) => tracing::warn!(
                worktree = %found.name,
                %error,
                "could not describe the worktree of an attempt that died with the previous process"
            ),
        }
    }
}

/// Loads and lints the flows of `[flows_dir]` as `serve` would, so that a
/// configuration `check-config` accepts also starts.
///
/// # Errors
/// `Flows` listing every problem.
pub fn check_flows(config: &Config) -> Result<(), BuildError> {
    load_flows(config).map(drop)
}

/// The configured agents of kind merge, which a flow's `merge` node must
/// name.
fn merge_agents(config: &Config) -> std::collections::BTreeSet<String> {
    config
        .agents
        .iter()
        .filter(|(_, agent)| matches!(agent.kind, swarmd_config::AgentKind::Merge(_)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The configured agents' `input_schema`s, compiled as the engine compiles
/// them, against which lint checks a step's literal `in`. A schema that
/// does not compile is the agent's configuration error, reported when the
/// agents are built, and is left out here.
fn input_schemas(
    config: &Config,
) -> std::collections::BTreeMap<String, swarmd_flow::lint::InputSchema> {
    config
        .agents
        .iter()
        .filter_map(|(name, agent)| {
            let schema = swarmd_flow::lint::InputSchema::compile(agent.input_schema.as_ref()?);
            Some((name.clone(), schema.ok()?))
        })
        .collect()
}

/// The flows of `[flows_dir]`, each linted against the configured agents
/// and the other flows (a `call` counts the steps of the flow it names, and
/// a cycle of calls through them is a problem): a file that cannot be read
/// or a flow that could never run stops the start, every problem named with its file and
/// pointer (the flows that were read are linted even when another file
/// was not).
fn load_flows(config: &Config) -> Result<swarmd_flow_run::Catalog, BuildError> {
    let Some(dir) = &config.flows_dir else {
        return Ok(swarmd_flow_run::Catalog::default());
    };
    let (catalog, mut problems) = dir.read();
    let known = swarmd_flow::lint::Known {
        agents: config.agents.keys().cloned().collect(),
        merge_agents: Some(merge_agents(config)),
        worktree_agents: Some(worktree_bases(config).into_keys().collect()),
        input_schemas: input_schemas(config),
        // A call of a flow whose file did not read is that file's problem,
        // reported once, under its file.
        flows: catalog.names().chain(catalog.unread()).cloned().collect(),
        caps: swarmd_flow::Limits::default(),
    };
    problems.extend(catalog.entries().flat_map(|entry| {
        swarmd_flow::lint::lint_calling(&entry.flow, &known, &catalog)
            .into_iter()
            .map(move |p| format!("{} {}: {} ({})", entry.source, p.pointer, p.message, p.hint))
    }));
    if problems.is_empty() {
        Ok(catalog)
    } else {
        Err(BuildError::Flows(problems))
    }
}

#[cfg(test)]
#[path = "daemon_tests.rs"]
mod tests;
