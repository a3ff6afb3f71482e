//! The operator spawner (docs/tasks.md, Operator agents): an attempt handed to a MainAI session
//! as a `spawn` frame. Kind-`operator` agents route by `operator_role`; the
//! `operator_delegate` layer routes to the task's own session through
//! [`delegate`]. The channel parks frames for disconnected sessions; this
//! spawner parks nothing itself. An agent with `worktree` gets a checkout
//! per attempt, named in the frame and its directive, and ended with the
//! attempt's worker; attempts delegated by the layer get none.

mod directive;
mod worker;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod worktree_tests;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use swarmd_engine::ids::WorkerId;
use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};
use tokio_util::sync::CancellationToken;

use crate::operator::{OperatorRoute, SessionDirectory, SpawnChannel, SpawnFrame, SpawnWorktree};
use swarmd_git::worktree::{AttemptWorktree, WorktreeSpec, Worktrees, open_for_task};

use directive::continuation_line;
pub use directive::render_directive;
use worker::OperatorWorker;

/// What a `spawn` frame says about the SubAgent to launch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorTarget {
    /// `{subagent_type, tools, …}` from the agent's config.
    pub worker_binding: Option<Value>,
    /// Sent as the binding's `system_prompt` key.
    pub system_prompt: Option<String>,
}

impl OperatorTarget {
    /// The frame's `worker` field: the binding with the system prompt added.
    fn binding(&self) -> Option<Value> {
        let Some(prompt) = &self.system_prompt else {
            return self.worker_binding.clone();
        };
        let mut binding = match &self.worker_binding {
            Some(Value::Object(fields)) => fields.clone(),
            _ => serde_json::Map::new(),
        };
        binding.insert("system_prompt".to_owned(), Value::from(prompt.as_str()));
        Some(Value::Object(binding))
    }
}

/// Spawns on the live session that claimed `operator_role`, or, for an
/// agent without one, on the least loaded MainAI session.
#[derive(Debug)]
pub struct OperatorSpawner {
    route: OperatorRoute,
    target: OperatorTarget,
    base_url: String,
    sessions: Arc<dyn SessionDirectory>,
    /// Each attempt gets a worktree of its own when set (docs/tasks.md,
    /// Worktrees).
    worktree: Option<(Arc<Worktrees>, WorktreeSpec)>,
}

impl OperatorSpawner {
    pub fn new(
        role: Option<&str>,
        target: OperatorTarget,
        base_url: &str,
        sessions: Arc<dyn SessionDirectory>,
    ) -> OperatorSpawner {
        OperatorSpawner {
            route: match role {
                Some(role) => OperatorRoute::Role(role.to_owned()),
                None => OperatorRoute::AnyMainAi,
            },
            target,
            base_url: base_url.to_owned(),
            sessions,
            worktree: None,
        }
    }

    /// Gives each attempt a fresh worktree made by `trees` per `spec`.
    pub fn with_worktree(mut self, trees: Arc<Worktrees>, spec: WorktreeSpec) -> OperatorSpawner {
        self.worktree = Some((trees, spec));
        self
    }
}

#[async_trait]
impl SpawnerAdapter for OperatorSpawner {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let channel = self.route.find(&*self.sessions, attempt.ctx.operator_sid)?;
        let worktree = match &self.worktree {
            Some((trees, spec)) => {
                let task = super::task_of(&*attempt.host).await?;
                trees.name_task(&task.id.to_string(), &task.prompt);
                let opened = open_for_task(
                    &*attempt.host,
                    Arc::clone(trees),
                    spec,
                    &task,
                    attempt.ctx.id.n,
                );
                Some(
                    opened
                        .await
                        .map_err(|e| SpawnError::Failed(format!("worktree: {e}")))?,
                )
            }
            None => None,
        };
        delegate(attempt, channel, &self.target, &self.base_url, worktree).await
    }
}

/// Sends the attempt's `spawn` frame to `channel` and returns a worker that
/// completes on the first of: a Final posted over HTTP, `spawn_ack`,
/// `spawn_halt`, or cancellation (cancel and lease expiry; a `cancel` frame
/// is sent). The SubAgent is told to work in `worktree` when there is one;
/// the worker ends it, and a spawn that fails releases it.
pub async fn delegate(
    attempt: Attempt,
    channel: Arc<dyn SpawnChannel>,
    target: &OperatorTarget,
    base_url: &str,
    worktree: Option<AttemptWorktree>,
) -> Result<Box<dyn Worker>, SpawnError> {
    let Attempt {
        ctx,
        credential,
        host,
    } = attempt;
    let binding = target.binding();
    let checkout = worktree.as_ref().map(|w| {
        let checkout = w.checkout();
        SpawnWorktree {
            path: checkout.dir.display().to_string(),
            branch: checkout.branch.clone(),
            base: checkout.base.clone(),
        }
    });
    let mut directive = render_directive(
        &ctx.agent,
        binding.as_ref(),
        ctx.id,
        credential.handle(),
        base_url,
        checkout.as_ref(),
    );
    if let Some(from) = ctx.continued_from {
        directive.push_str(&continuation_line(from, ctx.resume_session.as_deref()));
    }
    let frame = SpawnFrame {
        attempt: ctx.id,
        agent: ctx.agent,
        credential,
        worker_binding: binding,
        directive,
        base_url: base_url.trim_end_matches('/').to_owned(),
        lease_deadline_ms: ctx.lease_deadline_ms,
        worktree: checkout,
        continued_from: ctx.continued_from,
        resume_session: ctx.resume_session,
    };
    let receipt = match channel.spawn(frame).await {
        Ok(receipt) => receipt,
        Err(error) => {
            if let Some(worktree) = worktree {
                // Boxed: inline, the release's git future would size every
                // spawn's future, which the layers move whole.
                Box::pin(worktree.abandon()).await;
            }
            return Err(error);
        }
    };
    Ok(Box::new(OperatorWorker {
        id: WorkerId::new(),
        cancel: CancellationToken::new(),
        host,
        channel,
        req_id: receipt.req_id,
        reply: receipt.reply,
        worktree: worktree.map(Box::new),
    }))
}
