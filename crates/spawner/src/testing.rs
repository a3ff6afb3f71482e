//! Test support: recording layers and spawners, and an engine over memory
//! stores that runs a given stack for one agent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_engine::auth::{AuthorityConfig, Keyring, TokenAuthority};
use swarmd_engine::clock::{Clock, SystemClock};
use swarmd_engine::event::Event;
use swarmd_engine::ids::{SessionId, TaskId, WorkerId};
use swarmd_engine::operator::{
    OperatorBackend, OperatorDirectory, OperatorInfo, SessionKind, SpawnFrame, SpawnReceipt,
    SpawnReply,
};
use swarmd_engine::store::MemoryTaskStore;
use swarmd_engine::task::{PolicyOverrides, SpawnerKind, Task, TaskSpec};
use swarmd_engine::testing::{StaticResolver, memory_engine};
use swarmd_engine::{
    Ctx, Engine, EngineConfig, EngineParts, SpawnError, SpawnerAdapter, Worker, WorkerCredential,
    WorkerError,
};
use swarmd_output_store::{MemoryOutputStore, OutputEvent, OutputRecord};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::stack::{SpawnerLayer, wrap_join};

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
    async fn spawn(
        &self,
        engine: &Engine,
        ctx: Ctx,
        task_id: TaskId,
        attempt: u32,
        token: WorkerCredential,
    ) -> Result<Box<dyn Worker>, SpawnError> {
        push(&self.log, format!("{} spawn", self.name));
        let worker = self
            .inner
            .spawn(engine, ctx, task_id, attempt, token)
            .await?;
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
    async fn spawn(
        &self,
        engine: &Engine,
        ctx: Ctx,
        task_id: TaskId,
        attempt: u32,
        _token: WorkerCredential,
    ) -> Result<Box<dyn Worker>, SpawnError> {
        self.seen.lock().unwrap().push(ctx);
        push(&self.log, "base spawn".into());
        if let Act::Refuse(reason) = &self.act {
            return Err(SpawnError::Failed(reason.clone()));
        }
        Ok(Box::new(ActWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            engine: engine.clone(),
            task_id,
            attempt,
            act: self.act.clone(),
            log: Arc::clone(&self.log),
        }))
    }
}

#[derive(Debug)]
struct ActWorker {
    id: WorkerId,
    cancel: CancellationToken,
    engine: Engine,
    task_id: TaskId,
    attempt: u32,
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
            Act::Final(value, ok) => {
                append(&self.engine, self.task_id, self.attempt, value, ok).await
            }
            Act::After(wait, value, ok) => tokio::select! {
                () = tokio::time::sleep(wait) => append(&self.engine, self.task_id, self.attempt, value, ok).await,
                () = self.cancel.cancelled() => Err(WorkerError::Cancelled),
            },
            Act::Nothing | Act::Refuse(_) => Ok(()),
            Act::Fail(reason) => Err(WorkerError::Failed(reason)),
        };
        push(&self.log, "base join".into());
        result
    }
}

async fn append(
    engine: &Engine,
    task_id: TaskId,
    attempt: u32,
    value: Value,
    ok: bool,
) -> Result<(), WorkerError> {
    engine
        .record_output(
            task_id,
            attempt,
            "test",
            vec![OutputEvent::inline_final(value, ok)],
        )
        .await
        .map(|_| ())
        .map_err(|e| WorkerError::Failed(e.to_string()))
}

/// An engine over memory stores whose agent `agent` runs `stack`.
pub(crate) fn engine_running(agent: &str, stack: Arc<dyn SpawnerAdapter>) -> Engine {
    let resolver = StaticResolver::new().with(agent, SpawnerKind::InProcess, None, stack);
    memory_engine(Arc::new(resolver), EngineConfig::default())
}

/// Spawns a task of `agent` with `policy` and waits for it to finish.
pub(crate) async fn run_task(engine: &Engine, agent: &str, policy: PolicyOverrides) -> Task {
    let spec = TaskSpec {
        agent: agent.to_owned(),
        prompt: "do it".to_owned(),
        policy,
        ..TaskSpec::default()
    };
    let task = engine.spawn_task(spec).await.unwrap();
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
    sessions: Mutex<Vec<(Vec<String>, OperatorInfo)>>,
}

impl FakeDirectory {
    /// Adds a live session holding `roles`.
    pub(crate) fn add(&self, roles: &[&str], info: OperatorInfo) {
        let roles = roles.iter().map(|r| (*r).to_owned()).collect();
        self.sessions.lock().unwrap().push((roles, info));
    }
}

impl OperatorDirectory for FakeDirectory {
    fn session(&self, sid: &SessionId) -> Option<OperatorInfo> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .find(|(_, i)| i.sid == *sid)
            .map(|(_, i)| i.clone())
    }

    fn by_role(&self, role: &str) -> Option<OperatorInfo> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .find(|(roles, _)| roles.iter().any(|r| r == role))
            .map(|(_, i)| i.clone())
    }
}

/// A session of `kind` with nothing attached.
pub(crate) fn session(kind: SessionKind) -> OperatorInfo {
    OperatorInfo {
        sid: SessionId::new(),
        kind,
        hooks: None,
        senior: None,
        backend: None,
    }
}

/// An engine over memory stores with a session directory; `agents` maps
/// names to stacks.
pub(crate) fn engine_with_directory(
    agents: Vec<(&str, SpawnerKind, Arc<dyn SpawnerAdapter>)>,
    directory: Arc<dyn OperatorDirectory>,
) -> Engine {
    let resolver = agents
        .into_iter()
        .fold(StaticResolver::new(), |r, (name, kind, stack)| {
            r.with(name, kind, None, stack)
        });
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let tokens = TokenAuthority::new(
        Keyring::generate(),
        clock.clone(),
        AuthorityConfig::default(),
    );
    Engine::new(EngineParts {
        config: EngineConfig::default(),
        store: Arc::new(MemoryTaskStore::new()),
        outputs: Arc::new(MemoryOutputStore::new()),
        tokens: Arc::new(tokens),
        resolver: Arc::new(resolver),
        operators: directory,
        clock,
    })
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
    engine.spawn_task(spec).await.unwrap()
}

/// An operator backend that keeps every frame and the reply senders.
#[derive(Debug, Default)]
pub(crate) struct FakeBackend {
    pub frames: Mutex<Vec<SpawnFrame>>,
    pub replies: Mutex<Vec<Option<oneshot::Sender<SpawnReply>>>>,
    pub cancels: Mutex<Vec<(String, String)>>,
    arrived: Notify,
}

impl FakeBackend {
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
impl OperatorBackend for FakeBackend {
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

    fn cancel(&self, req_id: &str, _task_id: TaskId, _attempt: u32, reason: &str) {
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
