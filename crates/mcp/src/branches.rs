//! The tools that act on coding tasks' branches (docs/branches.md):
//! `branches` (an agent's swarmd branches with their tasks), `diff` (a
//! task's recorded diff, whole up to the artifact's cap, or a merge's) and
//! `apply` (a finished task's branch onto a branch the caller names), through the
//! branch routes' own functions, rules and caller's part.

use schemars::JsonSchema;
use serde::Deserialize;

use super::fanout::task_id;
use super::registry::{ToolEntry, entry};
use super::{Outcome, structured};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;
use swarmd_api::http::branches::{
    self, AppliedView, ApplyBody, BranchList, ListQuery, ModeArg, TaskDiff,
};

pub(super) fn tools() -> Vec<ToolEntry> {
    vec![
        entry::<ListQuery, BranchList>(
            "branches",
            "List the git branches coding tasks left (swarmd/t-<id>-<slug>/<attempt>) and merge \
             tasks made (swarmd/merge-<id>, or the name a merge was given), optionally of one \
             agent: each with its task, status, head, how many commits it is ahead of the \
             agent's base and whether the base holds it.",
            true,
            |call, args| Box::pin(list(call.state, call.caller, args)),
        ),
        entry::<TaskArgs, TaskDiff>(
            "diff",
            "Get a coding task's changes as its latest attempt recorded them, or a merge task's \
             (from its base to the head it made): branch, base, head, the files changed and the \
             unified diff.",
            true,
            |call, args| Box::pin(diff(call.state, call.caller, args)),
        ),
        entry::<ApplyArgs, AppliedView>(
            "apply",
            "Apply a finished coding or merge task's branch to the branch `into` (made at the task's head \
             when missing): a fast-forward when possible, else a merge commit (mode ff or merge \
             to insist). A branch checked out somewhere is left alone unless checked_out is true; \
             a conflict changes nothing and names the files. A merge that stopped at a conflict \
             is refused.",
            false,
            |call, args| Box::pin(apply(call.state, call.caller, args)),
        ),
    ]
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskArgs {
    /// The task (`T-…`).
    task_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplyArgs {
    /// The finished task (`T-…`) whose branch is applied.
    task_id: String,
    /// The branch to apply it to.
    into: String,
    /// `auto` (default), `ff` or `merge`.
    #[serde(default)]
    mode: ModeArg,
    /// Update `into` also where it is checked out (default false).
    #[serde(default)]
    checked_out: bool,
}

pub(super) async fn list(state: &AppState, caller: &Caller, args: ListQuery) -> Outcome {
    structured(&branches::list_branches(state, caller, args.agent.as_deref()).await?)
}

pub(super) async fn diff(state: &AppState, caller: &Caller, args: TaskArgs) -> Outcome {
    let id = task_id(&args.task_id)?;
    structured(&branches::task_diff(state, caller, id).await?)
}

pub(super) async fn apply(state: &AppState, caller: &Caller, args: ApplyArgs) -> Outcome {
    let id = task_id(&args.task_id)?;
    let body = ApplyBody {
        into: args.into,
        mode: args.mode,
        checked_out: args.checked_out,
    };
    match branches::apply_task(state, caller, id, body).await {
        Ok(applied) => structured(&applied),
        Err(refused) => Err(refused.error),
    }
}
