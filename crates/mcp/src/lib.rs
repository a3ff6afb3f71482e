//! swarmd's MCP server (docs/mcp.md): the tools a MainAI calls to fan work
//! out to agents and collect it, served by the daemon over Streamable HTTP at
//! `/mcp` (`route`) and relayed on stdio by `swarmd mcp` (`swarmd_client::mcp`).
//!
//! One `SwarmdTools` handler serves every MCP connection. It acts as the
//! caller the `/mcp` route authenticated (the admin or an operator session),
//! through the same functions the HTTP routes use, so the rules (the gate,
//! ownership, validation, bounds) are those of the HTTP API. Tools are grouped
//! by verb: `fanout` (agents, spawn, spawn_many, cancel), `read` (task, tasks,
//! output), `wait`, `frames` (frames, reply), `worker` (the SubAgent's
//! worker_prompt, worker_progress, worker_submit), `flow_tools` (flows,
//! lint_flow, start_run, run, answer_wait, cancel_run), `upstream` (the
//! `mse_*` aliases), `agent_tools` (agents exposed as tools, listed after
//! the built-in ones) and `flow_as_tool` (each flow as a tool
//! `flow_<name>`, listed last). Each verb module declares its built-in
//! tools once, as `registry` entries that carry both what `tools/list`
//! shows and what `tools/call` runs; a name the registry lacks goes to the
//! flows' tools, then to the agents'. A refused call is a tool result with
//! `isError: true` and the daemon's `{error, code}` as its text, so a model
//! can correct it; JSON-RPC errors are left to protocol faults.

mod agent_tools;
mod branches;
pub mod changes;
mod fanout;
mod flow_as_tool;
mod flow_tools;
mod frames;
mod ledger;
mod read;
mod registry;
mod route;
mod schema;
mod session_file;
mod stream_ids;
mod upstream;
mod wait;
mod worker;

use axum::http::header::AUTHORIZATION;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use registry::{Call, Registry, ToolEntry};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;

pub use agent_tools::check_tool_name;
pub use route::routes;

/// The tools of one MCP connection, acting for the caller of each request.
#[derive(Debug, Clone)]
pub(crate) struct SwarmdTools {
    state: AppState,
    catalogue: Arc<Registry>,
}

impl SwarmdTools {
    pub(crate) fn new(state: AppState, catalogue: Arc<Registry>) -> Self {
        SwarmdTools { state, catalogue }
    }
}

/// The built-in tools, in the order `tools/list` shows them; the upstream
/// `mse_*` aliases only when `mcp.upstream_aliases` is on.
pub(crate) fn catalogue(upstream_aliases: bool) -> Registry {
    Registry::new(builtins(upstream_aliases))
}

/// Every built-in tool's entry, as each verb module declares them.
fn builtins(upstream_aliases: bool) -> Vec<ToolEntry> {
    let mut tools = fanout::tools();
    tools.extend(wait::tools());
    tools.extend(read::tools());
    tools.extend(frames::tools());
    tools.extend(worker::tools());
    tools.extend(branches::tools());
    tools.extend(flow_tools::tools());
    if upstream_aliases {
        tools.extend(upstream::tools());
    }
    tools
}

/// What one tool call produced: a structured result or the daemon's error.
type Outcome = Result<Value, ApiError>;

/// The structured result of a tool.
fn structured<T: Serialize>(value: &T) -> Outcome {
    serde_json::to_value(value).map_err(|e| ApiError::internal(&e))
}

/// A tool's arguments decoded into `T` (unknown fields refused); a bad
/// shape is a `bad_request` the model can read.
fn arguments<T: DeserializeOwned>(args: Option<JsonObject>) -> Result<T, ApiError> {
    let value = Value::Object(args.unwrap_or_default());
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("invalid arguments: {e}")))
}

/// The arguments of a call, refused when nested past the bound of every
/// intake (`MAX_JSON_DEPTH`): the arguments object stands where the body of
/// the matching HTTP route does, so both take the same documents.
fn within_depth(args: Option<JsonObject>) -> Result<Option<JsonObject>, ApiError> {
    let Some(args) = args else {
        return Ok(None);
    };
    let value = Value::Object(args);
    swarmd_output_store::check_value_depth(&value)
        .map_err(|e| ApiError::bad_request(format!("the arguments are refused: {e}")))?;
    match value {
        Value::Object(args) => Ok(Some(args)),
        _ => Ok(None),
    }
}

/// A refused call as the tool result a model reads: `{error, code}`.
fn tool_error(error: &ApiError) -> CallToolResult {
    let body = json!({ "error": error.message(), "code": error.code().as_str() });
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

/// The caller the `/mcp` route authenticated for this request.
fn caller_of(context: &RequestContext<RoleServer>) -> Option<Caller> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
}

/// The bearer the `/mcp` request carried (already authenticated), for a
/// call another cluster node serves.
fn bearer_of(context: &RequestContext<RoleServer>) -> Option<&str> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    let text = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    text.strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))
        .map(str::trim)
}

impl ServerHandler for SwarmdTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("swarmd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "swarmd runs tasks on configured agents. `agents` lists them; `spawn` or \
                 `spawn_many` start tasks; `wait` collects their results (with progress); \
                 `task`, `output` and `tasks` inspect; `cancel` stops one. `flows` lists \
                 the flows; `start_run` (or a flow's own `flow_<name>` tool) runs one and \
                 `run` follows it.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools: Vec<_> = self.catalogue.tools().cloned().collect();
        tools.extend(agent_tools::tools(&self.state.config));
        tools.extend(flow_as_tool::tools(self.state.runner.catalog()));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(caller) = caller_of(&context) else {
            return Err(ErrorData::internal_error("no authenticated caller", None));
        };
        let state = &self.state;
        let args = match within_depth(request.arguments) {
            Ok(args) => args,
            Err(error) => return Ok(tool_error(&error).into()),
        };
        let name = request.name.as_ref();
        // The built-in tools first, then a flow's tool, then an agent's.
        let outcome = if let Some(entry) = self.catalogue.get(name) {
            let call = Call {
                state,
                caller: &caller,
                args,
                context: &context,
            };
            entry.call(call).await
        } else if name.starts_with(flow_as_tool::PREFIX) {
            match flow_as_tool::call(state, &caller, name, args, &context).await {
                Some(outcome) => outcome,
                None => return Err(no_tool(name)),
            }
        } else {
            match agent_tools::call(state, &caller, name, args, &context).await {
                Some(outcome) => outcome,
                None => return Err(no_tool(name)),
            }
        };
        Ok(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => tool_error(&error),
        }
        .into())
    }
}

/// The protocol error of a call naming no tool.
fn no_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("no tool named `{name}`"), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_object_schemas_for_input_and_output() {
        let tools: Vec<_> = catalogue(true).tools().cloned().collect();
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(
            names,
            [
                "agents",
                "spawn",
                "spawn_many",
                "cancel",
                "wait",
                "task",
                "tasks",
                "output",
                "frames",
                "reply",
                "worker_prompt",
                "worker_progress",
                "worker_submit",
                "branches",
                "diff",
                "apply",
                "flows",
                "lint_flow",
                "start_run",
                "run",
                "answer_wait",
                "cancel_run",
                "mse_operator_join",
                "mse_pending_wait",
                "mse_ack",
                "mse_operator_leave",
                "mse_worker_fetch",
                "mse_worker_submit"
            ]
        );
        for tool in &tools {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
            let output = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(output.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.description.as_ref().is_some_and(|d| d.len() > 20));
            for schema in [&tool.input_schema, output] {
                let schema = Value::Object((**schema).clone());
                assert_eq!(boolean_properties(&schema), 0, "{}: {schema}", tool.name);
            }
        }
    }

    /// How many `properties` under `schema` map a name to a boolean schema.
    fn boolean_properties(schema: &Value) -> usize {
        match schema {
            Value::Object(map) => {
                let own = map
                    .get("properties")
                    .and_then(Value::as_object)
                    .map_or(0, |named| named.values().filter(|v| v.is_boolean()).count());
                own + map.values().map(boolean_properties).sum::<usize>()
            }
            Value::Array(items) => items.iter().map(boolean_properties).sum(),
            _ => 0,
        }
    }

    #[test]
    fn arguments_nest_as_deep_as_an_http_body_and_no_deeper() {
        let nested = |depth: usize| (0..depth).fold(json!(1), |inner, _| json!([inner]));
        let args = |depth| Some(JsonObject::from_iter([("input".into(), nested(depth))]));
        let kept = within_depth(args(63)).unwrap().unwrap();
        assert_eq!(kept["input"], nested(63));
        let error = within_depth(args(64)).unwrap_err();
        assert_eq!(error.code(), swarmd_engine::ErrorCode::BadRequest);
        assert!(error.message().contains("64"), "{}", error.message());
        assert!(within_depth(None).unwrap().is_none());
    }

    #[test]
    fn arguments_refuse_unknown_fields_with_a_bad_request() {
        let args =
            JsonObject::from_iter([("task_id".into(), json!("x")), ("bogus".into(), json!(1))]);
        let error = arguments::<read::TaskArgs>(Some(args)).unwrap_err();
        assert_eq!(error.code(), swarmd_engine::ErrorCode::BadRequest);
        assert!(error.message().contains("bogus"), "{}", error.message());
    }
}
