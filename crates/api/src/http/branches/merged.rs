//! The branches of merge agents' tasks (docs/branches.md, Acting on a
//! merge's branch): named in each passed task's result (the merge record),
//! diffed from git between the commits it records, applied only when the
//! merge did not stop at a conflict.

use serde_json::Value;
use swarmd_engine::ErrorCode;
use swarmd_engine::task::Task;
use swarmd_git::worktree::branches::BranchError;

use super::{LocalAgent, Refused, TaskDiff, refusal, strings};
use crate::app::AppState;
use crate::http::error::ApiError;

/// The branches merge task `task` made, as its result names them: the new
/// branch and a conflict's work branch.
pub(super) fn merge_branches(task: &Task) -> Vec<String> {
    let Some(record) = merge_record(task) else {
        return Vec::new();
    };
    [&record["branch"], &record["conflict"]["work_branch"]]
        .into_iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The merge record a passed merge task's result holds.
fn merge_record(task: &Task) -> Option<&Value> {
    task.result
        .as_ref()
        .filter(|result| result.ok && result.value["branch"].is_string())
        .map(|result| &result.value)
}

/// Merge task `task`'s record, or `404` saying why there is none.
fn merge_record_of(task: &Task) -> Result<&Value, ApiError> {
    merge_record(task).ok_or_else(|| {
        ApiError::coded(
            ErrorCode::NotFound,
            format!(
                "merge task {} made no branch: it has not passed (status {})",
                task.id,
                task.status()
            ),
        )
    })
}

/// Agent `agent`'s repository and base when it is a merge agent.
pub(super) fn merge_agent(state: &AppState, agent: &str) -> Option<LocalAgent> {
    let config = state.config.agents.get(agent)?;
    LocalAgent::of(agent, &config.kind).filter(|local| local.merge)
}

/// The diff from a merge's base to the head it made, read from git (the
/// commits a merge record names do not change).
pub(super) async fn merge_diff(
    state: &AppState,
    local: &LocalAgent,
    task: &Task,
) -> Result<TaskDiff, ApiError> {
    let record = merge_record_of(task)?;
    let text = |field: &str| record[field].as_str().unwrap_or_default().to_owned();
    let (base, head) = (text("base"), text("head"));
    let changes = match state.branches.changes(&local.repo, &base, &head).await {
        Ok(changes) => changes,
        Err(BranchError::Git(_))
            if state.branches.commit_of(&local.repo, &head).await.is_none() =>
        {
            return Err(ApiError::not_found(format!(
                "commit {head} of merge task {}: the repository no longer has it",
                task.id
            )));
        }
        Err(error) => return Err(refusal(error).error),
    };
    Ok(TaskDiff {
        task_id: task.id.to_string(),
        agent: task.agent.clone(),
        attempt: task.attempt,
        branch: text("branch"),
        base,
        head,
        files: changes.files,
        files_truncated: changes.files_truncated,
        diff: changes.diff,
        diff_truncated: changes.diff_truncated,
    })
}

/// The branch merge task `task` made, when it holds every branch the task
/// was given: a merge that stopped at a conflict is refused (`409`, naming
/// the files), as applying it would apply only the branches before it.
pub(super) fn merged_branch(task: &Task) -> Result<String, Refused> {
    let record = merge_record_of(task)?;
    let branch = record["branch"].as_str().unwrap_or_default().to_owned();
    let conflict = &record["conflict"];
    if conflict.is_object() {
        let files = strings(&conflict["files"]);
        return Err(Refused {
            error: ApiError::coded(
                ErrorCode::BranchConflict,
                format!(
                    "merge task {} stopped at a conflict with {}: {branch} holds only what \
                     merged before it; apply the branch that resolved it, or merge {branch} \
                     with git",
                    task.id,
                    conflict["branch"].as_str().unwrap_or("a branch"),
                ),
            ),
            files,
        });
    }
    Ok(branch)
}
