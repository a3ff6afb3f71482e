//! The process spawner (docs/tasks.md, Process agents): one child per attempt through the
//! [`ProcessRunner`], its NDJSON events forwarded as they arrive and its
//! verdict turned into the attempt's Final.

use std::sync::Arc;

use async_trait::async_trait;
use swarmd_engine::ids::WorkerId;
use swarmd_engine::task::ProcessGroupMark;
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker, WorkerError};
use swarmd_output_store::OutputEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::forward::{CHANNEL, forward};
use super::task_of;
use crate::process::{Exited, ProcessError, ProcessRunner, RunVars, RunningChild, StreamMode};
use swarmd_git::worktree::{AttemptWorktree, WorktreeSpec, Worktrees, open_for_task, setup};

/// Producer name of the events this spawner appends.
const PRODUCER: &str = "process";

/// Runs a process agent. The child is started at spawn, so a program that
/// cannot start is a spawn error.
#[derive(Debug)]
pub struct ProcessSpawner {
    runner: Arc<ProcessRunner>,
    base_url: String,
    /// Each attempt runs in a worktree of its own when set (docs/tasks.md,
    /// Worktrees).
    worktree: Option<(Arc<Worktrees>, WorktreeSpec)>,
}

impl ProcessSpawner {
    pub fn new(runner: ProcessRunner, base_url: &str) -> ProcessSpawner {
        ProcessSpawner {
            runner: Arc::new(runner),
            base_url: base_url.to_owned(),
            worktree: None,
        }
    }

    /// Runs each attempt in a fresh worktree made by `trees` per `spec`.
    pub fn with_worktree(mut self, trees: Arc<Worktrees>, spec: WorktreeSpec) -> ProcessSpawner {
        self.worktree = Some((trees, spec));
        self
    }
}

#[async_trait]
impl SpawnerAdapter for ProcessSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let Attempt {
            ctx,
            credential,
            host,
        } = attempt;
        let task = task_of(&*host).await?;
        let worktree = match &self.worktree {
            Some((trees, spec)) => Some({
                trees.name_task(&task.id.to_string(), &task.prompt);
                open_for_task(&*host, Arc::clone(trees), spec, &task, ctx.id.n)
                    .await
                    .map_err(|e| SpawnError::Failed(format!("worktree: {e}")))?
            }),
            None => None,
        };
        // The setup command runs in the new worktree before the agent; its
        // failure fails the attempt, the agent never started.
        if let (Some(opened), Some((_, spec))) = (&worktree, &self.worktree)
            && let Some(setup) = &spec.bootstrap.setup
        {
            let checkout = opened.checkout();
            let env = self.runner.checkout_env(checkout);
            let ran = setup::run_recorded(&*host, setup, &checkout.dir, &env).await;
            if let Err(error) = ran {
                if let Some(worktree) = worktree {
                    Box::pin(worktree.abandon()).await;
                }
                return Err(SpawnError::Failed(error.to_string()));
            }
        }
        let resume_session = task.resume_session(ctx.id.n);
        let vars = RunVars {
            base_url: self.base_url.clone(),
            task_id: ctx.id.task.to_string(),
            attempt: ctx.id.n,
            agent: ctx.agent,
            worker_handle: credential.handle().to_owned(),
            prompt: task.prompt,
            continued_from: task.continued_from.map(|id| id.to_string()),
            resume_session,
        };
        let cancel = CancellationToken::new();
        let checkout = worktree.as_ref().map(AttemptWorktree::checkout);
        let child = match self.runner.start_in(&vars, checkout, cancel.clone()) {
            Ok(child) => child,
            Err(e) => {
                if let Some(worktree) = worktree {
                    Box::pin(worktree.abandon()).await;
                }
                return Err(SpawnError::Failed(e.to_string()));
            }
        };
        tracing::debug!(pgid = child.pgid(), "process agent started");
        if let Some(group) = child.identity() {
            let mark = ProcessGroupMark {
                pgid: group.pgid,
                leader_start_ticks: group.leader_start_ticks,
                boot_id: group.boot_id.clone(),
            };
            host.record_process_group(mark);
        }
        Ok(Box::new(ProcessWorker {
            id: WorkerId::new(),
            cancel,
            host,
            stream: self.runner.spec().stream,
            child,
            worktree,
        }))
    }
}

#[derive(Debug)]
struct ProcessWorker {
    id: WorkerId,
    cancel: CancellationToken,
    host: Arc<dyn AttemptHost>,
    stream: StreamMode,
    child: RunningChild,
    worktree: Option<AttemptWorktree>,
}

#[async_trait]
impl Worker for ProcessWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        let ProcessWorker {
            host,
            stream,
            child,
            worktree,
            ..
        } = *self;
        let joined = run(&*host, stream, child).await;
        match worktree {
            Some(worktree) => worktree.end(host, joined).await,
            None => joined,
        }
    }
}

/// Waits for the child, forwarding its events, and decides its Final.
async fn run(
    host: &dyn AttemptHost,
    stream: StreamMode,
    child: RunningChild,
) -> Result<(), WorkerError> {
    let (events, received) = mpsc::channel(CHANNEL);
    let done = CancellationToken::new();
    let running = async {
        let ran = child.wait(events).await;
        done.cancel();
        ran
    };
    let (ran, forwarded) = tokio::join!(running, forward(host, PRODUCER, received, &done));
    if let Err(e) = forwarded {
        return Err(WorkerError::Failed(format!(
            "recording the output failed: {e}"
        )));
    }
    let exited = ran.map_err(worker_error)?;
    let verdict = Verdict { host };
    match stream {
        StreamMode::None => verdict.plain(&exited).await,
        StreamMode::Ndjson | StreamMode::Cli(_) => verdict.ndjson(&exited).await,
    }
}

fn worker_error(e: ProcessError) -> WorkerError {
    match e {
        ProcessError::Cancelled => WorkerError::Cancelled,
        other => WorkerError::Failed(other.to_string()),
    }
}

/// Turns a child's exit into the attempt's Final.
struct Verdict<'a> {
    host: &'a dyn AttemptHost,
}

impl Verdict<'_> {
    async fn last_final(&self) -> Result<Option<(OutputEvent, bool)>, WorkerError> {
        let record = self
            .host
            .last_final()
            .await
            .map_err(|e| WorkerError::Failed(format!("cannot read the final: {e}")))?;
        Ok(record.and_then(|r| r.event.final_ok().map(|ok| (r.event, ok))))
    }

    async fn append(&self, events: Vec<OutputEvent>) -> Result<(), WorkerError> {
        self.host
            .record_output(PRODUCER, events)
            .await
            .map(|_| ())
            .map_err(|e| WorkerError::Failed(format!("recording the final failed: {e}")))
    }

    /// Plain mode: one Final from stdout and the exit status, unless the
    /// child already posted one over HTTP, which then decides.
    async fn plain(&self, exited: &Exited) -> Result<(), WorkerError> {
        if self.last_final().await?.is_some() {
            return Ok(());
        }
        let (value, ok) = exited.plain_final();
        self.append(vec![OutputEvent::inline_final(value, ok)])
            .await
    }

    /// NDJSON mode: no Final fails the attempt; a non-zero exit after an ok
    /// Final appends the same content again with `ok = false`, after a
    /// progress note saying why.
    async fn ndjson(&self, exited: &Exited) -> Result<(), WorkerError> {
        match self.last_final().await? {
            None => Err(WorkerError::Failed(format!(
                "the process ended ({}) without a final event",
                exited.describe()
            ))),
            Some((OutputEvent::Final { content, ok: true }, _)) if !exited.success() => {
                let note = OutputEvent::Progress {
                    stage: "exit".to_owned(),
                    note: Some(format!("{}: the final is not ok", exited.describe())),
                };
                let demoted = OutputEvent::Final { content, ok: false };
                self.append(vec![note, demoted]).await
            }
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "process_worktree_tests.rs"]
mod worktree_tests;
