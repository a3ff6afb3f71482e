//! Flows as tools (docs/mcp.md, Flows): every flow of the catalog is an MCP
//! tool of its own, named `flow_<name>`, listed after the agents' tools.
//!
//! Its input schema is the flow's `input_schema` (`{type: object}` when it
//! has none); a flow whose schema is not an object schema, or whose tool
//! name would pass 64 characters, is no tool (`start_run` still runs it).
//! A call starts a run as the caller, through the same request as
//! `start_run` (so the runner checks the arguments, as the run's input,
//! against the schema and names a failing pointer), waits for its end as
//! `run` does (with progress notifications) up to `FLOW_TOOL_TIMEOUT`, and
//! returns the run id, its status and, once it ended, its result or its
//! error, its large values cut as a run's view cuts them. A call the
//! client cancels cancels its run: the caller never learnt its id.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::handler::server::common::schema_for_output;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use swarmd_engine::RunStatus;
use swarmd_engine::gate::Verb;
use swarmd_flow::Flow;
use swarmd_flow_run::Catalog;

use super::flow_tools::{refused, wait_for_run};
use super::read::{MAX_ANSWER_BYTES, bound_run_within};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::flows::start_request;
use swarmd_config::MAX_TOOL_TIMEOUT_SECS;

/// The prefix of a flow's tool name; agents' tools may not take it.
pub(crate) const PREFIX: &str = "flow_";
/// The longest tool name (as for agents' tools: model APIs refuse longer).
const MAX_TOOL_NAME: usize = 64;
/// How long a flow's tool waits for its run to end.
const FLOW_TOOL_TIMEOUT: Duration = Duration::from_secs(MAX_TOOL_TIMEOUT_SECS);

/// What a flow tool call returns.
#[derive(Debug, Serialize, JsonSchema)]
struct FlowCalled {
    /// The run the call started; `run`, `answer_wait` and `cancel_run` take it.
    run_id: String,
    /// running, waiting, passed, failed or cancelled.
    status: String,
    /// Whether the run ended. False when the call's timeout (or a drain)
    /// came first: follow the run with `run`.
    done: bool,
    /// The run's result, once it passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    /// Why the run failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The run's open waits, when it is waiting for answers (`answer_wait`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    waits: Vec<OpenWait>,
    /// The values cut to bound the answer: `{values: {<JSON pointer>:
    /// <whole size in bytes>}, read}`, `read` saying where to read them whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut: Option<Value>,
}

/// A wait the run is held on.
#[derive(Debug, Serialize, JsonSchema)]
struct OpenWait {
    /// What `answer_wait` takes as `wait` when several of one name are open.
    key: String,
    name: String,
    /// What the wait asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<Value>,
    /// The JSON Schema an answer must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<Value>,
}

/// The tool name of `flow`.
pub(super) fn name_of(flow: &Flow) -> String {
    format!("{PREFIX}{}", flow.name)
}

/// Whether `flow` is offered as a tool: an object input schema (or none)
/// and a tool name clients take (`[A-Za-z0-9_-]`, at most 64).
pub(super) fn offered(flow: &Flow) -> bool {
    let name = name_of(flow);
    let charset = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    charset && name.len() <= MAX_TOOL_NAME && input_schema_of(flow).is_some()
}

/// The flow's `input_schema` when it is an object schema (`type:
/// "object"`), `{type: object}` when it has none; `None` for any other.
fn input_schema_of(flow: &Flow) -> Option<Arc<JsonObject>> {
    match &flow.input_schema {
        None => Some(Arc::new(JsonObject::from_iter([(
            "type".into(),
            json!("object"),
        )]))),
        Some(Value::Object(schema)) if schema.get("type") == Some(&json!("object")) => {
            Some(Arc::new(schema.clone()))
        }
        Some(_) => None,
    }
}

/// The tools of the catalog's flows, in name order.
pub(super) fn tools(catalog: &Catalog) -> Vec<Tool> {
    catalog
        .entries()
        .filter(|entry| offered(&entry.flow))
        .filter_map(|entry| {
            let flow = &entry.flow;
            let summary = flow
                .description
                .clone()
                .unwrap_or_else(|| format!("Runs the `{}` flow.", flow.name));
            let description = format!(
                "{summary}\n\nRuns as a swarmd flow run and waits up to {}s for its end; if it \
                 is still going then (or holds on a wait), the answer has `done: false` and its \
                 run_id: follow it with `run`, answer its waits with `answer_wait`.",
                FLOW_TOOL_TIMEOUT.as_secs()
            );
            let input = input_schema_of(flow)?;
            Some(
                Tool::new(name_of(flow), description, input)
                    .with_raw_output_schema(super::schema::standard(
                        &schema_for_output::<FlowCalled>(),
                    ))
                    .with_annotations(ToolAnnotations::new().read_only(false)),
            )
        })
        .collect()
}

/// Calls the tool `name`; `None` when no offered flow has that tool name.
pub(super) async fn call(
    state: &AppState,
    caller: &Caller,
    name: &str,
    args: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
) -> Option<Outcome> {
    let flow = name.strip_prefix(PREFIX)?;
    let entry = state.runner.catalog().get(flow)?;
    if !offered(&entry.flow) {
        return None;
    }
    Some(run(state, caller, flow, args, context).await)
}

async fn run(
    state: &AppState,
    caller: &Caller,
    flow: &str,
    args: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    caller.check(state, Verb::SpawnTask)?;
    let input = Value::Object(args.unwrap_or_default());
    let request = start_request(caller, Value::String(flow.to_owned()), input, None)?;
    let (record, _) = state.runner.start(request).await.map_err(refused)?;
    let id = record.id;
    tracing::debug!(flow, run_id = %id, "flow tool started its run");
    let record = match wait_for_run(state, id, FLOW_TOOL_TIMEOUT, context).await {
        Ok(record) => record,
        Err(error) if context.ct.is_cancelled() => {
            let reason = format!("the MCP call of the `{PREFIX}{flow}` tool was cancelled");
            if let Err(refusal) = state.runner.cancel(id, Some(reason)).await {
                tracing::debug!(run_id = %id, error = %refusal, "run not cancelled");
            }
            return Err(error);
        }
        Err(error) => return Err(error),
    };
    let waits = if record.status == RunStatus::Waiting {
        open_waits(state, record.id).await?
    } else {
        Vec::new()
    };
    let mut called = structured(&FlowCalled {
        run_id: record.id.to_string(),
        status: record.status.as_str().to_owned(),
        done: record.status.is_terminal(),
        result: record.result,
        error: record.error,
        waits,
        cut: None,
    })?;
    bound_run_within(&mut called, MAX_ANSWER_BYTES);
    Ok(called)
}

/// The open waits of a run held on them.
async fn open_waits(state: &AppState, id: swarmd_engine::RunId) -> Result<Vec<OpenWait>, ApiError> {
    let view = state.runner.view(id, false).await.map_err(refused)?;
    Ok(view
        .waits
        .into_iter()
        .filter(|wait| wait.open)
        .map(|wait| OpenWait {
            key: wait.key,
            name: wait.name,
            prompt: wait.prompt,
            schema: wait.schema,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(value: Value) -> Flow {
        serde_json::from_value(value).unwrap()
    }

    fn body() -> Value {
        json!({"kind": "let", "at": {"op": "path", "at": "$.x"}, "value": {"op": "lit", "value": 1}})
    }

    #[test]
    fn a_flow_without_a_schema_takes_any_object() {
        let plain = flow(json!({"name": "plain-one", "body": body()}));
        assert!(offered(&plain));
        assert_eq!(name_of(&plain), "flow_plain-one");
        let schema = input_schema_of(&plain).unwrap();
        assert_eq!(Value::Object((*schema).clone()), json!({"type": "object"}));
    }

    #[test]
    fn an_object_schema_is_the_tool_schema_and_any_other_is_no_tool() {
        let typed = flow(json!({"name": "typed", "body": body(),
            "input_schema": {"type": "object", "required": ["topic"]}}));
        let schema = input_schema_of(&typed).unwrap();
        assert_eq!(schema.get("required"), Some(&json!(["topic"])));
        let text = flow(json!({"name": "text", "body": body(),
            "input_schema": {"type": "string"}}));
        assert!(!offered(&text));
        let long = flow(json!({"name": "x".repeat(60), "body": body()}));
        assert!(!offered(&long), "flow_ + 60 characters is past 64");
    }

    #[test]
    fn the_catalog_is_listed_with_both_schemas_in_name_order() {
        let mut catalog = Catalog::default();
        catalog.insert(
            flow(json!({"name": "zeta", "description": "Does zeta.", "body": body()})),
            "inline".into(),
        );
        catalog.insert(
            flow(json!({"name": "alpha", "body": body()})),
            "inline".into(),
        );
        catalog.insert(
            flow(json!({"name": "text", "body": body(), "input_schema": {"type": "string"}})),
            "inline".into(),
        );
        let tools = tools(&catalog);
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["flow_alpha", "flow_zeta"]);
        let zeta = &tools[1];
        let description = zeta.description.as_deref().unwrap();
        assert!(description.starts_with("Does zeta."), "{description}");
        assert!(description.contains("600s"), "{description}");
        let output = zeta.output_schema.as_ref().unwrap();
        assert_eq!(output.get("type"), Some(&json!("object")));
        assert_eq!(
            output.get("required"),
            Some(&json!(["run_id", "status", "done"]))
        );
    }
}
