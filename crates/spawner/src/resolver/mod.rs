//! Stages 1 and 2 of the pipeline (docs/tasks.md, The pipeline): `StackResolver` resolves an
//! agent name to its base spawner from the agent registry, then links it into
//! a SpawnerStack, caching linked stacks per (agent, task layer set). The
//! engine runs stage 3 (`dispatch_attempt`).

mod build;
mod error;
mod input;
mod spec;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use swarmd_engine::task::{ProcessGroupMark, SpawnerKind};
use swarmd_engine::{AgentProfile, Placement, Route, SpawnError, SpawnerAdapter, SpawnerResolver};

pub use build::standard_layers;
pub use error::{ConfigError, ConfigErrors};
pub use input::InputSchema;
pub use spec::{
    AgentKind, AgentSpec, LuaAgentSpec, LuaMiddlewareSpec, OperatorSpec, SpawnerSettings,
};

use crate::layers::OPERATOR_DELEGATE;
pub use crate::operator::OperatorRoute;
use crate::operator::{NoSessions, SessionDirectory};
use crate::process::GroupIdentity;
use crate::spawners::UnconfiguredAgent;
use crate::stack::LayerRegistry;

/// Linked stacks kept at most; past it, stacks are linked per attempt.
const MAX_CACHED_STACKS: usize = 4096;

/// One agent of the registry: its base spawner and what admission needs.
#[derive(Debug, Clone)]
pub struct AgentEntry {
    pub kind: SpawnerKind,
    pub spawner: Arc<dyn SpawnerAdapter>,
    /// Hint layers applied to every task of the agent.
    pub layers: Vec<String>,
    pub concurrency: Option<usize>,
    pub allow_subtasks: bool,
    /// Its attempts' credentials leave the daemon (a remote agent's pool):
    /// see `AgentProfile::credential_leaves`.
    pub credential_leaves: bool,
    /// Checked against every new task's `input`.
    pub input_schema: Option<Arc<InputSchema>>,
    /// For an operator agent, the session its attempts go to; an attempt
    /// waits while there is none.
    pub route: Option<OperatorRoute>,
}

type StackCache = HashMap<String, HashMap<Vec<String>, Arc<dyn SpawnerAdapter>>>;

/// The engine's `SpawnerResolver`.
#[derive(Debug)]
pub struct StackResolver {
    agents: HashMap<String, AgentEntry>,
    layers: LayerRegistry,
    /// Live sessions, for where an attempt runs.
    sessions: Arc<dyn SessionDirectory>,
    /// std `Mutex`: held for a map lookup or insert, never across an await.
    cache: Mutex<StackCache>,
}

impl StackResolver {
    /// A resolver over an agent registry and a layer registry, with no
    /// sessions to delegate to; nothing is checked until
    /// [`Self::validate_all`] or the first link.
    pub fn new(agents: HashMap<String, AgentEntry>, layers: LayerRegistry) -> StackResolver {
        StackResolver {
            agents,
            layers,
            sessions: Arc::new(NoSessions),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The live sessions attempts may be delegated to (the same directory
    /// the layers were built with).
    pub fn with_operators(mut self, sessions: Arc<dyn SessionDirectory>) -> StackResolver {
        self.sessions = sessions;
        self
    }

    /// Links every agent with its own layers, so that a misconfigured agent
    /// is reported at startup rather than at its first task.
    pub fn validate_all(&self) -> Result<(), ConfigErrors> {
        let mut names: Vec<&String> = self.agents.keys().collect();
        names.sort();
        let errors: Vec<ConfigError> = names
            .into_iter()
            .filter_map(|agent| self.link(agent, &[]).err().map(ConfigError::from))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// Configured agent names, sorted.
    pub fn agent_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.agents.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Stage 1: the agent's base spawner and own layers. An agent that is not
    /// configured resolves only when the task asks for `operator_delegate`.
    fn resolve(
        &self,
        agent: &str,
        task_layers: &[String],
    ) -> Result<(Arc<dyn SpawnerAdapter>, &[String]), SpawnError> {
        match self.agents.get(agent) {
            Some(entry) => Ok((Arc::clone(&entry.spawner), &entry.layers)),
            None if delegates(task_layers) => Ok((Arc::new(UnconfiguredAgent), &[])),
            None => Err(SpawnError::UnknownAgent(agent.to_owned())),
        }
    }
}

fn delegates(layers: &[String]) -> bool {
    layers.iter().any(|key| key == OPERATOR_DELEGATE)
}

impl StackResolver {
    /// The profile of an agent already resolved (an agent that is not
    /// configured is one a task delegates).
    fn profile_of(&self, agent: &str) -> AgentProfile {
        match self.agents.get(agent) {
            Some(entry) => AgentProfile {
                kind: entry.kind,
                concurrency: entry.concurrency,
                allow_subtasks: entry.allow_subtasks,
                credential_leaves: entry.credential_leaves,
            },
            None => AgentProfile {
                kind: SpawnerKind::Operator,
                concurrency: None,
                allow_subtasks: false,
                credential_leaves: false,
            },
        }
    }

    /// Whether the agent's stack names `operator_delegate`: the task's
    /// layers or the agent's own.
    fn stack_delegates(&self, task: Route<'_>) -> bool {
        delegates(task.layers)
            || self
                .agents
                .get(task.agent)
                .is_some_and(|entry| delegates(&entry.layers))
    }

    /// Whether the session that owns the task is live with an operator
    /// channel; one look in the session directory.
    fn owner_takes_spawns(&self, task: Route<'_>) -> bool {
        task.session
            .and_then(|sid| self.sessions.session(&sid))
            .is_some_and(|s| s.spawn_channel.is_some())
    }

    /// Why no session can take an operator agent's attempt now (no holder
    /// of its role, or no MainAI session at all), for an attempt that is
    /// not delegated.
    fn no_operator(&self, task: Route<'_>) -> Option<String> {
        let route = self.agents.get(task.agent)?.route.as_ref()?;
        let found = route.find(&*self.sessions, task.operator_sid);
        found.err().map(|refusal| refusal.to_string())
    }
}

impl SpawnerResolver for StackResolver {
    fn profile(&self, agent: &str, layers: &[String]) -> Result<AgentProfile, SpawnError> {
        let (_, own_layers) = self.resolve(agent, layers)?;
        self.layers.hint_keys(agent, own_layers, layers)?;
        Ok(self.profile_of(agent))
    }

    /// An operator agent's attempt waits while no session can take it: no
    /// holder of its role, or no MainAI session at all.
    fn unavailable(&self, task: Route<'_>) -> Option<String> {
        self.agents.get(task.agent)?.route.as_ref()?;
        if self.delegated(task) {
            return None;
        }
        self.no_operator(task)
    }

    /// One placement: the stack from the cache (a cached stack was
    /// resolved and its layers checked when it was linked, so the profile
    /// needs neither again), and the session directory asked at most once
    /// for the owner (a delegating stack) and once for an operator (an
    /// operator agent's attempt that is not delegated), so whether the
    /// attempt is delegated and whether it waits come from the same look
    /// at the owner.
    fn place(&self, task: Route<'_>) -> Placement {
        let stack = self.link(task.agent, task.layers);
        let profile = match &stack {
            Ok(_) => Ok(self.profile_of(task.agent)),
            Err(_) => self.profile(task.agent, task.layers),
        };
        let delegated = self.stack_delegates(task) && self.owner_takes_spawns(task);
        Placement {
            stack,
            profile,
            delegated,
            unavailable: if delegated {
                None
            } else {
                self.no_operator(task)
            },
        }
    }

    fn check_new(
        &self,
        agent: &str,
        layers: &[String],
        input: Option<&serde_json::Value>,
    ) -> Result<AgentProfile, SpawnError> {
        let profile = self.profile(agent, layers)?;
        if let Some(schema) = self.agents.get(agent).and_then(|e| e.input_schema.as_ref()) {
            schema.check(agent, input)?;
        }
        Ok(profile)
    }

    fn reap_leftover(&self, group: &ProcessGroupMark) {
        let identity = GroupIdentity {
            pgid: group.pgid,
            leader_start_ticks: group.leader_start_ticks,
            boot_id: group.boot_id.clone(),
        };
        if identity.kill_if_alive() {
            tracing::warn!(
                pgid = group.pgid,
                "killed a process group that outlived the previous daemon"
            );
        }
    }

    /// When the agent's stack names `operator_delegate` (its own layers
    /// count as well as the task's) and the owning session is live with an
    /// operator channel.
    fn delegated(&self, task: Route<'_>) -> bool {
        self.stack_delegates(task) && self.owner_takes_spawns(task)
    }

    fn link(&self, agent: &str, layers: &[String]) -> Result<Arc<dyn SpawnerAdapter>, SpawnError> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stack) = cache.get(agent).and_then(|stacks| stacks.get(layers)) {
            return Ok(Arc::clone(stack));
        }
        drop(cache);
        // Stage 1: resolve.
        let (base, own_layers) = self.resolve(agent, layers)?;
        // Stage 2: link, in the order SpawnerStack::assemble writes down.
        let hints = self.layers.hint_keys(agent, own_layers, layers)?;
        let stack = self.layers.stack(agent, &hints)?.link(base);

        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let cached: usize = cache.values().map(HashMap::len).sum();
        if cached < MAX_CACHED_STACKS {
            cache
                .entry(agent.to_owned())
                .or_default()
                .insert(layers.to_vec(), Arc::clone(&stack));
        }
        Ok(stack)
    }
}
