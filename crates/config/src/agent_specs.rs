//! What the configured agents and policy are to the crates that run them:
//! each `[agents.*]` kind, `[lua.middleware.*]` and `[defaults]` converted
//! into the spawner's and the engine's twins, beside the types they read.
//!
//! A conversion that needs a setting from another section (a process
//! agent's kill grace is `[spawner]`'s) is a method taking it; the rest
//! are `From` impls.

use std::time::Duration;

use swarmd_engine::task::Policy;
use swarmd_git::merge::{DEFAULT_BASE, MergeSpec};
use swarmd_git::worktree::WorktreeSpec;
use swarmd_spawner::process::{EnvVar, ProcessSpec};
use swarmd_spawner::remote::RemoteRun;
use swarmd_spawner::{self as spawner, AgentSpec, LuaAgentSpec, LuaMiddlewareSpec, OperatorSpec};

use crate::agent::{
    Agent, AgentKind, EnvSpec, LuaAgent, MergeAgent, OperatorAgent, ProcessAgent, RemoteAgent,
};
use crate::sections::{DefaultsConfig, LuaMiddleware};

impl Agent {
    /// The spawner's view of this agent, named `name`; a process agent's
    /// children get `kill_grace` between SIGTERM and SIGKILL.
    pub fn spec(&self, name: &str, kill_grace: Duration) -> AgentSpec {
        AgentSpec {
            name: name.to_owned(),
            kind: self.kind.spec(kill_grace),
            layers: self.layers.clone(),
            concurrency: self.concurrency.map(|c| c as usize),
            allow_subtasks: self.allow_subtasks,
            input_schema: self.input_schema.clone(),
            worktree: self.kind.worktree().map(WorktreeSpec::from),
        }
    }
}

impl AgentKind {
    /// The base spawner this kind resolves to.
    pub fn spec(&self, kill_grace: Duration) -> spawner::AgentKind {
        match self {
            AgentKind::Process(p) => spawner::AgentKind::Process(p.spec(kill_grace)),
            AgentKind::Lua(l) => spawner::AgentKind::Lua(l.into()),
            AgentKind::Remote(r) => spawner::AgentKind::Remote(r.into()),
            AgentKind::Merge(m) => spawner::AgentKind::Merge(m.into()),
            AgentKind::Operator(o) => spawner::AgentKind::Operator(o.into()),
        }
    }
}

impl ProcessAgent {
    /// How the spawner runs this agent's children.
    pub fn spec(&self, kill_grace: Duration) -> ProcessSpec {
        ProcessSpec {
            program: self.program.clone(),
            args: self.args.clone(),
            resume_args: self.resume_args.clone(),
            env: (&self.env).into(),
            cwd: self.cwd.clone(),
            stdin: self.stdin.into(),
            stream: self.stream.into(),
            timeout: self.timeout_secs.map(Duration::from_secs),
            max_output_bytes: self.max_output_bytes,
            kill_grace,
        }
    }
}

/// The child's allow-list: names passed through when the host sets them,
/// or explicit values.
impl From<&EnvSpec> for Vec<EnvVar> {
    fn from(env: &EnvSpec) -> Self {
        match env {
            EnvSpec::Inherit(names) => names.iter().cloned().map(EnvVar::Pass).collect(),
            EnvSpec::Set(vars) => vars
                .iter()
                .map(|(k, v)| EnvVar::Set(k.to_owned(), v.to_owned()))
                .collect(),
        }
    }
}

impl From<&LuaAgent> for LuaAgentSpec {
    fn from(l: &LuaAgent) -> Self {
        LuaAgentSpec {
            script: l.script.clone(),
        }
    }
}

/// What a pool is told about how to run a remote agent's attempts.
impl From<&RemoteAgent> for RemoteRun {
    fn from(r: &RemoteAgent) -> Self {
        RemoteRun {
            stdin: r.stdin.into(),
            stream: r.stream.into(),
            timeout: r.timeout_secs.map(Duration::from_secs),
            max_output_bytes: r.max_output_bytes,
        }
    }
}

/// An unset `base` merges from `HEAD`.
impl From<&MergeAgent> for MergeSpec {
    fn from(m: &MergeAgent) -> Self {
        MergeSpec {
            repo: m.repo.clone(),
            base: m.base.clone().unwrap_or_else(|| DEFAULT_BASE.to_owned()),
            fast_forward: m.fast_forward.clone(),
            max_branches: usize::try_from(m.max_branches).unwrap_or(usize::MAX),
        }
    }
}

/// The binding goes to the MainAI as the JSON table it was written as.
impl From<&OperatorAgent> for OperatorSpec {
    fn from(o: &OperatorAgent) -> Self {
        OperatorSpec {
            operator_role: o.operator_role.clone(),
            worker_binding: o.worker_binding.as_ref().map(|b| {
                let mut table = serde_json::Map::new();
                table.insert("subagent_type".to_owned(), b.subagent_type.clone().into());
                if !b.tools.is_empty() {
                    table.insert("tools".to_owned(), b.tools.clone().into());
                }
                serde_json::Value::Object(table)
            }),
            system_prompt: o.system_prompt.clone(),
        }
    }
}

impl LuaMiddleware {
    /// The spawner's view of this middleware, the hint layer `lua:NAME`.
    pub fn spec(&self, name: &str) -> LuaMiddlewareSpec {
        LuaMiddlewareSpec {
            name: name.to_owned(),
            script: self.script.clone(),
        }
    }
}

/// The policy a task gets where it sets none of its own.
impl From<&DefaultsConfig> for Policy {
    fn from(d: &DefaultsConfig) -> Self {
        Policy {
            max_attempts: d.max_attempts,
            retry_on: d.retry_on.clone(),
            attempt_timeout_secs: d.attempt_timeout_secs,
            long_hold_warn_secs: d.long_hold_warn_secs,
            max_tokens: d.max_tokens,
            max_cost_usd: d.max_cost_usd,
            ..Policy::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::WorkerBinding;

    #[test]
    fn an_inherited_env_passes_names_and_a_set_one_sets_values() {
        let inherit = EnvSpec::Inherit(vec!["PATH".into(), "HOME".into()]);
        assert_eq!(
            Vec::<EnvVar>::from(&inherit),
            vec![EnvVar::Pass("PATH".into()), EnvVar::Pass("HOME".into())]
        );
        let set = EnvSpec::Set([("LANG".to_owned(), "C".to_owned())].into_iter().collect());
        assert_eq!(
            Vec::<EnvVar>::from(&set),
            vec![EnvVar::Set("LANG".into(), "C".into())]
        );
    }

    #[test]
    fn a_binding_is_the_table_it_was_written_as() {
        let mut operator = OperatorAgent {
            operator_role: Some("main-ai".into()),
            worker_binding: Some(WorkerBinding {
                subagent_type: "coder".into(),
                tools: vec![],
            }),
            system_prompt: None,
            system_prompt_file: None,
            model: None,
            worktree: None,
        };
        let spec = OperatorSpec::from(&operator);
        assert_eq!(
            spec.worker_binding,
            Some(serde_json::json!({"subagent_type": "coder"}))
        );
        assert_eq!(
            spec.worker_binding,
            serde_json::to_value(operator.worker_binding.as_ref()).ok()
        );
        operator.worker_binding = Some(WorkerBinding {
            subagent_type: "coder".into(),
            tools: vec!["Read".into(), "Edit".into()],
        });
        assert_eq!(
            OperatorSpec::from(&operator).worker_binding,
            serde_json::to_value(operator.worker_binding.as_ref()).ok()
        );
    }

    #[test]
    fn a_merge_agent_without_base_merges_from_head() {
        let merge = MergeAgent {
            repo: "/srv/repo".into(),
            base: None,
            fast_forward: None,
            max_branches: 4,
        };
        let spec = MergeSpec::from(&merge);
        assert_eq!(spec.base, DEFAULT_BASE);
        assert_eq!(spec.max_branches, 4);
    }
}
