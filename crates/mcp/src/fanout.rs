//! The tools that start and stop work: `agents`, `spawn`, `spawn_many` and
//! `cancel`, each through the HTTP task routes' own functions (a cancel of
//! a task another cluster node holds through that node's route).

use std::collections::BTreeMap;

use axum::http::Method;
use futures_util::{StreamExt, stream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::{PolicyOverrides, TaskStatus};

use super::read::{MAX_ANSWER_BYTES, bound_task_within};
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::cluster::{self, PeerCall, Subject};
use swarmd_api::http::auth::Caller;
use swarmd_api::http::error::ApiError;
use swarmd_api::http::tasks;
use swarmd_api::new_task::NewTask;

/// The most tasks one `spawn_many` call creates.
pub(crate) const MAX_SPAWN_MANY: usize = 100;
/// Creations of one `spawn_many` call in flight at once.
const CREATE_CONCURRENCY: usize = 32;
/// Live tasks of each status `agents` counts; past it the counts are lower bounds.
const MAX_COUNTED: usize = 10_000;

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<NoArgs, AgentList>(
            "agents",
            "List the agents tasks can be spawned for: name, kind (process, lua, operator, remote), \
             description, and how many of their tasks are running and queued now.",
            true,
            |call, args| Box::pin(agents(call.state, call.caller, args)),
        ),
        entry::<SpawnArgs, Spawned>(
            "spawn",
            "Start one task on an agent with a prompt (and optional input, metadata, layers, \
             policy). With continue_from = a finished task's id, the task continues that one \
             (same agent, its session and worktree branch). Returns its task_id at once; \
             collect the result with `wait`.",
            false,
            |call, args| Box::pin(spawn(call.state, call.caller, args)),
        ),
        entry::<SpawnManyArgs, SpawnedMany>(
            "spawn_many",
            "Start up to 100 tasks in one call (fan-out). Each entry has the arguments of \
             `spawn`; the results are in the same order, each a task_id or its own error.",
            false,
            |call, args| Box::pin(spawn_many(call.state, call.caller, args)),
        ),
        entry::<CancelArgs, Cancelled>(
            "cancel",
            "Cancel a task that is queued or running (only its owner or the admin may). \
             Returns the task as it is after the cancel.",
            false,
            |call, args| Box::pin(cancel(call.state, call.caller, call.bearer(), args)),
        ),
    ]
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArgs {}

#[derive(Debug, Serialize, JsonSchema)]
struct AgentList {
    agents: Vec<AgentInfo>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct AgentInfo {
    name: String,
    /// `process`, `lua` or `operator`.
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// The JSON Schema a task's `input` must match, when the agent has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    input_schema: Option<serde_json::Value>,
    /// Tasks of this agent running now.
    running: usize,
    /// Tasks of this agent waiting for a slot.
    queued: usize,
}

/// One task to start (the body of `POST /v1/tasks`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SpawnArgs {
    /// The agent to run (see `agents`); may be left out with
    /// `continue_from`, meaning that task's agent.
    #[serde(default)]
    agent: String,
    /// What the agent is asked to do.
    prompt: String,
    /// A system prompt for the agent, if it takes one.
    #[serde(default)]
    system: Option<String>,
    /// Structured input handed to the agent with the prompt.
    #[serde(default)]
    input: Option<Value>,
    /// Free-form labels kept with the task.
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    /// Hint layers to add, in order.
    #[serde(default)]
    layers: Vec<String>,
    /// Policy overrides (decoded and checked as the engine's
    /// `PolicyOverrides`, so a bad one is refused with its reason).
    #[serde(default)]
    #[schemars(with = "Option<super::schema::PolicySchema>")]
    policy: Option<Map<String, Value>>,
    /// Retrying with the same key returns the task the first call created.
    #[serde(default)]
    #[schemars(length(min = 1, max = 256))] // the engine's bound on a task's key
    idempotency_key: Option<String>,
    /// Pins the task's operator attempts to this session (`S-…`).
    #[serde(default)]
    operator_sid: Option<String>,
    /// A finished task (`T-…`) of the same agent to continue: the new task
    /// resumes its CLI session and starts from its worktree branch.
    #[serde(default)]
    continue_from: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Spawned {
    task_id: String,
    /// The task's status when the call returned (`queued` or `running`, or
    /// already final).
    status: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SpawnManyArgs {
    /// The tasks to start: 1 to 100 entries, each with `spawn`'s arguments.
    /// Each entry is decoded on its own, so one bad entry fails alone.
    #[schemars(with = "Vec<SpawnArgs>", length(min = 1, max = MAX_SPAWN_MANY))]
    tasks: Vec<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SpawnedMany {
    /// One entry per requested task, in order.
    results: Vec<SpawnResult>,
    /// How many distinct tasks the accepted entries name: entries that
    /// share an idempotency key name one task, counted once.
    created: usize,
}

/// A created task (`ok: true`, `task_id`, `status`) or why not (`ok: false`,
/// `error`, `code`).
#[derive(Debug, Serialize, JsonSchema)]
struct SpawnResult {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelArgs {
    /// The task to cancel (`T-…`).
    task_id: String,
    /// Why, kept as the task's reason (at most 1 024 bytes).
    #[serde(default)]
    #[schemars(length(max = swarmd_engine::MAX_CANCEL_REASON))]
    reason: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Cancelled {
    /// The task after the cancel (as `GET /v1/tasks/{id}` shows it, its
    /// large values cut as `task` cuts them).
    task: Value,
}

/// A task id argument; a malformed one is a bad request.
pub(super) fn task_id(text: &str) -> Result<TaskId, ApiError> {
    text.parse()
        .map_err(|e| ApiError::bad_request(format!("task_id `{text}`: {e}")))
}

pub(super) async fn agents(state: &AppState, caller: &Caller, _args: NoArgs) -> Outcome {
    caller.check(state, Verb::ReadTask)?;
    let running = count_by_agent(state, TaskStatus::Running).await?;
    let queued = count_by_agent(state, TaskStatus::Queued).await?;
    let agents = state
        .config
        .agents
        .iter()
        .map(|(name, agent)| AgentInfo {
            name: name.clone(),
            kind: agent.kind.name().to_owned(),
            description: agent.description.clone(),
            input_schema: agent.input_schema.clone(),
            running: running.get(name).copied().unwrap_or(0),
            queued: queued.get(name).copied().unwrap_or(0),
        })
        .collect();
    structured(&AgentList { agents })
}

/// Live tasks of `status` per agent, up to `MAX_COUNTED` tasks (only
/// their agents read).
async fn count_by_agent(
    state: &AppState,
    status: TaskStatus,
) -> Result<BTreeMap<String, usize>, ApiError> {
    Ok(state.engine.count_by_agent(status, MAX_COUNTED).await?)
}

pub(super) async fn spawn(state: &AppState, caller: &Caller, args: SpawnArgs) -> Outcome {
    structured(&spawn_one(state, caller, args).await?)
}

async fn spawn_one(
    state: &AppState,
    caller: &Caller,
    args: SpawnArgs,
) -> Result<Spawned, ApiError> {
    let origin = tasks::origin_of(state, caller)?;
    let policy: PolicyOverrides = match args.policy {
        None => PolicyOverrides::default(),
        Some(map) => serde_json::from_value(Value::Object(map))
            .map_err(|e| ApiError::bad_request(format!("invalid policy: {e}")))?,
    };
    let request = NewTask {
        agent: args.agent,
        prompt: args.prompt,
        system: args.system,
        input: args.input,
        metadata: args.metadata,
        layers: args.layers,
        policy,
        operator_sid: args
            .operator_sid
            .map(|sid| sid.parse())
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("invalid operator_sid: {e}")))?,
        continue_from: args
            .continue_from
            .map(|id| id.parse())
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("invalid continue_from: {e}")))?,
    };
    let task = tasks::create(state, &origin, request, args.idempotency_key).await?;
    Ok(Spawned {
        task_id: task.id.to_string(),
        status: task.status().to_string(),
    })
}

pub(super) async fn spawn_many(
    state: &AppState,
    caller: &Caller,
    SpawnManyArgs { tasks }: SpawnManyArgs,
) -> Outcome {
    if tasks.is_empty() || tasks.len() > MAX_SPAWN_MANY {
        return Err(ApiError::bad_request(format!(
            "tasks must hold 1 to {MAX_SPAWN_MANY} entries, not {}",
            tasks.len()
        )));
    }
    // Creations run side by side (each waits for its store commit, and the
    // store commits them together), started and answered in list order.
    let creations = tasks
        .into_iter()
        .enumerate()
        .map(|(index, entry)| async move {
            let parsed = serde_json::from_value::<SpawnArgs>(entry).map_err(|e| {
                ApiError::bad_request(format!("tasks[{index}]: invalid arguments: {e}"))
            });
            match parsed {
                Ok(args) => spawn_one(state, caller, args).await,
                Err(error) => Err(error),
            }
        });
    let outcomes: Vec<_> = stream::iter(creations)
        .buffered(CREATE_CONCURRENCY)
        .collect()
        .await;
    let results: Vec<SpawnResult> = outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Ok(spawned) => SpawnResult {
                ok: true,
                task_id: Some(spawned.task_id),
                status: Some(spawned.status),
                error: None,
                code: None,
            },
            Err(error) => SpawnResult {
                ok: false,
                task_id: None,
                status: None,
                error: Some(error.message().to_owned()),
                code: Some(error.code().as_str().to_owned()),
            },
        })
        .collect();
    let created = results
        .iter()
        .filter_map(|r| r.task_id.as_deref())
        .collect::<std::collections::HashSet<_>>()
        .len();
    structured(&SpawnedMany { results, created })
}

/// Cancels a task; one another cluster node holds through that node's
/// cancel route, with the caller's own bearer.
pub(super) async fn cancel(
    state: &AppState,
    caller: &Caller,
    bearer: Option<&str>,
    args: CancelArgs,
) -> Outcome {
    let id = task_id(&args.task_id)?;
    caller.check(state, Verb::CancelTask)?;
    if let Some(bearer) = bearer {
        let call = PeerCall {
            method: Method::POST,
            path: format!("/v1/tasks/{id}/cancel"),
            bearer,
            body: Some(json!({ "reason": args.reason }).to_string().into_bytes()),
        };
        if let Some(answer) = cluster::call_owner(state, &Subject::Task(id), call).await {
            return cancelled(answer?);
        }
    }
    let task = tasks::cancel_by(state, caller, id, args.reason).await?;
    cancelled(serde_json::to_value(task).map_err(|e| ApiError::internal(&e))?)
}

/// The answer of `cancel`: the task with its values cut as `task` cuts
/// them (docs/mcp.md, Tools).
fn cancelled(mut task: Value) -> Outcome {
    bound_task_within(&mut task, MAX_ANSWER_BYTES);
    structured(&Cancelled { task })
}
