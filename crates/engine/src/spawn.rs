//! The seam between the engine and whatever runs an attempt (docs/tasks.md,
//! Layers): the `SpawnerAdapter` and `Worker` traits, the `Attempt` a stack
//! is handed (its `Ctx`, the worker's credential and its `AttemptHost`), and
//! the `SpawnerResolver` that resolves and links an agent.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use std::time::Duration;

use swarmd_output_store::{OutputEvent, OutputRecord};

use crate::audit::AuditRecord;
use crate::error::EngineError;
pub use crate::error::{SpawnError, WorkerError};
use crate::event::Event;
use crate::ids::{AttemptId, SessionId, TaskId, WorkerId};
use crate::outcome::Verdict;
use crate::task::{ProcessGroupMark, SpawnerKind, Task, TaskSpec};

/// What one attempt is, handed down the stack. Layers may add to `meta`;
/// the worker's credential travels beside it in [`Attempt`], never in it.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub id: AttemptId,
    pub agent: String,
    /// Hint layers the task named (the agent's own come from its config).
    pub layers: Vec<String>,
    /// The session that owns the task, if any.
    pub session: Option<SessionId>,
    /// The session the task pins its operator attempts to, if any.
    pub operator_sid: Option<SessionId>,
    /// The lease deadline when the attempt started (unix ms).
    pub lease_deadline_ms: u64,
    /// Whether the attempt goes back to the owning session (the
    /// `operator_delegate` layer) instead of the agent's base spawner.
    /// Decided once, by [`SpawnerResolver::delegated`], before the attempt
    /// is recorded, so that the record names where it really runs; the layer
    /// follows it.
    pub delegated: bool,
    /// The task's `policy.long_hold_warn_secs` (0: no warning).
    pub long_hold_warn_secs: u64,
    /// The task this one continues (`continue_from`).
    pub continued_from: Option<TaskId>,
    /// The CLI session the continued task's last attempt reported, which
    /// this attempt resumes.
    pub resume_session: Option<String>,
    pub meta: Map<String, Value>,
}

/// One attempt as the engine hands it to a spawner stack: what it is, the
/// worker's credential, and the engine operations a layer or spawner may use
/// on it. A layer reads or changes `ctx`, keeps what its post-step needs
/// (usually a clone of `host`), and passes the attempt on.
#[derive(Debug)]
pub struct Attempt {
    pub ctx: Ctx,
    pub credential: WorkerCredential,
    pub host: Arc<dyn AttemptHost>,
}

/// The worker token and its short handle, bound to one (task, attempt).
/// `Debug` shows neither secret.
#[derive(Clone)]
pub struct WorkerCredential {
    token: String,
    handle: String,
    expires_secs: u64,
}

impl WorkerCredential {
    pub fn new(token: String, handle: String, expires_secs: u64) -> Self {
        WorkerCredential {
            token,
            handle,
            expires_secs,
        }
    }

    /// The `swc1` capability token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The `wh-` handle.
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// Unix seconds after which neither the token nor the handle is accepted.
    pub fn expires_secs(&self) -> u64 {
        self.expires_secs
    }
}

impl fmt::Debug for WorkerCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerCredential")
            .field("token", &"<redacted>")
            .field("handle", &"<redacted>")
            .field("expires_secs", &self.expires_secs)
            .finish()
    }
}

/// A running attempt. `join` is a completion signal only: results travel
/// through the output store.
#[async_trait]
pub trait Worker: Send + fmt::Debug {
    fn id(&self) -> WorkerId;
    /// Cancelling this token asks the worker to stop (process: SIGTERM to its
    /// group; operator: a `cancel` frame).
    fn cancel_token(&self) -> CancellationToken;
    async fn join(self: Box<Self>) -> Result<(), WorkerError>;
}

/// Starts attempts. Layers implement it by wrapping an inner adapter.
#[async_trait]
pub trait SpawnerAdapter: Send + Sync + fmt::Debug {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError>;
}

/// What admission and recovery need to know of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProfile {
    pub kind: SpawnerKind,
    /// At most this many attempts of the agent run at once.
    pub concurrency: Option<usize>,
    /// Whether its workers may spawn sub-tasks (docs/tasks.md, Sub-tasks).
    pub allow_subtasks: bool,
    /// Whether an attempt's credential leaves the daemon although the
    /// attempt ends with it (a remote agent's, handed to a pool): its
    /// record is then durable before the attempt is spawned, since a
    /// worker may present the credential to any node of a cluster, which
    /// knows it from the database alone.
    pub credential_leaves: bool,
}

/// The parts of a task that decide where its next attempt runs: what the
/// resolver reads of it, copied out of the task's lock so that the
/// resolver is asked outside it.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    pub agent: &'a str,
    pub layers: &'a [String],
    /// The session that owns the task.
    pub session: Option<SessionId>,
    /// The operator session a task is routed to, when its creator named one.
    pub operator_sid: Option<SessionId>,
}

/// Where one attempt runs, as the resolver answers once per attempt
/// (`SpawnerResolver::place`).
#[derive(Debug)]
pub struct Placement {
    /// The linked stack, or why there is none (the task then fails).
    pub stack: Result<Arc<dyn SpawnerAdapter>, SpawnError>,
    /// The agent's base spawner kind and whether its workers may spawn
    /// sub-tasks.
    pub profile: Result<AgentProfile, SpawnError>,
    /// Whether the attempt goes back to the session that owns the task.
    pub delegated: bool,
    /// Why the attempt cannot start now, when it cannot.
    pub unavailable: Option<String>,
}

/// Stages 1 and 2 of the pipeline (resolve, link); the engine runs stage 3.
pub trait SpawnerResolver: Send + Sync + fmt::Debug {
    /// Resolves the agent with these hint layers, failing for unknown agents
    /// or layers.
    fn profile(&self, agent: &str, layers: &[String]) -> Result<AgentProfile, SpawnError>;
    /// The linked stack for the agent and layers (cached by the implementor).
    fn link(&self, agent: &str, layers: &[String]) -> Result<Arc<dyn SpawnerAdapter>, SpawnError>;
    /// Whether the next attempt of `task` goes back to the session that owns
    /// it instead of its agent's base spawner. By default, never: the engine
    /// alone knows no sessions.
    fn delegated(&self, task: Route<'_>) -> bool {
        let _ = task;
        false
    }
    /// Why the next attempt of `task` cannot start now (the session that
    /// must take it is not there), or `None` when it can. The engine then keeps
    /// the task waiting without an attempt and asks again. By default,
    /// every attempt can start.
    fn unavailable(&self, task: Route<'_>) -> Option<String> {
        let _ = task;
        None
    }
    /// Everything placing one attempt needs, in the one call the engine
    /// makes per attempt, before the attempt is recorded and outside the
    /// task's lock: the stack, the profile, whether it is delegated and
    /// whether it can start now. By default, from the four methods above.
    fn place(&self, task: Route<'_>) -> Placement {
        let delegated = self.delegated(task);
        Placement {
            stack: self.link(task.agent, task.layers),
            profile: self.profile(task.agent, task.layers),
            delegated,
            unavailable: if delegated {
                None
            } else {
                self.unavailable(task)
            },
        }
    }
    /// Everything creating a task asks, in one call: the agent resolved
    /// with these hint layers (as `profile`), then the task's input checked
    /// against the agent's `input_schema`, if it has one. By default, every
    /// input passes.
    fn check_new(
        &self,
        agent: &str,
        layers: &[String],
        input: Option<&serde_json::Value>,
    ) -> Result<AgentProfile, SpawnError> {
        let _ = input;
        self.profile(agent, layers)
    }
    /// Kills what is left of an interrupted attempt's process group, if its
    /// leader is still the process that was recorded. Recovery calls it
    /// before the attempt is failed or retried. By default, nothing.
    fn reap_leftover(&self, group: &ProcessGroupMark) {
        let _ = group;
    }
}

/// The engine as one attempt's stack sees it. Every method is about the
/// attempt the host was made for, except the three that manage a child task
/// (`spawn_child`, `wait_task`, `cancel_task`), which the senior layer uses
/// to ask its question as a sub-task.
#[async_trait]
pub trait AttemptHost: Send + Sync + fmt::Debug {
    /// The attempt this host serves.
    fn id(&self) -> AttemptId;
    /// Now, in unix ms, on the engine's clock.
    fn now_ms(&self) -> u64;
    /// The attempt's task as it is now.
    async fn task(&self) -> Result<Task, EngineError>;
    /// Appends `events` to the attempt's tail as `producer`, and publishes
    /// them. Refused once the attempt is decided or superseded.
    async fn record_output(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError>;
    /// Appends `events`, none of them a Final, to the attempt's tail even
    /// once it is closed (`epilogue`): what the attempt left behind, such as
    /// its `worktree` artifact. By default, as `record_output`.
    async fn record_epilogue(
        &self,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        self.record_output(producer, events).await
    }
    /// The tail's last Final so far: the one that decides the attempt.
    async fn last_final(&self) -> Result<Option<OutputRecord>, EngineError>;
    /// Resolves once a worker posted a Final for the attempt over the worker
    /// API, or at once if it already has or the attempt is no longer current.
    async fn posted_final(&self);
    /// What the attempt's end decides, given how its worker's join ended:
    /// the engine's own rule (`outcome`), so a layer reports the task's
    /// outcome and no other.
    async fn verdict(&self, joined: &Result<(), WorkerError>) -> Verdict;
    /// Writes a durable audit record; its `ts_ms` is set here.
    fn audit(&self, record: AuditRecord);
    /// Publishes an event (durable, then broadcast, also to the task's session).
    fn publish(&self, event: Event);
    /// Records the host process group the attempt's worker runs in, so that
    /// recovery can stop it if the daemon dies first.
    fn record_process_group(&self, group: ProcessGroupMark);
    /// Creates a task whose parent is the attempt's task. Not fenced by the
    /// agent's `allow_subtasks`: that fence is for workers, not layers.
    async fn spawn_child(&self, spec: TaskSpec) -> Result<Task, EngineError>;
    /// Waits until a task is terminal or `timeout` passes; returns it either way.
    async fn wait_task(&self, id: TaskId, timeout: Duration) -> Result<Task, EngineError>;
    /// Cancels a task.
    async fn cancel_task(&self, id: TaskId, reason: Option<String>) -> Result<Task, EngineError>;
}
