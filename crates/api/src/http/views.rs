//! The wire shapes of task reads and of the worker's prompt, built here from
//! what the engine returns (the engine keeps no HTTP-shaped types), and
//! `Reader`, the one rule of whose tasks a caller reads.

use serde::Serialize;
use serde_json::Value;
use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::store::TaskFilter;
use swarmd_engine::task::{AttemptRecord, Task};
use swarmd_engine::{Engine, EngineError, Prompt, WorkerAuth};

use crate::http::auth::Caller;

/// Whose tasks a caller reads (docs/security.md, Session scope): the admin
/// and role tokens (observer, senior) every task; an operator session only
/// the tasks it owns (sub-tasks inherit their parent's owner), the same
/// part of the event log `/v1/events` gives it. Every read of a task, its
/// attempts, output, result, events or audit records, over HTTP, MCP or the
/// WebSocket, asks this rule; a task outside the reader's part is answered
/// as an unknown task is (`404 not_found`), so a session learns nothing of
/// what another runs. Worker credentials read no task through these routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reader {
    /// The session whose part this is; `None`: everything.
    owner: Option<SessionId>,
}

impl Reader {
    /// The part of `caller`.
    pub fn of(caller: &Caller) -> Reader {
        Reader {
            owner: caller.session().map(|session| session.sid),
        }
    }

    /// The part of operator session `sid`.
    pub(crate) fn session(sid: SessionId) -> Reader {
        Reader { owner: Some(sid) }
    }

    /// Whether a record owned by `owner` (a task's session, an event's or
    /// an audit record's) is in this part.
    pub(crate) fn sees(self, owner: Option<SessionId>) -> bool {
        self.owner.is_none_or(|sid| owner == Some(sid))
    }

    /// `task` when it is in this part.
    pub(crate) fn task(self, task: Task) -> Option<Task> {
        self.sees(task.session).then_some(task)
    }

    /// Narrows a task listing to this part; `false` when the filter asks
    /// for another session's tasks, so the page is empty.
    pub(crate) fn narrow(self, filter: &mut TaskFilter) -> bool {
        let Some(sid) = self.owner else {
            return true;
        };
        match filter.session {
            Some(asked) => asked == sid,
            None => {
                filter.session = Some(sid);
                true
            }
        }
    }

    /// Reads task `id` in this part: `None` when there is no such task or
    /// it is not in the part, which the caller answers alike.
    pub async fn read(self, engine: &Engine, id: TaskId) -> Result<Option<Task>, EngineError> {
        Ok(engine.get_task(id).await?.and_then(|task| self.task(task)))
    }
}

/// A task with its attempts, as `GET /v1/tasks/{id}` serves it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskView {
    #[serde(flatten)]
    pub task: Task,
    pub attempts: Vec<AttemptRecord>,
}

impl TaskView {
    /// The task with its attempt records, or `None` when there is no such
    /// task in `reader`'s part.
    pub async fn read(
        engine: &Engine,
        reader: Reader,
        id: TaskId,
    ) -> Result<Option<TaskView>, EngineError> {
        let Some(task) = reader.read(engine, id).await? else {
            return Ok(None);
        };
        Ok(Some(TaskView::of(engine, task).await?))
    }

    /// `task` with its attempt records.
    pub(crate) async fn of(engine: &Engine, task: Task) -> Result<TaskView, EngineError> {
        let attempts = engine.attempts(task.id).await?;
        Ok(TaskView { task, attempts })
    }
}

/// `GET /v1/worker/prompt`.
#[derive(Debug, Clone, Serialize)]
pub struct PromptView {
    pub task_id: TaskId,
    pub attempt: u32,
    pub agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The lease deadline (unix ms).
    pub deadline: u64,
}

impl PromptView {
    /// The prompt of the credential's attempt.
    pub fn new(auth: &WorkerAuth, prompt: Prompt) -> PromptView {
        PromptView {
            task_id: auth.attempt.task,
            attempt: auth.attempt.n,
            agent: prompt.agent,
            system: prompt.system,
            prompt: prompt.prompt,
            input: prompt.input,
            deadline: prompt.lease_deadline_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_reads_its_own_part_and_the_admin_everything() {
        let (mine, theirs) = (SessionId::new(), SessionId::new());
        let session = Reader::session(mine);
        let admin = Reader::of(&Caller::Admin);
        assert!(session.sees(Some(mine)));
        assert!(!session.sees(Some(theirs)) && !session.sees(None));
        assert!(admin.sees(Some(theirs)) && admin.sees(None));

        // A listing is narrowed to the session's tasks, never widened.
        let mut filter = TaskFilter::default();
        assert!(session.narrow(&mut filter));
        assert_eq!(filter.session, Some(mine));
        let mut asked = TaskFilter {
            session: Some(theirs),
            ..TaskFilter::default()
        };
        assert!(!session.narrow(&mut asked));
        assert!(admin.narrow(&mut asked));
        assert_eq!(asked.session, Some(theirs));
        let mut everything = TaskFilter::default();
        assert!(admin.narrow(&mut everything));
        assert_eq!(everything.session, None);
    }
}
