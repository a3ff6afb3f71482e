//! Delegated attempts resumed at recovery (docs/tasks.md, Recovery): the worker is the
//! SubAgent out there, announced again through the agent's stack with a
//! fresh handle, and its Final arrives over HTTP.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Joined, Minted, Prepared, attempt_span};
use crate::Engine;
use crate::ids::{AttemptId, WorkerId};
use crate::live::TaskCell;
use crate::outcome::Stopped;
use crate::spawn::{Worker, WorkerCredential, WorkerError};
use crate::store::WriteOp;

/// A worker that lives outside this process (a resumed delegated
/// SubAgent): it completes when a Final is posted for its attempt.
#[derive(Debug)]
struct RemoteWorker {
    id: WorkerId,
    cancel: CancellationToken,
    engine: Engine,
    attempt: AttemptId,
}

#[async_trait::async_trait]
impl Worker for RemoteWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        tokio::select! {
            _ = self.engine.posted_final(self.attempt) => Ok(()),
            _ = self.cancel.cancelled() => Err(WorkerError::Cancelled),
        }
    }
}

impl Engine {
    /// Drives a delegated attempt resumed at recovery, inside the attempt's
    /// span: its worker is the SubAgent out there, whose Final arrives over
    /// HTTP.
    pub(crate) async fn dispatch_resumed(
        &self,
        cell: Arc<TaskCell>,
        attempt: u32,
        cancel: CancellationToken,
    ) {
        let span = {
            let state = cell.lock();
            attempt_span(state.task.id, Some(attempt), &state.task.agent)
        };
        self.resumed_pipeline(cell, attempt, cancel)
            .instrument(span)
            .await;
    }

    async fn resumed_pipeline(&self, cell: Arc<TaskCell>, attempt: u32, cancel: CancellationToken) {
        // Asked once, outside the task's lock.
        let agent = cell.lock().task.agent.clone();
        let placement = self.placement(&cell, &agent);
        let ctx = {
            let state = cell.lock();
            let lease_deadline_ms = state.run.as_ref().map_or(0, |r| r.lease_deadline_ms);
            super::ctx_for(&state.task, attempt, lease_deadline_ms, placement.delegated)
        };
        let p = Prepared {
            ctx,
            cancel,
            started: Instant::now(),
        };
        // Announce the attempt again through its stack with a fresh handle:
        // a `spawn` frame that never reached the MainAI is delivered now
        // (MainAIs ignore a spawn for a (task, attempt) they already run).
        // Without a stack, wait for the SubAgent's Final alone.
        let joined = match (placement.stack, self.reissue(&cell, p.ctx.id).await) {
            (Ok(stack), Ok(credential)) => {
                let minted = Minted {
                    credential: Ok(credential),
                    durable: None,
                };
                self.spawn_and_join(&cell, &p, minted, stack).await
            }
            (link, credential) => {
                if let Err(error) = link {
                    tracing::warn!(task_id = %p.ctx.id.task, %error, "cannot relink a resumed attempt; waiting for its SubAgent");
                }
                if let Err(error) = credential {
                    tracing::warn!(task_id = %p.ctx.id.task, %error, "cannot reissue a credential; waiting for its SubAgent");
                }
                let worker = Box::new(RemoteWorker {
                    id: WorkerId::new(),
                    cancel: CancellationToken::new(),
                    engine: self.clone(),
                    attempt: p.ctx.id,
                });
                self.join(&cell, &p, worker).await
            }
        };
        if matches!(joined, Joined::Stopped(Stopped::Interrupted)) {
            self.release_slot(&agent);
            return;
        }
        self.decide(&cell, p, joined).await;
    }

    /// A new token and handle for an open attempt, durable before use.
    async fn reissue(
        &self,
        cell: &Arc<TaskCell>,
        id: AttemptId,
    ) -> Result<WorkerCredential, crate::EngineError> {
        let verbs = cell
            .lock()
            .run
            .as_ref()
            .map(|r| r.verbs.clone())
            .unwrap_or_default();
        let (credential, digest, record) = self.mint(id, &verbs)?;
        if let Some(run) = cell.lock().run.as_mut().filter(|r| r.attempt == id.n) {
            run.token_exp_secs = credential.expires_secs();
        }
        self.inner
            .ledger
            .submit_and_wait(vec![WriteOp::PutHandle { digest, record }], Vec::new())
            .await?;
        Ok(credential)
    }
}
