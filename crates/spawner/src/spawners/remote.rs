//! The remote spawner (docs/tasks.md, Remote agents): an attempt queued for the worker pools of
//! its agent. The pool writes progress, outputs and the Final with the
//! attempt's own handle through the worker routes; this worker ends on the
//! first of: a Final posted, the pool's word that the run failed, or
//! cancellation (cancel and lease expiry), and then leaves the queue, so a
//! pool still holding it hears it is gone.

use std::sync::Arc;

use async_trait::async_trait;
use swarmd_engine::ids::WorkerId;
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker, WorkerError};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::task_of;
use crate::remote::{PoolEnd, RemoteJob, RemotePools, RemoteRun};
use swarmd_git::worktree::prior_work;

/// Queues each attempt of one remote agent on the daemon's [`RemotePools`].
#[derive(Debug)]
pub struct RemoteSpawner {
    pools: Arc<RemotePools>,
    run: RemoteRun,
}

impl RemoteSpawner {
    pub fn new(pools: Arc<RemotePools>, run: RemoteRun) -> RemoteSpawner {
        RemoteSpawner { pools, run }
    }
}

#[async_trait]
impl SpawnerAdapter for RemoteSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let Attempt {
            ctx,
            credential,
            host,
        } = attempt;
        let task = task_of(&*host).await?;
        let resume_from = prior_work(&task);
        let job = RemoteJob {
            attempt: ctx.id,
            agent: ctx.agent.clone(),
            credential,
            prompt: task.prompt,
            system: task.system,
            input: task.input,
            run: self.run,
            resume_from,
            continued_from: task.continued_from.map(|id| id.to_string()),
            resume_session: task.resume.and_then(|resume| resume.session_id),
        };
        let ended = self.pools.enqueue(job);
        Ok(Box::new(RemoteWorker {
            id: WorkerId::new(),
            cancel: CancellationToken::new(),
            host,
            pools: Arc::clone(&self.pools),
            agent: ctx.agent,
            ended,
        }))
    }
}

#[derive(Debug)]
struct RemoteWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    pools: Arc<RemotePools>,
    agent: String,
    ended: oneshot::Receiver<PoolEnd>,
}

#[async_trait]
impl Worker for RemoteWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        let RemoteWorker {
            cancel,
            host,
            pools,
            agent,
            ended,
            ..
        } = *self;
        let joined = tokio::select! {
            biased;
            () = host.posted_final() => Ok(()),
            () = cancel.cancelled() => Err(WorkerError::Cancelled),
            end = ended => match end {
                Ok(PoolEnd::Failed(reason)) => Err(WorkerError::Failed(reason)),
                // The queue dropped it without a word: only at shutdown.
                Err(_) => Err(WorkerError::Failed("the attempt left the pool queue".to_owned())),
            },
        };
        pools.remove(host.id(), &agent);
        joined
    }
}
