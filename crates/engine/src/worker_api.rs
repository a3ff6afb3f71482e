//! The worker side of the engine (docs/protocol.md, Worker routes): authenticate a bearer (token or
//! `wh-` handle) through its verification, then fetch the prompt, append output, post the
//! result, or heartbeat — each with the binding and fence checks of step 7
//! and the late-write rules (docs/tasks.md, Late writes).

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use swarmd_output_store::{ContentRef, OutputEvent};
use tokio::time::Instant;

use crate::auth::TokenAuthority;
use crate::auth::{MAX_TOKEN_BYTES, TokenError, WorkerHandle, fingerprint, looks_like_handle};
use crate::clock::Clock;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::gate::{Role, Verb};
use crate::held::Held;
use crate::ids::{AttemptId, TaskId};
use crate::ledger::Ledger;
use crate::live::TaskState;
use crate::metrics::EngineStats;
use crate::output::Appends;
use crate::store::WriteOp;
use crate::task::Task;

pub(crate) mod post_result;

/// A verified worker credential: the (task, attempt) it is bound to.
#[derive(Debug, Clone)]
pub struct WorkerAuth {
    /// The attempt the credential is bound to.
    pub attempt: AttemptId,
    /// Unix seconds when the credential expires.
    pub exp_secs: u64,
    /// Whether the bearer was a `wh-` handle rather than a token.
    pub via_handle: bool,
    /// First 12 hex of SHA-256 of the bearer: the only form ever logged.
    pub fingerprint: String,
}

/// What a worker is asked to do: its task's prompt and the attempt's deadline.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub agent: String,
    pub system: Option<String>,
    pub prompt: String,
    pub input: Option<Value>,
    /// The lease deadline (unix ms).
    pub lease_deadline_ms: u64,
}

impl Prompt {
    fn of(task: &Task, lease_deadline_ms: u64) -> Prompt {
        Prompt {
            agent: task.agent.clone(),
            system: task.system.clone(),
            prompt: task.prompt.clone(),
            input: task.input.clone(),
            lease_deadline_ms,
        }
    }
}

/// A result to post: `POST /v1/worker/result` or `/v1/worker/submit`.
#[derive(Debug, Clone)]
pub struct ResultPost {
    pub task_id: Option<TaskId>,
    pub attempt: Option<u32>,
    pub value: Value,
    pub ok: bool,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body, to tell a replay from a conflict.
    pub body_digest: [u8; 32],
}

/// The answer to a posted result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultAck {
    pub task_id: TaskId,
    pub attempt: u32,
    pub accepted: bool,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatAck {
    /// The new lease deadline (unix ms).
    pub deadline: u64,
    /// A fresh token, when the old one had less than a third of its TTL left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When the credential (and its handle) now expires (unix seconds).
    pub handle_expires: u64,
}

/// The verbs of a worker credential: the leaf verbs, plus `spawn_task` for
/// agents whose configuration allows sub-tasks (docs/tasks.md, Sub-tasks).
pub(crate) fn worker_verbs(allow_subtasks: bool) -> Vec<Verb> {
    let mut verbs = crate::gate::WORKER_LEAF_VERBS.to_vec();
    if allow_subtasks {
        verbs.push(Verb::SpawnTask);
    }
    verbs
}

/// SHA-256 of a request body.
pub fn body_digest(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// What the worker-side operations reach of the engine: the held tasks
/// and their handles, the ledger, the token authority, the clock and the
/// configuration and the counters; output is appended through the
/// `Appends` they make.
pub(crate) struct Workers<'a> {
    pub held: &'a Held,
    pub ledger: &'a Ledger,
    pub tokens: &'a TokenAuthority,
    pub clock: &'a dyn Clock,
    pub config: &'a EngineConfig,
    pub stats: &'a EngineStats,
}

impl<'a> Workers<'a> {
    /// The handles appending this attempt's output needs.
    pub(crate) fn appends(&self) -> Appends<'a> {
        Appends {
            held: self.held,
            ledger: self.ledger,
            stats: self.stats,
            limit: self.config.max_output_bytes_per_attempt,
        }
    }

    /// A worker token for (task, attempt) carrying `verbs`, valid for the
    /// configured worker TTL.
    pub(crate) fn mint_worker_token(
        &self,
        id: AttemptId,
        verbs: &[Verb],
    ) -> Result<(crate::auth::SecretToken, u64), EngineError> {
        let AttemptId {
            task: task_id,
            n: attempt,
        } = id;
        let iat = self.clock.now_secs();
        let exp = iat.saturating_add(self.config.worker_token_ttl_secs);
        let claims = crate::auth::Claims {
            sub: format!("worker-of-{task_id}"),
            role: Role::Worker,
            verbs: verbs.to_vec(),
            task: Some(task_id),
            attempt: Some(attempt),
            sid: None,
            iat,
            exp,
            jti: crate::auth::Claims::random_jti(),
        };
        let token = self
            .tokens
            .mint(&claims)
            .map_err(EngineError::Unauthorized)?;
        Ok((token, exp))
    }

    fn authenticate_handle(&self, bearer: &str, verb: Verb) -> Result<WorkerAuth, EngineError> {
        let handle = WorkerHandle::parse(bearer).map_err(EngineError::Unauthorized)?;
        let record = self
            .held
            .handles()
            .get(&handle.digest())
            .cloned()
            .ok_or(EngineError::Unauthorized(TokenError::UnknownHandle))?;
        let leeway = self.tokens.config().leeway_secs;
        if self.clock.now_secs() >= record.exp_secs.saturating_add(leeway) {
            return Err(EngineError::HandleExpired);
        }
        if !record.verbs.contains(&verb) || !crate::gate::allowed(Role::Worker, verb) {
            return Err(EngineError::Forbidden);
        }
        Ok(WorkerAuth {
            attempt: AttemptId::new(record.task_id, record.attempt),
            exp_secs: record.exp_secs,
            via_handle: true,
            fingerprint: handle.fingerprint(),
        })
    }

    /// The task the request names must be the credential's (step 7).
    fn bind(auth: &WorkerAuth, requested: Option<TaskId>) -> Result<TaskId, EngineError> {
        match requested {
            Some(t) if t != auth.attempt.task => Err(EngineError::TaskMismatch),
            _ => Ok(auth.attempt.task),
        }
    }

    /// Extends the lease when `attempt` is the open one; returns the deadline
    /// (unix ms). A superseded or decided attempt's time is up: now.
    fn touch(&self, state: &mut TaskState, attempt: u32) -> u64 {
        let now_ms = self.clock.now_ms();
        match state.run.as_mut() {
            Some(run) if run.attempt == attempt && run.open => {
                run.extend_lease(Instant::now(), now_ms);
                run.lease_deadline_ms
            }
            _ => now_ms,
        }
    }

    /// Checks the fence and extends the lease; returns the task's session.
    fn open_for_write(
        &self,
        task_id: TaskId,
        attempt: u32,
    ) -> Result<Option<crate::ids::SessionId>, EngineError> {
        let cell = self.held.cell(task_id)?;
        let mut state = cell.lock();
        state.check_open(attempt)?;
        self.touch(&mut state, attempt);
        Ok(state.task.session)
    }

    /// The error for a result whose body names attempt `named` while its
    /// credential is for `credential`: superseded when the credential's
    /// attempt is no longer the task's current one, a bad request when it is.
    fn attempt_mismatch(&self, task_id: TaskId, credential: u32, named: u32) -> EngineError {
        let Ok(cell) = self.held.cell(task_id) else {
            return EngineError::TaskTerminal;
        };
        let current = cell.lock().task.attempt;
        if current == credential {
            EngineError::BadRequest(format!(
                "the body names attempt {named}, the credential is for attempt {credential}"
            ))
        } else {
            EngineError::AttemptSuperseded {
                attempt: credential,
                current,
            }
        }
    }
}

impl Workers<'_> {
    pub(crate) fn authenticate_worker(
        &self,
        bearer: &str,
        verb: Verb,
    ) -> Result<WorkerAuth, EngineError> {
        if bearer.len() > MAX_TOKEN_BYTES {
            return Err(EngineError::Unauthorized(TokenError::TooLong));
        }
        if looks_like_handle(bearer) {
            return self.authenticate_handle(bearer, verb);
        }
        let claims = self.tokens.verify_for(bearer, verb).map_err(|e| match e {
            TokenError::Forbidden(_) => EngineError::Forbidden,
            other => EngineError::Unauthorized(other),
        })?;
        match (claims.role, claims.task, claims.attempt) {
            (Role::Worker, Some(task_id), Some(attempt)) => Ok(WorkerAuth {
                attempt: AttemptId::new(task_id, attempt),
                exp_secs: claims.exp,
                via_handle: false,
                fingerprint: fingerprint(bearer),
            }),
            _ => Err(EngineError::Forbidden),
        }
    }

    pub(crate) fn handle_task(&self, bearer: &str) -> Option<TaskId> {
        let handle = WorkerHandle::parse(bearer).ok()?;
        self.held.handles().get(&handle.digest()).map(|r| r.task_id)
    }

    pub(crate) async fn fetch_prompt(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
    ) -> Result<Prompt, EngineError> {
        let task_id = Workers::bind(auth, task)?;
        if let Some(cell) = self.held.live.get(&task_id) {
            let mut state = cell.lock();
            let deadline = self.touch(&mut state, auth.attempt.n);
            return Ok(Prompt::of(&state.task, deadline));
        }
        // A task no longer live: its prompt, with its end as the deadline.
        let t = self.ledger.stored_task(task_id).await?;
        Ok(Prompt::of(&t, t.finished_ms.unwrap_or(t.updated_ms)))
    }

    pub(crate) async fn worker_output(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
        events: Vec<OutputEvent>,
    ) -> Result<u64, EngineError> {
        let task_id = Workers::bind(auth, task)?;
        if events.is_empty() {
            return Err(EngineError::BadRequest("no output events".into()));
        }
        if events
            .iter()
            .any(|e| matches!(e, OutputEvent::Final { .. }))
        {
            return Err(EngineError::BadRequest(
                "a final is posted with /v1/worker/result or /v1/worker/submit".into(),
            ));
        }
        if let Some(problem) = events.iter().find_map(OutputEvent::out_of_bounds) {
            return Err(EngineError::BadRequest(problem));
        }
        // Only the output store names files (the blobs it spills): a worker's
        // path could point readers at any file of the host.
        if events
            .iter()
            .any(|e| matches!(e.content(), Some(ContentRef::FileRef { .. })))
        {
            return Err(EngineError::BadRequest(
                "file_ref content is created by the daemon only; post the value inline".into(),
            ));
        }
        let session = self.open_for_write(task_id, auth.attempt.n)?;
        let records = self
            .appends()
            .append_and_publish(auth.attempt, session, "worker", events)
            .await?;
        Ok(records.last().map_or(0, |r| r.seq))
    }

    pub(crate) async fn heartbeat(
        &self,
        auth: &WorkerAuth,
        task: Option<TaskId>,
    ) -> Result<HeartbeatAck, EngineError> {
        let task_id = Workers::bind(auth, task)?;
        let ttl = self.config.worker_token_ttl_secs;
        let now_secs = self.clock.now_secs();
        let (deadline, current_exp, verbs) = {
            let cell = self.held.cell(task_id)?;
            let mut state = cell.lock();
            state.check_open(auth.attempt.n)?;
            let deadline = self.touch(&mut state, auth.attempt.n);
            let run = state.run.as_ref().ok_or(EngineError::TaskTerminal)?;
            // A token's holder renews by its own token's expiry: a token
            // minted for it whose answer it never got (the connection
            // dropped) must not stop it from getting another. A handle's
            // expiry is the attempt's, moved with every renewal.
            let current_exp = if auth.via_handle {
                run.token_exp_secs.max(auth.exp_secs)
            } else {
                auth.exp_secs
            };
            (deadline, current_exp, run.verbs.clone())
        };
        let remaining = current_exp.saturating_sub(now_secs);
        if remaining * 3 >= ttl {
            return Ok(HeartbeatAck {
                deadline,
                token: None,
                handle_expires: current_exp,
            });
        }
        let (token, expires_secs) = self.mint_worker_token(auth.attempt, &verbs)?;
        let ops = self.extend_handles(auth.attempt, expires_secs);
        self.held.with_run(task_id, auth.attempt.n, |run| {
            run.token_exp_secs = expires_secs
        });
        self.ledger.submit_and_wait(ops, Vec::new()).await?;
        Ok(HeartbeatAck {
            deadline,
            token: Some(token.expose().to_owned()),
            handle_expires: expires_secs,
        })
    }

    /// Moves the expiry of every handle of the attempt to at least
    /// `exp_secs` (a SubAgent may hold one from before a restart as well as
    /// the one announced since); returns their writes.
    fn extend_handles(&self, id: AttemptId, exp_secs: u64) -> Vec<WriteOp> {
        let mut handles = self.held.handles();
        handles
            .digests_of(id)
            .into_iter()
            .filter_map(|digest| {
                let record = handles.get_mut(&digest)?;
                record.exp_secs = record.exp_secs.max(exp_secs);
                Some(WriteOp::PutHandle {
                    digest,
                    record: record.clone(),
                })
            })
            .collect()
    }

    pub(crate) async fn refresh_credential(
        &self,
        id: AttemptId,
        old: &crate::spawn::WorkerCredential,
    ) -> Result<crate::spawn::WorkerCredential, EngineError> {
        let AttemptId {
            task: task_id,
            n: attempt,
        } = id;
        let verbs = {
            let cell = self.held.cell(task_id)?;
            let state = cell.lock();
            state.check_open(attempt)?;
            state
                .run
                .as_ref()
                .map(|r| r.verbs.clone())
                .unwrap_or_default()
        };
        let handle = WorkerHandle::parse(old.handle()).map_err(EngineError::Unauthorized)?;
        let known = self
            .held
            .handles()
            .get(&handle.digest())
            .is_some_and(|r| r.task_id == task_id && r.attempt == attempt);
        if !known {
            return Err(EngineError::HandleExpired);
        }
        let (token, expires_secs) = self.mint_worker_token(id, &verbs)?;
        let ops = self.extend_handles(id, expires_secs);
        self.held
            .with_run(task_id, attempt, |run| run.token_exp_secs = expires_secs);
        self.ledger.submit_and_wait(ops, Vec::new()).await?;
        Ok(crate::spawn::WorkerCredential::new(
            token.expose().to_owned(),
            old.handle().to_owned(),
            expires_secs,
        ))
    }
}
