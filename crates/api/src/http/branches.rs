//! Branch routes (docs/branches.md): the branches coding tasks leave, as a
//! person acts on them. `GET /v1/branches` lists an agent's (or every
//! local worktree and merge agent's) branches with their task; `GET
//! /v1/tasks/{id}/diff` is the diff its latest attempt recorded; `POST
//! /v1/tasks/{id}/apply` applies its branch to a branch the caller names;
//! `POST /v1/branches/prune` deletes the branches of finished tasks that a
//! base holds or that finished long enough ago.
//!
//! A merge agent's tasks have branches too: the one each merge made and a
//! conflict's work branch, named in the task's result (the merge record),
//! listed, shown (the diff from the merge's base to its head, read from
//! git), applied and, when swarmd named them (`swarmd/`), pruned like an
//! attempt's.
//!
//! Reading takes `read_task` (and `read_output` for a diff) and acting
//! `spawn_task`, from the admin or an operator session (a role token never
//! acts); a session sees and acts on only its own tasks' branches
//! (`views::Reader`). Only agents whose worktrees this daemon adds (process
//! and operator agents with `worktree`) and merge agents have branches
//! here: a pool's are in its own repository. The git work is the
//! spawner's (`worktree::branches`), with its rules: the checked-out branch
//! is left alone unless asked, a conflict changes nothing.

use std::path::PathBuf;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::error::EngineError;
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::Task;
use swarmd_engine::{ErrorCode, detached};
use swarmd_git::worktree::branches::{ApplyMode, ApplyRequest, BranchError, BranchState};
use swarmd_git::worktree::naming::BranchTask;
use swarmd_git::worktree::{self, naming};
use swarmd_output_store::{ContentRef, OutputEvent};
use swarmd_wire::ErrorBody;

use super::tasks::{page, unknown};
use super::views::Reader;
use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Json, NoQuery, Path, Query};
use merged::{merge_agent, merge_branches, merge_diff, merge_title, merged_branch};
use swarmd_config::AgentKind;

mod merged;

/// The most recent tasks of an agent whose branches are matched.
const TASKS_SCANNED: usize = 1000;
/// Records read from the end of an attempt's output for its artifact.
const TAIL: usize = 64;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/branches", get(list))
        .route("/v1/branches/prune", post(prune))
        .route("/v1/tasks/{id}/diff", get(diff))
        .route("/v1/tasks/{id}/apply", post(apply))
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this agent's branches [default: every agent with a local
    /// worktree, and every merge agent].
    #[serde(default, deserialize_with = "super::extract::empty_as_none")]
    pub agent: Option<String>,
}

/// `GET /v1/branches`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BranchList {
    pub(crate) branches: Vec<BranchView>,
}

/// One swarmd branch with its task.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct BranchView {
    pub(crate) name: String,
    pub agent: String,
    pub(crate) task_id: String,
    /// The attempt that made it.
    pub(crate) attempt: u32,
    /// The task's status.
    pub(crate) status: String,
    /// The task's prompt's first line, bounded; for a merge, what it did
    /// (`sequence merge of 3 branches`).
    pub(crate) title: String,
    /// The commit it is at.
    pub(crate) head: String,
    /// What it is compared with: the agent's `worktree.base`, or a merge
    /// agent's `base`.
    pub(crate) base: String,
    /// Commits on it the base lacks.
    pub(crate) ahead: u64,
    /// Whether the base holds it.
    pub(crate) merged: bool,
    /// Its head's commit time, unix milliseconds.
    pub(crate) committed_ms: u64,
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<BranchList>, ApiError> {
    Ok(Json(
        list_branches(&state, &caller, query.agent.as_deref()).await?,
    ))
}

/// The caller's tasks' branches, newest commit first.
pub async fn list_branches(
    state: &AppState,
    caller: &Caller,
    agent: Option<&str>,
) -> Result<BranchList, ApiError> {
    caller.check(state, Verb::ReadTask)?;
    let branches = found(state, caller, agent)
        .await?
        .into_iter()
        .map(|found| found.view)
        .collect();
    Ok(BranchList { branches })
}

/// A listed branch with where it is and its task.
struct Found {
    view: BranchView,
    repo: PathBuf,
    task: Task,
}

async fn found(
    state: &AppState,
    caller: &Caller,
    agent: Option<&str>,
) -> Result<Vec<Found>, ApiError> {
    let git = &state.branches;
    let mut all = Vec::new();
    for LocalAgent {
        name,
        repo,
        base,
        merge,
    } in local_agents(state, agent)?
    {
        // The caller's tasks first: only their branches are counted.
        let filter = TaskFilter {
            agent: Some(name.clone()),
            limit: TASKS_SCANNED,
            ..TaskFilter::default()
        };
        let tasks = page(state, caller, filter).await?.tasks;
        let listed = if merge {
            let named: Vec<(String, BranchTask, u32)> = tasks
                .iter()
                .flat_map(|task| {
                    merge_branches(task)
                        .into_iter()
                        .map(|branch| (branch, BranchTask::Full(task.id.to_string()), task.attempt))
                })
                .collect();
            git.list_named(&repo, &base, &named).await
        } else {
            let ids: Vec<String> = tasks.iter().map(|t| t.id.to_string()).collect();
            let mine = |task: &BranchTask| ids.iter().any(|id| task.is(id));
            git.list_where(&repo, &base, mine).await
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) if agent.is_none() => {
                tracing::debug!(agent = %name, %error, "branches not listed");
                continue;
            }
            Err(error) => return Err(git_error(&error)),
        };
        for branch in listed {
            let Some(task) = tasks.iter().find(|t| branch.task.is(&t.id.to_string())) else {
                continue;
            };
            let mut view = view_of(&name, &base, task, branch);
            if merge {
                // A merge step's prompt is its request as JSON: say what
                // the merge did instead.
                view.title = merge_title(task);
            }
            all.push(Found {
                view,
                repo: repo.clone(),
                task: task.clone(),
            });
        }
    }
    all.sort_by_key(|found| std::cmp::Reverse(found.view.committed_ms));
    Ok(all)
}

fn view_of(agent: &str, base: &str, task: &Task, branch: BranchState) -> BranchView {
    BranchView {
        name: branch.name,
        agent: agent.to_owned(),
        task_id: task.id.to_string(),
        attempt: branch.attempt,
        status: task.status().to_string(),
        title: naming::subject(&task.prompt),
        head: branch.head,
        base: base.to_owned(),
        ahead: branch.ahead,
        merged: branch.merged,
        committed_ms: branch.committed_ms,
    }
}

/// An agent whose branches are in a repository of this daemon's host.
struct LocalAgent {
    name: String,
    repo: PathBuf,
    /// What its branches are compared with.
    base: String,
    /// A merge agent: its branches are named in its tasks' results.
    merge: bool,
}

impl LocalAgent {
    /// `config`'s repository and base, for an agent whose worktrees this
    /// daemon adds or a merge agent.
    fn of(name: &str, kind: &AgentKind) -> Option<LocalAgent> {
        let (repo, base, merge) = match kind {
            AgentKind::Merge(merge) => (
                merge.repo.clone(),
                merge
                    .base
                    .clone()
                    .unwrap_or_else(|| swarmd_git::merge::DEFAULT_BASE.to_owned()),
                true,
            ),
            other => {
                let tree = other.worktree()?;
                (tree.repo.clone(), tree.base.clone(), false)
            }
        };
        Some(LocalAgent {
            name: name.to_owned(),
            repo,
            base,
            merge,
        })
    }
}

/// The agents whose branches are on this daemon's host (worktree agents
/// and merge agents): `agent` alone when named.
fn local_agents(state: &AppState, agent: Option<&str>) -> Result<Vec<LocalAgent>, ApiError> {
    let agents = &state.config.agents;
    if let Some(name) = agent {
        let config = agents
            .get(name)
            .ok_or_else(|| ApiError::not_found(format!("agent {name}")))?;
        let local = LocalAgent::of(name, &config.kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "agent `{name}` has no branches on this daemon's host (a process or operator \
                 agent with `worktree`, or a merge agent); a pool's branches are in the pool's \
                 repository"
            ))
        })?;
        return Ok(vec![local]);
    }
    Ok(agents
        .iter()
        .filter_map(|(name, config)| LocalAgent::of(name, &config.kind))
        .collect())
}

fn git_error(error: &dyn std::fmt::Display) -> ApiError {
    ApiError::internal(error)
}

/// `GET /v1/tasks/{id}/diff`: the `worktree` artifact of the task's latest
/// attempt that recorded one, or for a merge task the diff from the merge's
/// base to the head it made, read from git.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskDiff {
    pub(crate) task_id: String,
    pub agent: String,
    pub(crate) attempt: u32,
    pub(crate) branch: String,
    /// The commit the branch started from.
    pub(crate) base: String,
    /// The commit the attempt (or merge) left it at.
    pub(crate) head: String,
    pub(crate) files: Vec<String>,
    pub(crate) files_truncated: bool,
    /// `git diff base head`, cut at the artifact's cap.
    pub(crate) diff: String,
    pub(crate) diff_truncated: bool,
}

async fn diff(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskDiff>, ApiError> {
    Ok(Json(task_diff(&state, &caller, id).await?))
}

/// The diff of task `id`'s latest attempt that recorded one.
pub async fn task_diff(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
) -> Result<TaskDiff, ApiError> {
    caller.check(state, Verb::ReadTask)?;
    // The diff is output: only for a caller who may read output.
    caller.check(state, Verb::ReadOutput)?;
    let task = read(state, caller, id).await?;
    if let Some(local) = merge_agent(state, &task.agent) {
        return merge_diff(state, &local, &task).await;
    }
    let (attempt, value) = recorded(state, &task).await?;
    let text = |field: &str| value[field].as_str().unwrap_or_default().to_owned();
    let files = strings(&value["files"]);
    Ok(TaskDiff {
        task_id: id.to_string(),
        agent: task.agent.clone(),
        attempt,
        branch: text("branch"),
        base: text("base"),
        head: text("head"),
        files,
        files_truncated: value["files_truncated"].as_bool().unwrap_or(false),
        diff: text("diff"),
        diff_truncated: value["diff_truncated"].as_bool().unwrap_or(false),
    })
}

/// The strings of a record's array (none when it is not one).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Task `id` in the caller's part.
async fn read(state: &AppState, caller: &Caller, id: TaskId) -> Result<Task, ApiError> {
    Reader::of(caller)
        .read(&state.engine, id)
        .await?
        .ok_or_else(|| unknown(id))
}

/// The latest attempt of `task` whose end recorded a `worktree` artifact
/// (by swarmd's producer, inline), with its value.
async fn recorded(state: &AppState, task: &Task) -> Result<(u32, Value), ApiError> {
    let outputs = state.engine.outputs();
    let uuid = task.id.as_uuid();
    for attempt in (1..=task.attempt).rev() {
        let last = outputs
            .last_seq(uuid, attempt)
            .await
            .map_err(|e| ApiError::from(EngineError::from(e)))?;
        let tail = outputs
            .tail(uuid, attempt, last.saturating_sub(TAIL as u64), TAIL)
            .await
            .map_err(|e| ApiError::from(EngineError::from(e)))?;
        let value = tail.iter().rev().find_map(|record| match &record.event {
            OutputEvent::Artifact {
                name,
                content: ContentRef::Inline { value },
            } if name == worktree::ARTIFACT && record.producer == worktree::PRODUCER => {
                Some(value.clone())
            }
            _ => None,
        });
        if let Some(value) = value {
            return Ok((attempt, value));
        }
    }
    Err(ApiError::coded(
        ErrorCode::NotFound,
        format!(
            "task {} has no worktree: none of its attempts recorded one",
            task.id
        ),
    ))
}

/// `POST /v1/tasks/{id}/apply` body.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    /// The branch to apply the task's branch to; made at its head when missing.
    pub into: String,
    /// `auto` (fast-forward when possible, else a merge commit), `ff` (only a
    /// fast-forward) or `merge` (always a merge commit) [default: auto].
    #[serde(default)]
    pub mode: ModeArg,
    /// Update `into` also where it is checked out (refused with uncommitted
    /// changes there) [default: false].
    #[serde(default)]
    pub checked_out: bool,
}

/// How the branch is applied.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeArg {
    #[default]
    Auto,
    Ff,
    Merge,
}

/// What `apply` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AppliedView {
    pub(crate) task_id: String,
    pub(crate) branch: String,
    pub(crate) into: String,
    /// `created`, `fast_forward`, `merge` or `up_to_date`.
    pub(crate) outcome: String,
    /// `into`'s head before, when it existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) before: Option<String>,
    /// `into`'s head now.
    pub(crate) head: String,
    /// The worktree `into` was updated in, when it is checked out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worktree: Option<String>,
}

/// A refused apply: the error, and the conflicting paths when it conflicts.
#[derive(Debug)]
pub struct Refused {
    pub error: ApiError,
    pub(crate) files: Vec<String>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Refused {
        Refused {
            error,
            files: Vec::new(),
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        if self.files.is_empty() {
            return self.error.into_response();
        }
        let body: ErrorBody =
            ErrorBody::new(self.error.code(), self.error.message()).with_files(self.files);
        (self.error.status(), Json(body)).into_response()
    }
}

async fn apply(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Path(id): Path<TaskId>,
    Json(body): Json<ApplyBody>,
) -> Result<Json<AppliedView>, Refused> {
    // Runs to its end whatever the client does: git runs with
    // `kill_on_drop`, and a handler dropped mid-merge would kill it and
    // leave its lock files in the user's repository.
    let applied =
        detached(async move { apply_task(&state, &caller, id, body).await.map_err(Refusal) })
            .await
            .map_err(|Refusal(refused)| refused)?;
    Ok(Json(applied))
}

/// A refusal that a detached verb can return (`swarmd_engine::detached`
/// turns a runtime shutting down into an engine error).
struct Refusal(Refused);

impl From<EngineError> for Refusal {
    fn from(error: EngineError) -> Refusal {
        Refusal(ApiError::from(error).into())
    }
}

/// The admin or an operator session, allowed `spawn_task`: who acts on branches.
fn check_actor(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    caller.check(state, Verb::SpawnTask)?;
    match caller {
        Caller::Admin | Caller::Operator(_) => Ok(()),
        Caller::Token { .. } => Err(ApiError::forbidden()),
    }
}

/// Applies finished task `id`'s branch as `body` asks.
pub async fn apply_task(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
    body: ApplyBody,
) -> Result<AppliedView, Refused> {
    check_actor(state, caller)?;
    let task = read(state, caller, id).await?;
    if !task.status().is_terminal() {
        let status = task.status();
        return Err(ApiError::coded(
            ErrorCode::TaskNotFinished,
            format!("task {id} is {status}: only a finished task's branch can be applied"),
        )
        .into());
    }
    let local = local_agents(state, Some(&task.agent))?
        .pop()
        .ok_or_else(|| ApiError::not_found(format!("agent {}", task.agent)))?;
    let (attempt, branch) = if local.merge {
        (task.attempt, merged_branch(state, &local, &task).await?)
    } else {
        let (attempt, value) = recorded(state, &task).await?;
        let branch = value["branch"]
            .as_str()
            .filter(|b| naming::is_swarmd_branch(b))
            .ok_or_else(|| ApiError::not_found(format!("the branch of task {id}")))?
            .to_owned();
        (attempt, branch)
    };
    let repo = local.repo;
    let subject = naming::subject(&task.prompt);
    let request = ApplyRequest {
        branch: branch.clone(),
        into: body.into.clone(),
        mode: match body.mode {
            ModeArg::Auto => ApplyMode::Auto,
            ModeArg::Ff => ApplyMode::FastForward,
            ModeArg::Merge => ApplyMode::Merge,
        },
        checked_out: body.checked_out,
        message: format!(
            "Merge {branch} into {}\n\n{subject}\n\nSwarmd-Task: {id}\nSwarmd-Attempt: {attempt}\n",
            body.into
        ),
    };
    let applied = state
        .branches
        .apply(&repo, &request)
        .await
        .map_err(refusal)?;
    tracing::info!(task = %id, %branch, into = %body.into, outcome = applied.outcome.as_str(), "branch applied");
    Ok(AppliedView {
        task_id: id.to_string(),
        branch,
        into: body.into,
        outcome: applied.outcome.as_str().to_owned(),
        before: applied.before,
        head: applied.head,
        worktree: applied.worktree.map(|w| w.display().to_string()),
    })
}

/// A git refusal as the caller reads it.
fn refusal(error: BranchError) -> Refused {
    let message = error.to_string();
    match error {
        BranchError::NoBranch(_) => ApiError::not_found(message).into(),
        BranchError::BadName(_) | BranchError::SwarmdTarget(_) => {
            ApiError::bad_request(message).into()
        }
        BranchError::Conflict { files, .. } => Refused {
            error: ApiError::coded(ErrorCode::BranchConflict, message),
            files,
        },
        BranchError::NotFastForward { .. }
        | BranchError::CheckedOut { .. }
        | BranchError::InWorktree { .. }
        | BranchError::AttemptCheckout { .. }
        | BranchError::Dirty { .. }
        | BranchError::Raced(_) => ApiError::coded(ErrorCode::BranchConflict, message).into(),
        BranchError::Git(error) => git_error(&error).into(),
    }
}

/// `POST /v1/branches/prune` body.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneBody {
    /// Only this agent's branches [default: every agent with a local
    /// worktree, and every merge agent].
    #[serde(default)]
    pub agent: Option<String>,
    /// Also branches of tasks that finished at least this many seconds ago,
    /// merged or not [default: merged ones only].
    #[serde(default)]
    pub(crate) older_than_secs: Option<u64>,
    /// List what would be deleted and delete nothing [default: false].
    #[serde(default)]
    pub(crate) dry_run: bool,
}

/// What `prune` deleted (or, dry, would delete) and what it left.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Pruned {
    pub(crate) dry_run: bool,
    pub(crate) pruned: Vec<BranchView>,
    /// Branches chosen but left, each with why.
    pub(crate) kept: Vec<KeptBranch>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct KeptBranch {
    pub(crate) name: String,
    pub(crate) reason: String,
}

async fn prune(
    State(state): State<AppState>,
    caller: Caller,
    _: NoQuery,
    Json(body): Json<PruneBody>,
) -> Result<Json<Pruned>, ApiError> {
    // Deletes refs one by one with git (`kill_on_drop`): a client that
    // goes away must not leave `packed-refs.lock` behind.
    let pruned = detached(async move { prune_branches(&state, &caller, body).await }).await?;
    Ok(Json(pruned))
}

/// Deletes the branches of the caller's finished tasks that their base
/// holds, or (with `older_than_secs`) whose task finished that long ago.
pub(crate) async fn prune_branches(
    state: &AppState,
    caller: &Caller,
    body: PruneBody,
) -> Result<Pruned, ApiError> {
    check_actor(state, caller)?;
    let now = now_ms();
    let old = |task: &Task| {
        body.older_than_secs.is_some_and(|secs| {
            task.finished_ms
                .is_some_and(|at| at.saturating_add(secs.saturating_mul(1000)) <= now)
        })
    };
    let git = &state.branches;
    let mut pruned = Vec::new();
    let mut kept = Vec::new();
    for found in found(state, caller, body.agent.as_deref()).await? {
        if !found.task.status().is_terminal() || !(found.view.merged || old(&found.task)) {
            continue;
        }
        // A merge's branch the task named outside `swarmd/` is the user's.
        if !naming::is_swarmd_branch(&found.view.name) {
            continue;
        }
        let outcome = if body.dry_run {
            git.deletable(&found.repo, &found.view.name).await
        } else {
            git.delete(&found.repo, &found.view.name, &found.view.head)
                .await
        };
        if let Err(error) = outcome {
            kept.push(KeptBranch {
                name: found.view.name,
                reason: error.to_string(),
            });
            continue;
        }
        pruned.push(found.view);
    }
    if !body.dry_run && !pruned.is_empty() {
        tracing::info!(branches = pruned.len(), "pruned swarmd branches");
    }
    Ok(Pruned {
        dry_run: body.dry_run,
        pruned,
        kept,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
