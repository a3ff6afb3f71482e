//! Continuations (docs/tasks.md, Continuations): a task created with
//! `continue_from` resumes a finished task of the same agent. This module
//! holds the rules checked at creation and reads, once, what the new task's
//! attempts resume from the previous task's last attempt: the CLI session it
//! reported and the worktree branch it left.
//!
//! Both are read from that attempt's stored output: the session id from the
//! last `usage` progress note (a JSON object with `session_id`), else from
//! the first `init` note (`session <id>, …` or `thread <id>`); the branch
//! and head from the `worktree` artifact the worktree module records. Only
//! the last 64 records are searched for the first two and the first 64 for
//! the `init` note, so the read is bounded whatever the attempt wrote.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent, OutputRecord};

use crate::Engine;
use crate::error::EngineError;
use crate::ids::TaskId;
use crate::task::{Task, TaskSpec};

/// Name and producer of the artifact that records an attempt's worktree
/// (the spawner's `worktree::ARTIFACT`).
pub const WORKTREE_ARTIFACT: &str = "worktree";
/// Only the worktree module records as this producer; a worker cannot.
pub const WORKTREE_PRODUCER: &str = "worktree";
/// The progress stage of the usage note a CLI stream adapter writes.
pub const USAGE_STAGE: &str = "usage";
/// The progress stage naming a CLI's session at its start.
pub const INIT_STAGE: &str = "init";
/// Records read from each end of the previous attempt's output.
const SCAN: usize = 64;
/// The longest session id passed on; CLIs use UUIDs.
pub const MAX_SESSION_ID: usize = 128;

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
    /// The branch an attempt of `task` numbered `attempt` runs on
    /// (docs/tasks.md, Worktrees).
    pub fn branch_of(task: TaskId, attempt: u32) -> String {
        format!("swarmd/{task}-{attempt}")
    }
}

impl Engine {
    /// Checks a `continue_from` request against the task it names and
    /// completes `spec`: the agent defaults to the previous task's. A task
    /// a session owns (`spec.session`) continues only that session's tasks:
    /// another session's is answered as an unknown task, so no session
    /// resumes another's CLI conversation or branch, or learns that the
    /// task exists; a task no session owns (the admin's) may continue any.
    /// `worker` is the task of the worker creating a sub-task: it may
    /// continue only its own sub-tasks, the only tasks it knows of.
    ///
    /// # Errors
    /// `NotFound` for an unknown task or another session's; `TaskNotFinished`
    /// for one not terminal; `BadRequest` for another agent's task;
    /// `Forbidden` for a worker continuing a task that is not its sub-task.
    pub(crate) async fn continuing(
        &self,
        spec: &mut TaskSpec,
        worker: Option<TaskId>,
    ) -> Result<Option<Resume>, EngineError> {
        let Some(from) = spec.continue_from else {
            return Ok(None);
        };
        let previous = self
            .get_task(from)
            .await?
            .filter(|previous| spec.session.is_none() || previous.session == spec.session)
            .ok_or_else(|| EngineError::NotFound(format!("task {from} (continue_from)")))?;
        if worker.is_some() && previous.parent != worker {
            return Err(EngineError::Forbidden);
        }
        if !previous.status().is_terminal() {
            return Err(EngineError::TaskNotFinished {
                task: from,
                status: previous.status(),
            });
        }
        if spec.agent.is_empty() {
            spec.agent.clone_from(&previous.agent);
        } else if spec.agent != previous.agent {
            return Err(EngineError::BadRequest(format!(
                "continue_from names a task of agent `{}`, not `{}`",
                previous.agent, spec.agent
            )));
        }
        Ok(Some(self.resume_of(&previous).await?))
    }

    /// What `previous` (terminal) left for a continuation to resume.
    async fn resume_of(&self, previous: &Task) -> Result<Resume, EngineError> {
        let attempt = previous.attempt;
        let mut resume = Resume {
            attempt,
            ..Resume::default()
        };
        if attempt == 0 {
            return Ok(resume);
        }
        let task = previous.id.as_uuid();
        let outputs = &self.inner.outputs;
        let last = outputs.last_seq(task, attempt).await?;
        let tail = outputs
            .tail(task, attempt, last.saturating_sub(SCAN as u64), SCAN)
            .await?;
        read_tail(&tail, previous.id, &mut resume);
        if resume.session_id.is_none() && last > SCAN as u64 {
            let head = outputs.tail(task, attempt, 0, SCAN).await?;
            resume.session_id = head.iter().find_map(init_session);
        } else if resume.session_id.is_none() {
            resume.session_id = tail.iter().find_map(init_session);
        }
        Ok(resume)
    }
}

/// The last usage note's session and the last worktree artifact of `tail`.
fn read_tail(tail: &[OutputRecord], task: TaskId, resume: &mut Resume) {
    for record in tail.iter().rev() {
        match &record.event {
            OutputEvent::Progress {
                stage,
                note: Some(note),
            } if stage == USAGE_STAGE && resume.session_id.is_none() => {
                resume.session_id = serde_json::from_str::<Value>(note)
                    .ok()
                    .and_then(|usage| usage.get("session_id")?.as_str().map(str::to_owned))
                    .filter(|id| valid_session_id(id));
            }
            OutputEvent::Artifact { name, content }
                if name == WORKTREE_ARTIFACT
                    && record.producer == WORKTREE_PRODUCER
                    && resume.branch.is_none() =>
            {
                resume.branch = Some(Resume::branch_of(task, resume.attempt));
                if let ContentRef::Inline { value } = content {
                    resume.head = value
                        .get("head")
                        .and_then(Value::as_str)
                        .filter(|head| is_commit(head))
                        .map(str::to_owned);
                }
            }
            _ => {}
        }
    }
}

/// The session an `init` note names: `session <id>, …` (Claude, Gemini) or
/// `thread <id>` (Codex).
fn init_session(record: &OutputRecord) -> Option<String> {
    let OutputEvent::Progress {
        stage,
        note: Some(note),
    } = &record.event
    else {
        return None;
    };
    if stage != INIT_STAGE {
        return None;
    }
    let rest = note
        .strip_prefix("session ")
        .or_else(|| note.strip_prefix("thread "))?;
    let id = rest.split([',', ' ']).next()?;
    valid_session_id(id).then(|| id.to_owned())
}

/// A session id is passed to a child as one argument and one variable, so
/// it must be something no CLI can take for an option: 1 to
/// [`MAX_SESSION_ID`] ASCII letters, digits, `-`, `_`, `.`, `:`, not
/// starting with `-`.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A full commit id, SHA-1 or SHA-256, in lowercase hex.
fn is_commit(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
#[path = "continuation_tests.rs"]
mod tests;
