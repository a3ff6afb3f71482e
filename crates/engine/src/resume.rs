//! What a task resumes, kept on its record: a continuation's previous
//! task's attempt (`Resume`) and a restart's interrupted attempt
//! (`Restart`). Plain data; `continuation` reads and applies them.

use serde::{Deserialize, Serialize};

use crate::ids::TaskId;

/// What a continuation resumes: read from the previous task's last attempt
/// when the continuation is created, and kept with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// The previous task's attempt this was read from (its last one).
    pub attempt: u32,
    /// The CLI session that attempt reported, when it reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The branch its `worktree` artifact names, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit that branch ended at, when the artifact says (inline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

impl Resume {
    /// The branch an attempt of `task` numbered `attempt` ran on when its
    /// `worktree` artifact does not name it: the id-only name
    /// (docs/tasks.md, Worktrees).
    pub fn branch_of(task: TaskId, attempt: u32) -> String {
        format!("swarmd/{task}-{attempt}")
    }
}

/// What the attempt after one a restart interrupted resumes (docs/tasks.md,
/// Restarts): read from the interrupted attempt when the daemon starts
/// again, and kept on its task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// The interrupted attempt; the attempt after it resumes it.
    pub attempt: u32,
    /// The attempt whose checkout it ran in, and the next one runs in
    /// again: itself, or the one an attempt resumed after an earlier
    /// restart ran in.
    pub worktree: u32,
    /// The CLI session it reported.
    pub session_id: String,
    /// The branch of its checkout, as its `worktree` artifact names it.
    pub branch: String,
    /// The commit that branch was at when the attempt was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// Whether a task's count of restarts is left out of its JSON (none yet).
pub(crate) fn no_restarts(restarts: &u32) -> bool {
    *restarts == 0
}
