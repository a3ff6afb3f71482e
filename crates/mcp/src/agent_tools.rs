//! Agents as tools (docs/mcp.md): every agent with `expose_as_tool = true`
//! is an MCP tool of its own, named after the agent.
//!
//! Its input schema is the agent's `input_schema`, else `{prompt}`. A call
//! spawns a task as the caller, through the task routes' own `create` (the
//! same path as `spawn`), waits for it as `wait` does (with its progress
//! notifications) up to the agent's `tool_timeout_secs`, and returns the
//! task id, its status and, once final, its result. The arguments are the
//! task's `input` (so the engine's input check names a failing pointer) and
//! the prompt is their `prompt` string, else the arguments as JSON. A call
//! the client cancels cancels its task: the caller never learnt its id.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use swarmd_engine::gate::Verb;

use super::wait::{Target, collect};
use super::{Outcome, arguments, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::tasks;
use swarmd_api::new_task::NewTask;
use swarmd_config::{Agent, Config, MAX_TOOL_TIMEOUT_SECS};

/// Tool names are reserved with this prefix for the upstream project's
/// tool names (`mse_operator_join`, …), which `swarmd mcp` accepts as aliases.
const UPSTREAM_PREFIX: &str = "mse_";
/// The longest tool name: model APIs refuse longer function names.
const MAX_TOOL_NAME: usize = 64;

/// Why `name` cannot be an agent's tool name, if it cannot: MCP allows
/// `[A-Za-z0-9_.-]`, 1 to 128 characters, but model APIs (Anthropic,
/// OpenAI) take function names of `[A-Za-z0-9_-]`, at most 64, and clients
/// pass MCP tool names on to them; a built-in tool's name (or an upstream
/// alias's, or a flow's `flow_<name>`) would hide that tool.
///
/// # Errors
/// The reason, for `check-config` to print.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    let charset = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if name.is_empty() || name.len() > MAX_TOOL_NAME || !charset {
        return Err(format!(
            "`{name}` cannot be an MCP tool name: a tool name is 1-{MAX_TOOL_NAME} of \
             A-Z a-z 0-9 _ - (no dots: model APIs refuse them); rename the agent"
        ));
    }
    if name.starts_with(UPSTREAM_PREFIX) {
        return Err(format!(
            "`{name}` cannot be an MCP tool name: names starting `{UPSTREAM_PREFIX}` are \
             the upstream tool names swarmd mcp accepts; rename the agent"
        ));
    }
    if name.starts_with(super::flow_as_tool::PREFIX) {
        return Err(format!(
            "`{name}` cannot be an MCP tool name: names starting `{}` are the tools \
             of the flows; rename the agent",
            super::flow_as_tool::PREFIX
        ));
    }
    if super::catalogue(true).contains(name) {
        return Err(format!(
            "`{name}` is the name of a built-in MCP tool, which the agent's tool would \
             hide; rename the agent"
        ));
    }
    Ok(())
}

/// The arguments of an agent tool when the agent has no `input_schema`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PromptArgs {
    /// What the agent is asked to do.
    prompt: String,
}

/// What an agent tool call returns.
#[derive(Debug, Serialize, JsonSchema)]
struct AgentCalled {
    /// The task the call started; `wait`, `task` and `output` take it.
    task_id: String,
    /// queued, running, pass, blocked, failed or cancelled.
    status: String,
    /// Whether the task is final. False when the call's timeout (or a
    /// drain) came first: collect the task later with `wait`.
    done: bool,
    /// The deciding final's value, once the task is final (when it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
    /// The deciding final's `ok`, once the task is final (when it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    /// Why the task ended as it did, when the daemon says.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The value's size in bytes (as JSON) when it is left out, as `wait`
    /// leaves it out: read it with `task` or `GET /v1/tasks/{id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    value_bytes: Option<usize>,
}

/// The tools of the exposed agents, in name order.
pub(super) fn tools(config: &Config) -> Vec<Tool> {
    config
        .agents
        .iter()
        .filter(|(_, agent)| agent.expose_as_tool)
        .map(|(name, agent)| {
            let summary = agent
                .description
                .clone()
                .unwrap_or_else(|| format!("Runs the `{name}` agent."));
            let description = format!(
                "{summary}\n\nRuns as a swarmd task and waits up to {}s for its result; if it \
                 is still running then, the answer has `done: false` and its task_id: collect \
                 it with `wait`.",
                timeout_of(agent).as_secs()
            );
            Tool::new(name.clone(), description, input_schema_of(agent))
                .with_raw_output_schema(
                    super::schema::standard(&schema_for_output::<AgentCalled>()),
                )
                .with_annotations(ToolAnnotations::new().read_only(false))
        })
        .collect()
}

/// The agent's `input_schema` (an object schema: `check-config` sees to
/// it), else `{prompt}`.
fn input_schema_of(agent: &Agent) -> Arc<JsonObject> {
    match agent.input_schema.as_ref().and_then(Value::as_object) {
        Some(schema) => Arc::new(schema.clone()),
        None => schema_for_input::<PromptArgs>().unwrap_or_else(|_| {
            Arc::new(JsonObject::from_iter([("type".into(), json!("object"))]))
        }),
    }
}

fn timeout_of(agent: &Agent) -> Duration {
    Duration::from_secs(agent.tool_timeout_secs.unwrap_or(MAX_TOOL_TIMEOUT_SECS))
}

/// Calls the tool of agent `name`; `None` when no exposed agent has that name.
pub(super) async fn call(
    state: &AppState,
    caller: &Caller,
    name: &str,
    args: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
) -> Option<Outcome> {
    let agent = state.config.agents.get(name).filter(|a| a.expose_as_tool)?;
    Some(run(state, caller, name, agent, args, context).await)
}

async fn run(
    state: &AppState,
    caller: &Caller,
    name: &str,
    agent: &Agent,
    args: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    let (prompt, input) = prompt_and_input(agent, args)?;
    caller.check(state, Verb::ReadTask)?;
    let origin = tasks::origin_of(state, caller)?;
    let request = NewTask {
        agent: name.to_owned(),
        prompt,
        system: None,
        input,
        metadata: None,
        layers: Vec::new(),
        policy: Default::default(),
        operator_sid: None,
        continue_from: None,
    };
    let task = tasks::create(state, &origin, request, None).await?;
    tracing::debug!(agent = name, task = %task.id, "agent tool spawned its task");
    let target = Target {
        ids: vec![task.id],
        needed: 1,
        timeout: timeout_of(agent),
    };
    let waited = match collect(state, target, context).await {
        Ok(waited) => waited,
        Err(error) if context.ct.is_cancelled() => {
            let reason = format!("the MCP call of the `{name}` tool was cancelled");
            if let Err(refused) = tasks::cancel_by(state, caller, task.id, Some(reason)).await {
                tracing::debug!(task = %task.id, error = refused.message(), "task not cancelled");
            }
            return Err(error);
        }
        Err(error) => return Err(error),
    };
    let Some(state) = waited.tasks.into_iter().next() else {
        return Err(ApiError::internal(&"the wait lost its task"));
    };
    structured(&AgentCalled {
        task_id: state.task_id,
        status: state.status,
        done: waited.done,
        value: state.value,
        ok: state.ok,
        reason: state.reason,
        value_bytes: state.value_bytes,
    })
}

/// The task's prompt and input from a call's arguments: with an
/// `input_schema`, the arguments are the input and the prompt is their
/// `prompt` string, else the arguments as JSON; without one, the only
/// argument is the prompt and there is no input.
fn prompt_and_input(
    agent: &Agent,
    args: Option<JsonObject>,
) -> Result<(String, Option<Value>), ApiError> {
    if agent.input_schema.is_none() {
        let PromptArgs { prompt } = arguments(args)?;
        return Ok((prompt, None));
    }
    let args = args.unwrap_or_default();
    let prompt = match args.get("prompt") {
        Some(Value::String(prompt)) => prompt.clone(),
        _ => Value::Object(args.clone()).to_string(),
    };
    Ok((prompt, Some(Value::Object(args))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(toml: &str) -> Agent {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn tool_names_are_checked_for_clients_and_collisions() {
        assert_eq!(check_tool_name("reviewer_2-b"), Ok(()));
        for bad in [
            "a.b",
            "",
            &"x".repeat(65),
            "spawn",
            "wait",
            "mse_worker_fetch",
            "flow_review",
            "start_run",
        ] {
            let reason = check_tool_name(bad).unwrap_err();
            assert!(reason.contains("rename the agent"), "{bad}: {reason}");
        }
        assert!(
            check_tool_name("spawn_many")
                .unwrap_err()
                .contains("built-in")
        );
    }

    #[test]
    fn without_a_schema_the_prompt_is_the_only_argument() {
        let plain = agent("kind = \"lua\"\nscript = \"x.lua\"\nexpose_as_tool = true");
        let schema = input_schema_of(&plain);
        assert_eq!(schema.get("required"), Some(&json!(["prompt"])));
        let args = JsonObject::from_iter([("prompt".into(), json!("hi"))]);
        assert_eq!(
            prompt_and_input(&plain, Some(args)).unwrap(),
            ("hi".into(), None)
        );
        let error = prompt_and_input(&plain, None).unwrap_err();
        assert_eq!(error.code(), swarmd_engine::ErrorCode::BadRequest);
        assert!(error.message().contains("prompt"), "{}", error.message());
    }

    #[test]
    fn with_a_schema_the_arguments_are_the_input() {
        let typed = agent(
            "kind = \"lua\"\nscript = \"x.lua\"\nexpose_as_tool = true\n\
             input_schema = { type = \"object\", required = [\"files\"] }",
        );
        assert_eq!(
            input_schema_of(&typed).get("required"),
            Some(&json!(["files"]))
        );
        let args = JsonObject::from_iter([("files".into(), json!(["a.rs"]))]);
        let (prompt, input) = prompt_and_input(&typed, Some(args)).unwrap();
        assert_eq!(prompt, r#"{"files":["a.rs"]}"#);
        assert_eq!(input, Some(json!({"files": ["a.rs"]})));
        let args = JsonObject::from_iter([("prompt".into(), json!("review"))]);
        assert_eq!(prompt_and_input(&typed, Some(args)).unwrap().0, "review");
    }

    #[test]
    fn exposed_agents_are_listed_with_both_schemas() {
        let config: Config = toml::from_str(
            "[agents.hidden]\nkind = \"lua\"\nscript = \"x.lua\"\n\
             [agents.shown]\nkind = \"lua\"\nscript = \"x.lua\"\nexpose_as_tool = true\n\
             description = \"Shows things\"\ntool_timeout_secs = 30\n",
        )
        .unwrap();
        let tools = tools(&config);
        assert_eq!(tools.len(), 1);
        let tool = &tools[0];
        assert_eq!(tool.name, "shown");
        let description = tool.description.as_deref().unwrap();
        assert!(description.starts_with("Shows things"), "{description}");
        assert!(description.contains("30s"), "{description}");
        let output = tool.output_schema.as_ref().unwrap();
        assert_eq!(output.get("type"), Some(&json!("object")));
        assert_eq!(
            output.get("required"),
            Some(&json!(["task_id", "status", "done"]))
        );
    }
}
