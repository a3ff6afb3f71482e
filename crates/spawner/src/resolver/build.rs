//! Building a `StackResolver` from configuration: one base spawner per agent
//! (programs resolved, scripts read and compiled), the standard layer
//! registry, and an eager link of every agent, with every problem reported.

use std::collections::HashMap;
use std::sync::Arc;

use swarmd_engine::SpawnerAdapter;
use swarmd_engine::task::SpawnerKind;

use super::{
    AgentEntry, AgentKind, AgentSpec, ConfigError, ConfigErrors, InputSchema, OperatorRoute,
    SpawnerSettings, StackResolver,
};
use crate::layers::{
    AuditLayer, LongHoldLayer, LuaMiddlewareLayer, MAIN_AI, MainAiLayer, OPERATOR_DELEGATE,
    OperatorDelegateLayer, SENIOR_ESCALATION, SeniorEscalationLayer,
};
use crate::lua::{LuaPool, LuaScript};
use crate::operator::SessionDirectory;
use crate::process::ProcessRunner;
use crate::spawners::{
    LuaAgentSpawner, OperatorSpawner, OperatorTarget, ProcessSpawner, RemoteSpawner,
};
use crate::stack::{BASE_KEYS, LayerRegistry};
use swarmd_git::merge::MergeSpawner;
use swarmd_git::worktree::{WorktreeSpec, Worktrees};

impl StackResolver {
    /// Builds the resolver the daemon runs with and links every agent once.
    ///
    /// # Errors
    /// Every misconfigured agent (missing program, unreadable script, Lua
    /// syntax error, unknown layer key, …), broken middleware script and
    /// unknown `senior.agent`, each naming what it is about.
    pub fn from_config(
        settings: &SpawnerSettings,
        agents: &[AgentSpec],
        lua: &LuaPool,
        sessions: Arc<dyn SessionDirectory>,
    ) -> Result<StackResolver, ConfigErrors> {
        let mut errors = Vec::new();
        let mut entries = HashMap::new();
        for spec in agents {
            if entries.contains_key(&spec.name) {
                errors.push(ConfigError::Duplicate {
                    agent: spec.name.clone(),
                });
                continue;
            }
            match base_spawner(spec, settings, lua, &sessions) {
                Ok(entry) => {
                    entries.insert(spec.name.clone(), entry);
                }
                Err(e) => errors.push(e),
            }
        }
        let senior = settings.senior.agent.as_ref();
        if let Some(senior) = senior.filter(|s| !agents.iter().any(|a| &a.name == *s)) {
            errors.push(ConfigError::UnknownSeniorAgent(senior.clone()));
        }
        // A broken middleware is reported; agents are still linked without it.
        let (layers, more) = layers_and_errors(settings, agents, lua, &sessions);
        errors.extend(more);
        let resolver = StackResolver::new(entries, layers).with_operators(sessions);
        if let Err(ConfigErrors(more)) = resolver.validate_all() {
            errors.extend(more);
        }
        if errors.is_empty() {
            Ok(resolver)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

/// The layer registry of the daemon: base layers `audit` and `long_hold`;
/// hint layers `main_ai`, `senior_escalation`, `operator_delegate`, and
/// `lua:NAME` for each configured middleware script.
pub fn standard_layers(
    settings: &SpawnerSettings,
    agents: &[AgentSpec],
    lua: &LuaPool,
    sessions: &Arc<dyn SessionDirectory>,
) -> Result<LayerRegistry, ConfigErrors> {
    let (registry, errors) = layers_and_errors(settings, agents, lua, sessions);
    if errors.is_empty() {
        Ok(registry)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn layers_and_errors(
    settings: &SpawnerSettings,
    agents: &[AgentSpec],
    lua: &LuaPool,
    sessions: &Arc<dyn SessionDirectory>,
) -> (LayerRegistry, Vec<ConfigError>) {
    let [audit, long_hold] = BASE_KEYS;
    let targets: HashMap<String, OperatorTarget> = agents
        .iter()
        .filter_map(|agent| match &agent.kind {
            AgentKind::Operator(spec) => Some((agent.name.clone(), target(spec))),
            _ => None,
        })
        .collect();
    let mut registry = LayerRegistry::new()
        .with_base(audit, Arc::new(AuditLayer))
        .with_base(long_hold, Arc::new(LongHoldLayer))
        .with_hint(
            MAIN_AI,
            Arc::new(MainAiLayer {
                hook_timeout: settings.hook_timeout,
                sessions: Arc::clone(sessions),
            }),
        )
        .with_hint(
            SENIOR_ESCALATION,
            Arc::new(SeniorEscalationLayer {
                settings: settings.senior.clone(),
                sessions: Arc::clone(sessions),
            }),
        )
        .with_hint(
            OPERATOR_DELEGATE,
            Arc::new(OperatorDelegateLayer::new(
                &settings.base_url,
                targets,
                Arc::clone(sessions),
            )),
        );
    let mut errors = Vec::new();
    for middleware in &settings.middleware {
        let layer = LuaScript::from_file(&middleware.name, &middleware.script)
            .and_then(|script| LuaMiddlewareLayer::new(script, lua.clone()));
        match layer {
            Ok(layer) => {
                let key = layer.key().to_owned();
                registry = registry.with_hint(&key, Arc::new(layer));
            }
            Err(source) => errors.push(ConfigError::Middleware {
                name: middleware.name.clone(),
                source,
            }),
        }
    }
    (registry, errors)
}

/// Stage 1 for one agent: its base spawner, checked now.
fn base_spawner(
    spec: &AgentSpec,
    settings: &SpawnerSettings,
    lua: &LuaPool,
    sessions: &Arc<dyn SessionDirectory>,
) -> Result<AgentEntry, ConfigError> {
    let agent = spec.name.clone();
    if spec.concurrency == Some(0) {
        return Err(ConfigError::Invalid {
            agent,
            reason: "concurrency must be at least 1",
        });
    }
    if spec.worktree.is_some()
        && matches!(
            spec.kind,
            AgentKind::Lua(_) | AgentKind::Remote(_) | AgentKind::Merge(_)
        )
    {
        return Err(ConfigError::Invalid {
            agent,
            reason: "worktree is supported for process and operator agents only",
        });
    }
    let route = match &spec.kind {
        AgentKind::Operator(operator) => Some(match &operator.operator_role {
            Some(role) => OperatorRoute::Role(role.clone()),
            None => OperatorRoute::AnyMainAi,
        }),
        _ => None,
    };
    let (kind, spawner): (SpawnerKind, Arc<dyn SpawnerAdapter>) = match &spec.kind {
        AgentKind::Process(process) => {
            let runner = ProcessRunner::new(process.clone(), &settings.host_env)
                .map_err(|source| ConfigError::Process { agent, source })?
                .supervised_by(settings.supervisor.clone());
            let mut spawner = ProcessSpawner::new(runner, &settings.base_url);
            if let Some(worktree) = &spec.worktree {
                spawner =
                    spawner.with_worktree(worktrees(spec, worktree, settings)?, worktree.clone());
            }
            (SpawnerKind::Process, Arc::new(spawner))
        }
        AgentKind::Remote(run) => (
            // A remote attempt open at a restart is interrupted and
            // retried, as a process agent's is.
            SpawnerKind::Process,
            Arc::new(RemoteSpawner::new(Arc::clone(&settings.remote), *run)),
        ),
        AgentKind::Merge(merge) => {
            swarmd_git::merge::check(merge, &settings.host_env).map_err(|reason| {
                ConfigError::Worktree {
                    agent: spec.name.clone(),
                    reason,
                }
            })?;
            (
                // Runs in the daemon's process; an attempt open at a
                // restart is retried, as a process agent's is.
                SpawnerKind::InProcess,
                Arc::new(MergeSpawner::new(merge.clone(), &settings.host_env)),
            )
        }
        AgentKind::Lua(script) => {
            let script = LuaScript::from_file(&spec.name, &script.script)
                .map_err(|source| ConfigError::Lua { agent, source })?;
            (
                SpawnerKind::Lua,
                Arc::new(LuaAgentSpawner::new(script, lua.clone())),
            )
        }
        AgentKind::Operator(operator) => {
            if operator
                .operator_role
                .as_ref()
                .is_some_and(|role| role.trim().is_empty())
            {
                return Err(ConfigError::Invalid {
                    agent,
                    reason: "operator_role is empty",
                });
            }
            if operator
                .worker_binding
                .as_ref()
                .is_some_and(|b| !b.is_object())
            {
                return Err(ConfigError::Invalid {
                    agent,
                    reason: "worker_binding must be a table",
                });
            }
            let mut spawner = OperatorSpawner::new(
                operator.operator_role.as_deref(),
                target(operator),
                &settings.base_url,
                Arc::clone(sessions),
            );
            if let Some(worktree) = &spec.worktree {
                spawner =
                    spawner.with_worktree(worktrees(spec, worktree, settings)?, worktree.clone());
            }
            (SpawnerKind::Operator, Arc::new(spawner))
        }
    };
    let input_schema = match &spec.input_schema {
        Some(schema) => Some(Arc::new(InputSchema::compile(schema).map_err(
            |reason| ConfigError::InputSchema {
                agent: spec.name.clone(),
                reason,
            },
        )?)),
        None => None,
    };
    Ok(AgentEntry {
        kind,
        spawner,
        layers: spec.layers.clone(),
        concurrency: spec.concurrency,
        allow_subtasks: spec.allow_subtasks,
        credential_leaves: matches!(spec.kind, AgentKind::Remote(_)),
        input_schema,
        route,
    })
}

/// The daemon's worktrees for an agent whose `worktree` checks out: an
/// absolute path to a git repository, and a base naming a commit in it.
fn worktrees(
    spec: &AgentSpec,
    worktree: &WorktreeSpec,
    settings: &SpawnerSettings,
) -> Result<Arc<Worktrees>, ConfigError> {
    let refuse = |reason: String| ConfigError::Worktree {
        agent: spec.name.clone(),
        reason,
    };
    swarmd_git::worktree::check(worktree, &settings.host_env).map_err(refuse)?;
    settings
        .worktrees
        .clone()
        .ok_or_else(|| refuse("worktrees are not available in this daemon".to_owned()))
}

fn target(spec: &super::OperatorSpec) -> OperatorTarget {
    OperatorTarget {
        worker_binding: spec.worker_binding.clone(),
        system_prompt: spec.system_prompt.clone(),
    }
}
