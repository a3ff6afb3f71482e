//! Flows and their runs as MCP tools (docs/mcp.md, Flows): `flows` lists
//! the flows the daemon offers, `lint_flow` checks one, `start_run` starts
//! a run, `run` reads one (optionally waiting for its end, with progress
//! notifications), `answer_wait` answers a wait and `cancel_run` stops a
//! run. Each goes through the HTTP flow routes' own helpers
//! (`http::flows`), so the rules are theirs: a run is read by the admin
//! and the session that owns it (another session's run is `not_found`, as
//! an unknown one), cancelled and answered by its owner or the admin, and
//! an idempotency key is shared with `POST /v1/runs` of the same caller.
//! A run's view is bounded as a task is (`read`'s `bound`): its large
//! values (input, result, each step's output, …) are cut with a marker
//! naming `GET /v1/runs/{id}`, which gives them whole.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{JsonObject, ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::{ErrorCode, RunId, RunRecord};
use swarmd_flow_run::RunError;

use super::flow_as_tool;
use super::read::{MAX_ANSWER_BYTES, bound_run_within};
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::flows::{may_act, parse_flow, start_request, to_api, visible};

/// The longest one `run` call waits.
pub(crate) const MAX_WAIT_SECS: u64 = 600;
/// The longest `reason` of a `cancel_run`, as on the HTTP route.
const MAX_REASON_BYTES: usize = 1024;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<NoArgs, FlowList>(
            "flows",
            "List the flows this daemon runs by name: name, description, content hash, the \
             JSON Schema of their input, and the tool (`flow_<name>`) that runs each one.",
            true,
            |call, args| Box::pin(flows(call.state, call.caller, args)),
        ),
        entry::<LintArgs, Linted>(
            "lint_flow",
            "Check a flow's IR (docs/flow.schema.json) against this daemon's agents, flows and \
             limits without running it. Returns ok, its content hash, and every problem with \
             its JSON pointer, code, message and a hint to fix it.",
            true,
            |call, args| Box::pin(lint_flow(call.state, call.caller, args)),
        ),
        entry::<StartArgs, RunViewSchema>(
            "start_run",
            "Start a flow run: `flow` is a flow's name (see `flows`) or a flow's IR; `input` \
             must match its input_schema. Returns the run (id, status, every node's state) at \
             once; follow it with `run`. A retry with the same idempotency_key returns the \
             run the first call started.",
            false,
            |call, args| Box::pin(start_run(call.state, call.caller, args)),
        ),
        entry::<RunArgs, RunViewSchema>(
            "run",
            "Read a flow run: status, result or error, every node's state and its waits. \
             With wait_secs above 0 (at most 600) it first waits that long at most for the run to end, \
             sending progress notifications. Values past 64 KiB (input, result, a step's \
             output, …) are cut with a marker and listed in `cut`; `GET /v1/runs/{id}` gives \
             them whole.",
            true,
            |call, args| Box::pin(run(call.state, call.caller, args, call.context)),
        ),
        entry::<AnswerArgs, RunViewSchema>(
            "answer_wait",
            "Answer an open wait of a flow run (its name, or its key when several are open) \
             with a value matching the wait's schema; the run goes on. Only the run's owner \
             or the admin may. Returns the run.",
            false,
            |call, args| Box::pin(answer_wait(call.state, call.caller, args)),
        ),
        entry::<CancelArgs, RunViewSchema>(
            "cancel_run",
            "Cancel a flow run and every step it has running (only its owner or the admin \
             may), with an optional reason. Returns the run as it is after the cancel.",
            false,
            |call, args| Box::pin(cancel_run(call.state, call.caller, args)),
        ),
    ]
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArgs {}

#[derive(Debug, Serialize, JsonSchema)]
struct FlowList {
    flows: Vec<FlowInfo>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct FlowInfo {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// The flow's content hash; a run pins it.
    hash: String,
    /// The JSON Schema a run's `input` must match, when the flow has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    input_schema: Option<Value>,
    /// The tool that runs this flow and waits for it, when it is offered
    /// as one (an input schema that is no object schema, or a name too
    /// long for a tool, leaves only `start_run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
}

/// `lint_flow` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LintArgs {
    /// The flow's IR (docs/flow.schema.json).
    flow: JsonObject,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Linted {
    /// Whether the flow may run: no problem found.
    ok: bool,
    /// The flow's content hash.
    hash: String,
    /// Every problem, in the order found.
    problems: Vec<ProblemView>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ProblemView {
    /// RFC 6901 pointer into the flow's JSON, e.g. `/body/children/2/ref`.
    pointer: String,
    /// Stable code, e.g. `unknown_agent`.
    code: String,
    message: String,
    /// How to fix it.
    hint: String,
}

/// `start_run` arguments (the body of `POST /v1/runs`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StartArgs {
    /// A flow's name (see `flows`), or a flow's IR (an object).
    #[schemars(schema_with = "name_or_ir")]
    flow: Value,
    /// The run's input, checked against the flow's input_schema (default `{}`).
    #[serde(default)]
    input: Option<Value>,
    /// Retrying with the same key returns the run the first call started.
    #[serde(default)]
    #[schemars(length(max = 200))] // `start_request`'s bound on a run's key
    idempotency_key: Option<String>,
}

fn name_or_ir(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A flow's name (see `flows`), or a flow's IR (an object).",
        "anyOf": [{"type": "string"}, {"type": "object"}]
    })
}

/// `run` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunArgs {
    /// The run (`R-…`).
    run_id: String,
    /// Seconds to wait for the run to end first: 0 to 600 (default 0).
    #[serde(default)]
    #[schemars(range(max = MAX_WAIT_SECS))]
    wait_secs: u64,
}

/// `answer_wait` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerArgs {
    /// The run (`R-…`).
    run_id: String,
    /// The wait's name, or its key when several waits of that name are open.
    wait: String,
    /// The answer; it must match the wait's schema.
    value: Value,
}

/// `cancel_run` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelArgs {
    /// The run (`R-…`).
    run_id: String,
    /// Why (at most 1024 bytes); the run's error says it.
    #[serde(default)]
    #[schemars(length(max = MAX_REASON_BYTES))]
    reason: Option<String>,
}

/// A run as the run tools return it (`swarmd_flow_run::RunView`, as
/// `GET /v1/runs/{id}` answers it); only its schema is built from here.
#[derive(Debug, Serialize, JsonSchema)]
#[allow(dead_code, reason = "only its schema is used")]
pub(super) struct RunViewSchema {
    /// The run (`R-…`).
    id: String,
    flow: String,
    /// The content hash of the flow the run pinned.
    flow_hash: String,
    /// running, waiting, passed, failed or cancelled.
    status: String,
    /// The session that owns the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    input: Value,
    /// The run's result, once it passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    /// Why the run failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    created_ms: u64,
    updated_ms: u64,
    version: u64,
    /// Node instances reached so far (key, pointer, kind, status, a
    /// step's tries with their task ids and outputs).
    nodes: Vec<JsonObject>,
    /// The run's waits: key, name, whether open, prompt, schema, and for
    /// the owner the token that answers it over HTTP.
    waits: Vec<JsonObject>,
    /// The flow as pinned.
    graph: Value,
    /// start_run only: whether this call started the run (false: the
    /// idempotency key's earlier run).
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    /// The values cut to bound the answer: `{values: {<JSON pointer>:
    /// <whole size in bytes>}, read}`, `read` saying where to read them whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut: Option<Value>,
}

pub(super) async fn flows(state: &AppState, caller: &Caller, _args: NoArgs) -> Outcome {
    caller.check(state, Verb::ReadTask)?;
    let flows = state
        .runner
        .catalog()
        .entries()
        .map(|entry| FlowInfo {
            name: entry.flow.name.clone(),
            description: entry.flow.description.clone(),
            hash: entry.hash.clone(),
            input_schema: entry.flow.input_schema.clone(),
            tool: flow_as_tool::offered(&entry.flow).then(|| flow_as_tool::name_of(&entry.flow)),
        })
        .collect();
    structured(&FlowList { flows })
}

pub(super) async fn lint_flow(
    state: &AppState,
    caller: &Caller,
    LintArgs { flow }: LintArgs,
) -> Outcome {
    caller.check(state, Verb::ReadTask)?;
    let flow = parse_flow(Value::Object(flow))?;
    let problems: Vec<ProblemView> = state
        .runner
        .lint(&flow)
        .into_iter()
        .map(|p| ProblemView {
            pointer: p.pointer,
            code: p.code.to_owned(),
            message: p.message,
            hint: p.hint,
        })
        .collect();
    structured(&Linted {
        ok: problems.is_empty(),
        hash: swarmd_flow::content_hash(&flow),
        problems,
    })
}

pub(super) async fn start_run(state: &AppState, caller: &Caller, args: StartArgs) -> Outcome {
    caller.check(state, Verb::SpawnTask)?;
    let key = args.idempotency_key.filter(|k| !k.is_empty());
    let input = args.input.unwrap_or_else(|| json!({}));
    let request = start_request(caller, args.flow, input, key)?;
    let (record, created) = state.runner.start(request).await.map_err(refused)?;
    tracing::debug!(run_id = %record.id, flow = %record.flow, created, "MCP start_run");
    let mut view = view_of(state, record.id, true).await?;
    if let Value::Object(fields) = &mut view {
        fields.insert("created".into(), Value::Bool(created));
    }
    Ok(view)
}

pub(super) async fn run(
    state: &AppState,
    caller: &Caller,
    args: RunArgs,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    let id = run_id(&args.run_id)?;
    if args.wait_secs > MAX_WAIT_SECS {
        return Err(ApiError::bad_request(format!(
            "wait_secs must be 0 to {MAX_WAIT_SECS}, not {}",
            args.wait_secs
        )));
    }
    caller.check(state, Verb::ReadTask)?;
    let record = visible(state, caller, id).await?;
    if args.wait_secs > 0 && !record.status.is_terminal() {
        wait_for_run(state, id, Duration::from_secs(args.wait_secs), context).await?;
    }
    view_of(state, id, may_act(caller, &record)).await
}

pub(super) async fn answer_wait(state: &AppState, caller: &Caller, args: AnswerArgs) -> Outcome {
    let id = run_id(&args.run_id)?;
    caller.check(state, Verb::Answer)?;
    let record = visible(state, caller, id).await?;
    // The owner and the admin, as over HTTP (role tokens are refused
    // `/mcp` before this; a wait's own token answers over HTTP).
    let owner = may_act(caller, &record);
    if !owner {
        return Err(ApiError::forbidden());
    }
    state
        .runner
        .answer(id, &args.wait, args.value, None)
        .await
        .map_err(refused)?;
    view_of(state, id, owner).await
}

pub(super) async fn cancel_run(state: &AppState, caller: &Caller, args: CancelArgs) -> Outcome {
    let id = run_id(&args.run_id)?;
    caller.check(state, Verb::CancelTask)?;
    let record = visible(state, caller, id).await?;
    if !may_act(caller, &record) {
        return Err(ApiError::forbidden());
    }
    if args
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_REASON_BYTES)
    {
        return Err(ApiError::bad_request(format!(
            "reason is at most {MAX_REASON_BYTES} bytes"
        )));
    }
    state
        .runner
        .cancel(id, args.reason)
        .await
        .map_err(refused)?;
    view_of(state, id, true).await
}

/// A run id argument.
pub(super) fn run_id(text: &str) -> Result<RunId, ApiError> {
    text.parse::<RunId>()
        .map_err(|e| ApiError::bad_request(format!("run_id: {e}")))
}

/// The run's view as JSON; `tokens` adds its open waits' answer tokens.
/// Its large values are cut so the answer stays within
/// [`MAX_ANSWER_BYTES`] (docs/mcp.md, Large values).
pub(super) async fn view_of(state: &AppState, id: RunId, tokens: bool) -> Outcome {
    let view = state.runner.view(id, tokens).await.map_err(refused)?;
    let mut view = structured(&view)?;
    bound_run_within(&mut view, MAX_ANSWER_BYTES);
    Ok(view)
}

/// A runner error as the tool's error; a flow that fails lint lists every
/// problem (pointer, code, message, hint) in the message.
pub(super) fn refused(error: RunError) -> ApiError {
    if let RunError::InvalidFlow { problems } = &error {
        let listed: Vec<String> = problems
            .iter()
            .map(|p| format!("{} {}: {} (hint: {})", p.pointer, p.code, p.message, p.hint))
            .collect();
        return ApiError::coded(
            ErrorCode::InvalidFlow,
            format!(
                "the flow has {} problem(s): {}",
                problems.len(),
                listed.join("; ")
            ),
        );
    }
    to_api(error)
}

/// Waits up to `timeout` for run `id` to end, sending a progress
/// notification every `mcp.progress_ms` when the client gave a progress
/// token; the run's record at its end, the timeout or the drain. A client's
/// cancellation of the call ends it with an error (it answers nothing).
pub(super) async fn wait_for_run(
    state: &AppState,
    id: RunId,
    timeout: Duration,
    context: &RequestContext<RoleServer>,
) -> Result<RunRecord, ApiError> {
    let started = Instant::now();
    let progress = context.meta.get_progress_token();
    tracing::debug!(run_id = %id, progress = progress.is_some(), "MCP run wait started");
    let interval = Duration::from_millis(state.config.mcp.progress_ms);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let waiting = state.runner.wait_for(id, timeout);
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            waited = &mut waiting => return waited.map_err(refused),
            _ = ticker.tick() => {
                if let Some(token) = &progress {
                    notify(state, context, token, id, started.elapsed(), timeout).await;
                }
            }
            () = context.ct.cancelled() => {
                tracing::debug!(run_id = %id, "run wait cancelled by its client");
                return Err(ApiError::bad_request("the client cancelled the call"));
            }
            () = state.shutdown.cancelled() => {
                return state.runner.record(id).await.map_err(refused);
            }
        }
    }
}

/// One progress notification of a run wait: `progress` is the elapsed
/// seconds (it grows with every notification) and `total` the timeout's;
/// the message names the run's status as stored.
async fn notify(
    state: &AppState,
    context: &RequestContext<RoleServer>,
    token: &ProgressToken,
    id: RunId,
    elapsed: Duration,
    timeout: Duration,
) {
    let status = match state.engine.get_run(id).await {
        Ok(Some(record)) => record.status.as_str(),
        _ => "unknown",
    };
    let params = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64())
        .with_total(timeout.as_secs_f64())
        .with_message(progress_message(id, status, elapsed));
    if let Err(error) = context.peer.notify_progress(params).await {
        tracing::debug!(%error, "progress notification not sent");
    }
}

fn progress_message(id: RunId, status: &str, elapsed: Duration) -> String {
    format!("run {id} {status}, {}s elapsed", elapsed.as_secs())
}

#[cfg(test)]
#[path = "flow_tools_tests.rs"]
mod tests;
