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
//!
//! The same read tells what an attempt a restart interrupted left
//! ([`Restart`], docs/tasks.md, Restarts): the attempt after it resumes
//! that session in that checkout, on that branch.

use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent, OutputRecord};

use crate::error::EngineError;
use crate::held::Held;
use crate::ids::TaskId;
use crate::ledger::Ledger;
pub use crate::resume::{Restart, Resume};
use crate::task::{AttemptRecord, Task, TaskSpec};

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

impl Task {
    /// The restart attempt `attempt` resumes: set only for the attempt
    /// right after the one a restart interrupted.
    pub fn restart_for(&self, attempt: u32) -> Option<&Restart> {
        self.restart
            .as_ref()
            .filter(|restart| restart.attempt.checked_add(1) == Some(attempt))
    }

    /// The CLI session attempt `attempt` resumes: after a restart the
    /// interrupted attempt's, else the continued task's.
    pub fn resume_session(&self, attempt: u32) -> Option<String> {
        match self.restart_for(attempt) {
            Some(restart) => Some(restart.session_id.clone()),
            None => self.resume.as_ref()?.session_id.clone(),
        }
    }

    /// How many of attempts 1 to `attempt` count against
    /// `policy.max_attempts`: those a restart interrupted and the next
    /// attempt resumed do not.
    pub fn counted_attempts(&self, attempt: u32) -> u32 {
        attempt.saturating_sub(self.restarts)
    }
}

/// What reading a finished task's leavings reaches of the engine: the held
/// tasks and the ledger's stores. Nothing here writes.
pub(crate) struct Continuations<'a> {
    pub held: &'a Held,
    pub ledger: &'a Ledger,
}

impl Continuations<'_> {
    /// The task, live or stored.
    async fn task(&self, id: TaskId) -> Result<Option<Task>, EngineError> {
        if let Some(cell) = self.held.live.get(&id) {
            return Ok(Some(cell.lock().task.clone()));
        }
        Ok(self.ledger.store.task(id).await?)
    }

    /// Checks a `continue_from` request against the task it names
    /// (`from`) and completes `spec`: the agent defaults to the previous
    /// task's. A task a session owns (`spec.session`) continues only that
    /// session's tasks: another session's is answered as an unknown task,
    /// so no session resumes another's CLI conversation or branch, or
    /// learns that the task exists; a task no session owns (the admin's)
    /// may continue any.
    /// `worker` is the task of the worker creating a sub-task: it may
    /// continue only its own sub-tasks, the only tasks it knows of.
    ///
    /// # Errors
    /// `NotFound` for an unknown task or another session's; `TaskNotFinished`
    /// for one not terminal; `BadRequest` for another agent's task;
    /// `Forbidden` for a worker continuing a task that is not its sub-task.
    pub(crate) async fn continuing(
        &self,
        from: TaskId,
        spec: &mut TaskSpec,
        worker: Option<TaskId>,
    ) -> Result<Resume, EngineError> {
        let previous = self
            .task(from)
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
        self.resume_of(&previous).await
    }

    /// What `previous` (terminal) left for a continuation to resume.
    async fn resume_of(&self, previous: &Task) -> Result<Resume, EngineError> {
        self.left_by(previous.id, previous.attempt).await
    }

    /// What attempt `attempt` of `task` left: the session it reported, the
    /// branch and head its `worktree` artifact names.
    async fn left_by(&self, id: TaskId, attempt: u32) -> Result<Resume, EngineError> {
        let mut resume = Resume {
            attempt,
            ..Resume::default()
        };
        if attempt == 0 {
            return Ok(resume);
        }
        let task = id.as_uuid();
        let outputs = &self.ledger.outputs;
        let last = outputs.last_seq(task, attempt).await?;
        let tail = outputs
            .tail(task, attempt, last.saturating_sub(SCAN as u64), SCAN)
            .await?;
        read_tail(&tail, id, &mut resume);
        if resume.session_id.is_none() && last > SCAN as u64 {
            let head = outputs.tail(task, attempt, 0, SCAN).await?;
            resume.session_id = head.iter().find_map(init_session);
        } else if resume.session_id.is_none() {
            resume.session_id = tail.iter().find_map(init_session);
        }
        Ok(resume)
    }

    /// The CLI session `attempt` of `task` reported, from its output, else
    /// from the usage recorded with it.
    pub(crate) async fn session_of(
        &self,
        task: &Task,
        attempt: &AttemptRecord,
    ) -> Result<Option<String>, EngineError> {
        let left = self.left_by(task.id, attempt.attempt).await?;
        Ok(left.session_id.or_else(|| {
            attempt
                .usage
                .session_id
                .clone()
                .filter(|id| valid_session_id(id))
        }))
    }

    /// What the attempt after `attempt` of `task`, which a restart
    /// interrupted, resumes: its session and its checkout's branch. `None`
    /// when it reported no session or recorded no `worktree` artifact (its
    /// own, or for an attempt resumed in an earlier attempt's checkout,
    /// that checkout's, which recovery records on the earlier attempt).
    pub(crate) async fn restart_of(
        &self,
        task: &Task,
        attempt: &AttemptRecord,
    ) -> Result<Option<Restart>, EngineError> {
        let n = attempt.attempt;
        let worktree = task.restart_for(n).map_or(n, |restart| restart.worktree);
        let Some(session_id) = self.session_of(task, attempt).await? else {
            return Ok(None);
        };
        let mut left = self.left_by(task.id, n).await?;
        if left.branch.is_none() && worktree != n {
            left = self.left_by(task.id, worktree).await?;
        }
        Ok(left.branch.map(|branch| Restart {
            attempt: n,
            worktree,
            session_id,
            branch,
            head: left.head,
        }))
    }

    /// What `task`'s last attempt left (`Engine::left_by_task`).
    pub(crate) async fn left_by_task(&self, task: &Task) -> Result<Resume, EngineError> {
        let id = task.id;
        let mut left = self.left_by(id, task.attempt).await?;
        if left.session_id.is_none() && task.attempt > 0 {
            let attempts = self.ledger.store.attempts(id).await?;
            left.session_id = attempts
                .iter()
                .rfind(|a| a.attempt == task.attempt)
                .and_then(|a| a.usage.session_id.clone())
                .filter(|id| valid_session_id(id));
        }
        Ok(left)
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
                let value = match content {
                    ContentRef::Inline { value } => Some(value),
                    _ => None,
                };
                let named = value
                    .and_then(|value| value.get("branch")?.as_str())
                    .filter(|branch| valid_branch(branch));
                resume.branch = Some(
                    named.map_or_else(|| Resume::branch_of(task, resume.attempt), str::to_owned),
                );
                resume.head = value
                    .and_then(|value| value.get("head")?.as_str())
                    .filter(|head| is_commit(head))
                    .map(str::to_owned);
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

/// A branch name as the worktree module makes them: 1 to 255 bytes of
/// printable ASCII without spaces, not starting with `-`.
fn valid_branch(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_graphic())
}

/// A full commit id, SHA-1 or SHA-256, in lowercase hex.
fn is_commit(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
#[path = "continuation_tests.rs"]
mod tests;
