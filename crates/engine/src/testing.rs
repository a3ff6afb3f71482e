//! Test support: an in-process spawner whose workers follow a script, a
//! resolver over a fixed set of agents, a memory-backed engine builder,
//! and stores behind gates (`GatedStore`, a memory task store;
//! `GatedOutputs`, any output store, memory by default).
//! Compiled for tests and under the `test-util` feature only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_output_store::{MemoryOutputStore, OutputEvent, OutputStore};
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthorityConfig, Keyring, TokenAuthority};
use crate::clock::{Clock, SystemClock};
use crate::config::{EngineConfig, EngineParts};
use crate::engine::Engine;
use crate::ids::{TaskId, WorkerId};
use crate::spawn::AttemptHost;
use crate::spawn::{
    AgentProfile, Attempt, Ctx, SpawnError, SpawnerAdapter, SpawnerResolver, Worker,
    WorkerCredential, WorkerError,
};
use crate::store::{MemoryTaskStore, TaskStore};
use crate::task::SpawnerKind;

mod gated_outputs;
mod gated_store;
pub use gated_outputs::GatedOutputs;
pub use gated_store::GatedStore;

/// What a scripted worker does.
#[derive(Debug, Clone)]
pub enum Script {
    /// Appends a Final with this value, then completes.
    Final { value: Value, ok: bool },
    /// Waits, then appends a Final.
    Delayed {
        after: Duration,
        value: Value,
        ok: bool,
    },
    /// Completes without a Final.
    NoFinal,
    /// The worker fails.
    Error(String),
    /// The spawn itself fails.
    SpawnError(String),
    /// Completes when a Final is posted over the worker API (like a SubAgent).
    AwaitPost,
    /// Never completes by itself.
    Hang,
}

type ScriptFn = dyn Fn(&Ctx) -> Script + Send + Sync;

/// A spawner whose workers follow `script(ctx)`; records every spawn.
pub struct ScriptedSpawner {
    script: Box<ScriptFn>,
    spawned: Mutex<Vec<(TaskId, u32, WorkerCredential)>>,
}

impl std::fmt::Debug for ScriptedSpawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedSpawner").finish_non_exhaustive()
    }
}

impl ScriptedSpawner {
    pub fn new(script: impl Fn(&Ctx) -> Script + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(ScriptedSpawner {
            script: Box::new(script),
            spawned: Mutex::new(Vec::new()),
        })
    }

    /// Every spawn so far: task, attempt and the credential handed out.
    pub fn spawned(&self) -> Vec<(TaskId, u32, WorkerCredential)> {
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The credential of the latest attempt of `task`.
    pub fn credential(&self, task: TaskId) -> Option<WorkerCredential> {
        self.spawned()
            .into_iter()
            .rev()
            .find(|(t, _, _)| *t == task)
            .map(|(_, _, c)| c)
    }
}

#[async_trait]
impl SpawnerAdapter for ScriptedSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let script = (self.script)(&attempt.ctx);
        if let Script::SpawnError(reason) = script {
            return Err(SpawnError::Failed(reason));
        }
        let id = attempt.ctx.id;
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id.task, id.n, attempt.credential));
        Ok(Box::new(ScriptedWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            host: attempt.host,
            script,
        }))
    }
}

#[derive(Debug)]
struct ScriptedWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    script: Script,
}

impl ScriptedWorker {
    async fn append_final(&self, value: Value, ok: bool) -> Result<(), WorkerError> {
        self.host
            .record_output("test", vec![OutputEvent::inline_final(value, ok)])
            .await
            .map(|_| ())
            .map_err(|e| WorkerError::Failed(e.to_string()))
    }
}

#[async_trait]
impl Worker for ScriptedWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        match self.script.clone() {
            Script::Final { value, ok } => self.append_final(value, ok).await,
            Script::Delayed { after, value, ok } => {
                tokio::select! {
                    _ = tokio::time::sleep(after) => self.append_final(value, ok).await,
                    _ = self.cancel.cancelled() => Err(WorkerError::Cancelled),
                }
            }
            Script::NoFinal => Ok(()),
            Script::Error(reason) => Err(WorkerError::Failed(reason)),
            Script::SpawnError(reason) => Err(WorkerError::Failed(reason)),
            Script::AwaitPost => {
                tokio::select! {
                    _ = self.host.posted_final() => Ok(()),
                    _ = self.cancel.cancelled() => Err(WorkerError::Cancelled),
                }
            }
            Script::Hang => {
                self.cancel.cancelled().await;
                Err(WorkerError::Cancelled)
            }
        }
    }
}

/// A resolver over a fixed map of agent names.
#[derive(Debug, Default)]
pub struct StaticResolver {
    agents: HashMap<String, (AgentProfile, Arc<dyn SpawnerAdapter>)>,
}

impl StaticResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an agent with an explicit profile.
    pub fn with_profile(
        mut self,
        name: &str,
        profile: AgentProfile,
        spawner: Arc<dyn SpawnerAdapter>,
    ) -> Self {
        self.agents.insert(name.to_owned(), (profile, spawner));
        self
    }

    /// Adds an agent of `kind` with an optional concurrency limit; its
    /// workers may not spawn sub-tasks (the configuration default).
    pub fn with(
        mut self,
        name: &str,
        kind: SpawnerKind,
        concurrency: Option<usize>,
        spawner: Arc<dyn SpawnerAdapter>,
    ) -> Self {
        let profile = AgentProfile {
            kind,
            concurrency,
            allow_subtasks: false,
            credential_leaves: false,
        };
        self.agents.insert(name.to_owned(), (profile, spawner));
        self
    }
}

impl SpawnerResolver for StaticResolver {
    fn profile(&self, agent: &str, _layers: &[String]) -> Result<AgentProfile, SpawnError> {
        self.agents
            .get(agent)
            .map(|(p, _)| p.clone())
            .ok_or_else(|| SpawnError::UnknownAgent(agent.to_owned()))
    }

    fn link(&self, agent: &str, _layers: &[String]) -> Result<Arc<dyn SpawnerAdapter>, SpawnError> {
        self.agents
            .get(agent)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| SpawnError::UnknownAgent(agent.to_owned()))
    }
}

/// Builds an engine over the given stores, resolver and clock.
pub fn engine_with(
    resolver: Arc<dyn SpawnerResolver>,
    store: Arc<dyn TaskStore>,
    outputs: Arc<dyn OutputStore>,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
) -> Engine {
    let tokens = TokenAuthority::new(
        Keyring::generate(),
        clock.clone(),
        AuthorityConfig::default(),
    );
    Engine::new(EngineParts {
        config,
        store,
        outputs,
        tokens: Arc::new(tokens),
        resolver,
        clock,
    })
}

/// An engine over memory stores with the system clock.
pub fn memory_engine(resolver: Arc<dyn SpawnerResolver>, config: EngineConfig) -> Engine {
    engine_over(resolver, Arc::new(MemoryTaskStore::new()), config)
}

/// An engine over `store` (a [`GatedStore`], say), a memory output store
/// and the system clock.
pub fn engine_over(
    resolver: Arc<dyn SpawnerResolver>,
    store: Arc<dyn TaskStore>,
    config: EngineConfig,
) -> Engine {
    engine_with(
        resolver,
        store,
        Arc::new(MemoryOutputStore::new()),
        config,
        Arc::new(SystemClock),
    )
}

/// An engine over memory stores whose one agent, `agent`, runs `stack` in
/// process.
pub fn engine_running(agent: &str, stack: Arc<dyn SpawnerAdapter>) -> Engine {
    let resolver = StaticResolver::new().with(agent, SpawnerKind::InProcess, None, stack);
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

/// The engine's own `AttemptHost` for `id`, for calling a stack directly,
/// outside dispatch (benchmarks of the layers' own work).
pub fn engine_host(engine: &Engine, id: crate::ids::AttemptId) -> Arc<dyn AttemptHost> {
    Arc::new(crate::host::EngineHost {
        engine: engine.clone(),
        id,
    })
}
