//! The branches of merge agents' tasks (docs/branches.md, Acting on a
//! merge's branch): named in each passed task's result (the merge record),
//! diffed from git between the commits it records, applied only when the
//! merge did not stop at a conflict.

use serde_json::Value;
use swarmd_engine::ErrorCode;
use swarmd_engine::task::Task;
use swarmd_git::worktree::naming;

use super::{LocalAgent, Refused, TaskDiff, strings};
use crate::app::AppState;
use crate::http::error::ApiError;

/// The branches merge task `task` made, as its result names them: the new
/// branch and a conflict's work branch, each only when it is the task's
/// own ([`owns`]).
pub(super) fn merge_branches(task: &Task) -> Vec<String> {
    let Some(record) = merge_record(task) else {
        return Vec::new();
    };
    [&record["branch"], &record["conflict"]["work_branch"]]
        .into_iter()
        .filter_map(Value::as_str)
        .filter(|name| owns(task, name))
        .map(str::to_owned)
        .collect()
}

/// Whether branch `name`, named by merge task `task`'s record, is the
/// task's to list, apply and (under `swarmd/`) prune: a name under
/// `swarmd/` only when it is the task's default, `swarmd/merge-<short
/// id>`, or that name's `-conflict` work branch. A merge keeps an existing
/// `into` already at its result, so a record naming any other `swarmd/`
/// name is not trusted to be the task's, whichever build wrote it (the
/// merge agent refuses such an `into`).
fn owns(task: &Task, name: &str) -> bool {
    if !name.starts_with("swarmd/") {
        return true;
    }
    let own = format!("swarmd/merge-{}", naming::short_id(&task.id.to_string()));
    name == own || name.strip_suffix("-conflict") == Some(own.as_str())
}

/// The merge record a passed merge task's result holds.
fn merge_record(task: &Task) -> Option<&Value> {
    task.result
        .as_ref()
        .filter(|result| result.ok && result.value["branch"].is_string())
        .map(|result| &result.value)
}

/// What a listed merge did: its strategy, how many branches its branch
/// holds, and the branch it stopped at.
pub(super) fn merge_title(task: &Task) -> String {
    let Some(record) = merge_record(task) else {
        return String::new();
    };
    // The merge agent says what it was asked and what it did; a record
    // written before it said so is told from what it applied.
    if let Some(summary) = record["summary"].as_str() {
        return naming::subject(summary);
    }
    let held = record["applied"].as_array().map_or(0, Vec::len);
    let strategy = record["strategy"].as_str().unwrap_or("a");
    let mut title = format!(
        "{strategy} merge of {held} branch{}",
        if held == 1 { "" } else { "es" }
    );
    if let Some(branch) = record["conflict"]["branch"].as_str() {
        title.push_str(&format!(", stopped at a conflict with {branch}"));
    }
    naming::subject(&title)
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
    for commit in [&base, &head] {
        if state
            .branches
            .commit_of(&local.repo, commit)
            .await
            .is_none()
        {
            return Err(ApiError::coded(
                ErrorCode::NotFound,
                format!(
                    "commit {commit} of merge task {}: the repository no longer has it",
                    task.id
                ),
            ));
        }
    }
    // Both are commits the repository has: a refusal now is the record's
    // fault or git's, never the caller's.
    let changes = state
        .branches
        .changes(&local.repo, &base, &head)
        .await
        .map_err(|error| ApiError::internal(&error))?;
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

/// The branch merge task `task` made, when it is the task's own, still at
/// the head the merge made (what `show` shows), and holds every branch the
/// task was given: a merge that stopped at a conflict is refused (`409`,
/// naming the files), as applying it would apply only the branches before
/// it.
pub(super) async fn merged_branch(
    state: &AppState,
    local: &LocalAgent,
    task: &Task,
) -> Result<String, Refused> {
    let record = merge_record_of(task)?;
    let branch = record["branch"].as_str().unwrap_or_default().to_owned();
    if !owns(task, &branch) {
        return Err(ApiError::coded(
            ErrorCode::NotFound,
            format!(
                "the branch of merge task {}: {branch} is not the task's own name",
                task.id
            ),
        )
        .into());
    }
    let recorded = record["head"].as_str().unwrap_or_default();
    match state.branches.head_of(&local.repo, &branch).await {
        None => {
            return Err(ApiError::coded(
                ErrorCode::NotFound,
                format!("the repository has no branch `{branch}` (pruned, or deleted by hand)"),
            )
            .into());
        }
        Some(now) if now != recorded => {
            return Err(ApiError::coded(
                ErrorCode::BranchConflict,
                format!(
                    "{branch} has moved since merge task {} made it (at {recorded}, now \
                     {now}); apply it with git if that is what you want",
                    task.id
                ),
            )
            .into());
        }
        Some(_) => {}
    }
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarmd_engine::ids::TaskId;
    use swarmd_engine::task::{Policy, TaskResult, TaskSpec};

    use super::*;

    /// A merge task whose result is `record` given the task's default
    /// branch name, passed or not; that name.
    fn merged(record: impl FnOnce(&str) -> Value, ok: bool) -> (Task, String) {
        let mut task = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 1);
        let own = format!("swarmd/merge-{}", naming::short_id(&task.id.to_string()));
        task.result = Some(TaskResult {
            value: record(&own),
            ok,
        });
        (task, own)
    }

    #[test]
    fn a_merge_owns_its_default_names_and_names_outside_swarmd() {
        let (task, own) = merged(
            |own| json!({"branch": own, "conflict": {"work_branch": format!("{own}-conflict")}}),
            true,
        );
        assert_eq!(
            merge_branches(&task),
            [own.clone(), format!("{own}-conflict")]
        );
        assert!(owns(&task, "team/merged"));
        for other in [
            "swarmd/merge-zzzzzzzz",
            "swarmd/t-1a2b3c4d-fix/1",
            "swarmd/x",
            &format!("{own}-other"),
        ] {
            assert!(!owns(&task, other), "{other}");
        }
        // Another task's swarmd/ name is not listed as this one's; a name
        // outside swarmd/ is.
        let (task, _) = merged(
            |_| json!({"branch": "swarmd/merge-zzzzzzzz", "conflict": {"work_branch": "team/work"}}),
            true,
        );
        assert_eq!(merge_branches(&task), ["team/work"]);
        // A failed merge names no branch.
        let (failed, _) = merged(|own| json!({"branch": own}), false);
        assert!(merge_branches(&failed).is_empty());
    }

    #[test]
    fn a_listed_merge_says_what_it_did() {
        let title = |record: Value| merge_title(&merged(|_| record, true).0);
        assert_eq!(
            title(json!({"branch": "m", "strategy": "sequence",
                         "applied": [{"branch": "a"}, {"branch": "b"}]})),
            "sequence merge of 2 branches"
        );
        assert_eq!(
            title(json!({"branch": "m", "strategy": "pick", "applied": [{"branch": "a"}]})),
            "pick merge of 1 branch"
        );
        assert_eq!(
            title(json!({"branch": "m", "strategy": "sequence", "applied": [],
                         "conflict": {"branch": "swarmd/t-1/1"}})),
            "sequence merge of 0 branches, stopped at a conflict with swarmd/t-1/1"
        );
        assert_eq!(
            title(
                json!({"branch": "m", "strategy": "pick", "applied": [{"branch": "a"}],
                         "summary": "pick 1 of 5 branches"})
            ),
            "pick 1 of 5 branches"
        );
    }
}
