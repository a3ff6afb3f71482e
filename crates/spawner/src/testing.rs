//! Test support: recording layers and spawners, a recording `AttemptHost`
//! to test a layer without an engine, and an engine over memory stores that
//! runs a given stack for one agent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_engine::event::Event;
use swarmd_engine::ids::{AttemptId, SessionId, TaskId, WorkerId};
use swarmd_engine::store::SessionKind;
use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskSpec};
pub(crate) use swarmd_engine::testing::engine_running;
use swarmd_engine::testing::{StaticResolver, memory_engine};
use swarmd_engine::{
    AgentProfile, Attempt, AttemptHost, Ctx, Engine, EngineConfig, Route, SpawnError,
    SpawnerAdapter, SpawnerResolver, Worker, WorkerCredential, WorkerError,
};
use swarmd_output_store::{OutputEvent, OutputRecord};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::layers::OPERATOR_DELEGATE;
use crate::operator::{
    LiveSession, SessionDirectory, SpawnChannel, SpawnFrame, SpawnReceipt, SpawnReply,
};
use crate::stack::{SpawnerLayer, wrap_join};

pub(crate) use swarmd_git::testing::git;
mod mock_host;

pub(crate) use mock_host::MockHost;

/// A shared, ordered log of calls.
pub(crate) type CallLog = Arc<Mutex<Vec<String>>>;

pub(crate) fn call_log() -> CallLog {
    Arc::new(Mutex::new(Vec::new()))
}

pub(crate) fn calls(log: &CallLog) -> Vec<String> {
    log.lock().unwrap().clone()
}

fn push(log: &CallLog, entry: String) {
    log.lock().unwrap().push(entry);
}

/// A layer that records `NAME spawn` on the way in and `NAME join` when its
/// worker's completion passes through it.
#[derive(Debug)]
pub(crate) struct RecordingLayer {
    pub name: String,
    pub log: CallLog,
}

impl RecordingLayer {
    pub(crate) fn arc(name: &str, log: &CallLog) -> Arc<dyn SpawnerLayer> {
        Arc::new(RecordingLayer {
            name: name.to_owned(),
            log: Arc::clone(log),
        })
    }
}

impl SpawnerLayer for RecordingLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(Recording {
            name: self.name.clone(),
            log: Arc::clone(&self.log),
            inner,
        })
    }
}

#[derive(Debug)]
struct Recording {
    name: String,
    log: CallLog,
    inner: Arc<dyn SpawnerAdapter>,
}

#[async_trait]
impl SpawnerAdapter for Recording {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        push(&self.log, format!("{} spawn", self.name));
        let worker = self.inner.spawn(attempt).await?;
        let (log, name) = (Arc::clone(&self.log), self.name.clone());
        Ok(wrap_join(worker, move |joined| async move {
            push(&log, format!("{name} join"));
            joined
        }))
    }
}

/// What a [`FinalSpawner`] worker does.
#[derive(Debug, Clone)]
pub(crate) enum Act {
    /// Appends this Final and completes.
    Final(Value, bool),
    /// Waits, then appends this Final (cancellable).
    After(Duration, Value, bool),
    /// Completes without a Final.
    Nothing,
    /// The worker fails with this reason.
    Fail(String),
    /// Fails to spawn.
    Refuse(String),
}

/// A base spawner that records `base spawn` / `base join` and acts out `act`;
/// it also keeps every `Ctx` it was handed.
#[derive(Debug)]
pub(crate) struct FinalSpawner {
    pub act: Act,
    pub log: CallLog,
    pub seen: Mutex<Vec<Ctx>>,
}

impl FinalSpawner {
    pub(crate) fn arc(act: Act, log: &CallLog) -> Arc<FinalSpawner> {
        Arc::new(FinalSpawner {
            act,
            log: Arc::clone(log),
            seen: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn contexts(&self) -> Vec<Ctx> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl SpawnerAdapter for FinalSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        self.seen.lock().unwrap().push(attempt.ctx);
        push(&self.log, "base spawn".into());
        if let Act::Refuse(reason) = &self.act {
            return Err(SpawnError::Failed(reason.clone()));
        }
        Ok(Box::new(ActWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            host: attempt.host,
            act: self.act.clone(),
            log: Arc::clone(&self.log),
        }))
    }
}

#[derive(Debug)]
struct ActWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    act: Act,
    log: CallLog,
}

#[async_trait]
impl Worker for ActWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        let result = match self.act.clone() {
            Act::Final(value, ok) => append(&*self.host, value, ok).await,
            Act::After(wait, value, ok) => tokio::select! {
                () = tokio::time::sleep(wait) => append(&*self.host, value, ok).await,
                () = self.cancel.cancelled() => Err(WorkerError::Cancelled),
            },
            Act::Nothing | Act::Refuse(_) => Ok(()),
            Act::Fail(reason) => Err(WorkerError::Failed(reason)),
        };
        push(&self.log, "base join".into());
        result
    }
}

async fn append(host: &dyn AttemptHost, value: Value, ok: bool) -> Result<(), WorkerError> {
    host.record_output("test", vec![OutputEvent::inline_final(value, ok)])
        .await
        .map(|_| ())
        .map_err(|e| WorkerError::Failed(e.to_string()))
}

/// An attempt of a fresh task of `agent`, hosted by a [`MockHost`]: a layer
/// under test is handed it with no engine behind it.
pub(crate) fn mock_attempt(agent: &str) -> (Attempt, Arc<MockHost>) {
    let spec = TaskSpec {
        agent: agent.to_owned(),
        prompt: "do it".to_owned(),
        ..TaskSpec::default()
    };
    let task = Task::new(TaskId::new(), spec, Default::default(), 0, 1_000);
    let host = Arc::new(MockHost::new(task, 1));
    let id = host.id();
    let attempt = Attempt {
        ctx: Ctx {
            id,
            agent: agent.to_owned(),
            layers: Vec::new(),
            session: None,
            operator_sid: None,
            lease_deadline_ms: 61_000,
            delegated: false,
            long_hold_warn_secs: 0,
            continued_from: None,
            resume_session: None,
            meta: serde_json::Map::new(),
        },
        credential: WorkerCredential::new("swc1.test".into(), "wh-test".into(), 61),
        host: host.clone(),
    };
    (attempt, host)
}

/// Spawns a task of `agent` with `policy` and waits for it to finish.
pub(crate) async fn run_task(engine: &Engine, agent: &str, policy: PolicyOverrides) -> Task {
    let spec = TaskSpec {
        agent: agent.to_owned(),
        prompt: "do it".to_owned(),
        policy,
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    engine
        .wait_task(task.id, Duration::from_secs(3600))
        .await
        .unwrap()
}

/// Every event of the engine's log, in order.
pub(crate) async fn events(engine: &Engine) -> Vec<Event> {
    engine
        .events_after(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.event)
        .collect()
}

/// Every output record of one attempt.
pub(crate) async fn outputs(engine: &Engine, task: TaskId, attempt: u32) -> Vec<OutputRecord> {
    engine
        .outputs()
        .tail(task.as_uuid(), attempt, 0, 10_000)
        .await
        .unwrap()
}

/// A directory of fake sessions, by id and by claimed role name.
#[derive(Debug, Default)]
pub(crate) struct FakeDirectory {
    sessions: Mutex<Vec<(Vec<String>, LiveSession)>>,
}

impl FakeDirectory {
    /// Adds a live session holding `roles`.
    pub(crate) fn add(&self, roles: &[&str], info: LiveSession) {
        let roles = roles.iter().map(|r| (*r).to_owned()).collect();
        self.sessions.lock().unwrap().push((roles, info));
    }
}

impl SessionDirectory for FakeDirectory {
    fn session(&self, sid: &SessionId) -> Option<LiveSession> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .find(|(_, i)| i.sid == *sid)
            .map(|(_, i)| i.clone())
    }

    fn by_role(&self, role: &str) -> Option<LiveSession> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .find(|(roles, _)| roles.iter().any(|r| r == role))
            .map(|(_, i)| i.clone())
    }

    /// The first MainAI-kind session added.
    fn least_loaded_main_ai(&self) -> Option<LiveSession> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .find(|(_, i)| i.kind.takes_hooks())
            .map(|(_, i)| i.clone())
    }
}

/// A session of `kind` with nothing attached.
pub(crate) fn session(kind: SessionKind) -> LiveSession {
    LiveSession {
        sid: SessionId::new(),
        kind,
        hooks: None,
        senior: None,
        spawn_channel: None,
    }
}

/// A fixed resolver that delegates as the daemon's does: when the task
/// names `operator_delegate` and its session has a spawn channel.
#[derive(Debug)]
struct DirectoryResolver {
    inner: StaticResolver,
    sessions: Arc<dyn SessionDirectory>,
}

impl SpawnerResolver for DirectoryResolver {
    fn profile(&self, agent: &str, layers: &[String]) -> Result<AgentProfile, SpawnError> {
        self.inner.profile(agent, layers)
    }

    fn link(&self, agent: &str, layers: &[String]) -> Result<Arc<dyn SpawnerAdapter>, SpawnError> {
        self.inner.link(agent, layers)
    }

    fn delegated(&self, task: Route<'_>) -> bool {
        task.layers.iter().any(|l| l == OPERATOR_DELEGATE)
            && task
                .session
                .and_then(|sid| self.sessions.session(&sid))
                .is_some_and(|s| s.spawn_channel.is_some())
    }
}

/// An engine over memory stores whose resolver delegates through
/// `directory`; `agents` maps names to stacks (built with the same
/// directory).
pub(crate) fn engine_with_directory(
    agents: Vec<(&str, SpawnerKind, Arc<dyn SpawnerAdapter>)>,
    directory: Arc<dyn SessionDirectory>,
) -> Engine {
    let inner = agents
        .into_iter()
        .fold(StaticResolver::new(), |r, (name, kind, stack)| {
            r.with(name, kind, None, stack)
        });
    let resolver = DirectoryResolver {
        inner,
        sessions: directory,
    };
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

/// Spawns a task owned by `session` and returns it at once.
pub(crate) async fn spawn_owned(
    engine: &Engine,
    agent: &str,
    session: Option<SessionId>,
    policy: PolicyOverrides,
) -> Task {
    let spec = TaskSpec {
        agent: agent.to_owned(),
        prompt: "do it".to_owned(),
        session,
        policy,
        ..TaskSpec::default()
    };
    engine.create_task(spec).await.unwrap()
}

/// An operator channel that keeps every frame and the reply senders.
#[derive(Debug, Default)]
pub(crate) struct FakeChannel {
    pub frames: Mutex<Vec<SpawnFrame>>,
    pub replies: Mutex<Vec<Option<oneshot::Sender<SpawnReply>>>>,
    pub cancels: Mutex<Vec<(String, String)>>,
    arrived: Notify,
}

impl FakeChannel {
    /// Waits for the `n`-th frame (from 0) and returns it.
    pub(crate) async fn frame(&self, n: usize) -> SpawnFrame {
        loop {
            let notified = self.arrived.notified();
            if let Some(frame) = self.frames.lock().unwrap().get(n) {
                return frame.clone();
            }
            notified.await;
        }
    }

    /// Replies to the `n`-th frame.
    pub(crate) fn reply(&self, n: usize, reply: SpawnReply) {
        let sender = self.replies.lock().unwrap()[n].take().unwrap();
        sender.send(reply).unwrap();
    }

    /// Drops the reply sender of the `n`-th frame, as a closed session does.
    pub(crate) fn drop_reply(&self, n: usize) {
        self.replies.lock().unwrap()[n].take();
    }
}

#[async_trait]
impl SpawnChannel for FakeChannel {
    async fn spawn(&self, frame: SpawnFrame) -> Result<SpawnReceipt, SpawnError> {
        let (tx, rx) = oneshot::channel();
        let req_id = {
            let mut frames = self.frames.lock().unwrap();
            frames.push(frame);
            format!("r-{}", frames.len())
        };
        self.replies.lock().unwrap().push(Some(tx));
        self.arrived.notify_waiters();
        Ok(SpawnReceipt { req_id, reply: rx })
    }

    fn cancel(&self, req_id: &str, _attempt: AttemptId, reason: &str) {
        self.cancels
            .lock()
            .unwrap()
            .push((req_id.to_owned(), reason.to_owned()));
    }
}

/// Posts a result over the worker API with `handle`, as a SubAgent would.
pub(crate) async fn post_with_handle(engine: &Engine, handle: &str, value: Value, ok: bool) {
    let auth = engine
        .authenticate_worker(handle, swarmd_engine::gate::Verb::PostResult)
        .unwrap();
    let post = swarmd_engine::ResultPost {
        task_id: None,
        attempt: None,
        value,
        ok,
        idempotency_key: None,
        body_digest: swarmd_engine::body_digest(b"test"),
    };
    engine.post_result(&auth, post).await.unwrap();
}
