//! A delegated attempt's worker: waits for whichever of the SubAgent's posted
//! Final, the MainAI's reply, or cancellation comes first, then ends the
//! attempt's worktree, if it has one.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarmd_engine::ids::WorkerId;
use swarmd_engine::{AttemptHost, Worker, WorkerError};
use swarmd_output_store::OutputEvent;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::operator::{SpawnChannel, SpawnReply};
use swarmd_git::worktree::AttemptWorktree;

const PRODUCER: &str = "operator";

#[derive(Debug)]
pub(super) struct OperatorWorker {
    pub id: WorkerId,
    pub cancel: CancellationToken,
    pub host: Arc<dyn AttemptHost>,
    pub channel: Arc<dyn SpawnChannel>,
    pub req_id: String,
    pub reply: oneshot::Receiver<SpawnReply>,
    /// The attempt's worktree, ended when the worker is. Boxed: most
    /// delegated attempts have none, and each waiting one holds this.
    pub worktree: Option<Box<AttemptWorktree>>,
}

#[async_trait]
impl Worker for OperatorWorker {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits for the first of a posted Final, the MainAI's reply, and
    /// cancellation, which sends the session a `cancel` frame; then ends
    /// the attempt's worktree, if it has one.
    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        let OperatorWorker {
            cancel,
            host,
            channel,
            req_id,
            mut reply,
            worktree,
            ..
        } = *self;
        let joined = {
            let posted = host.posted_final();
            tokio::pin!(posted);
            // A session that goes away drops its reply sender; the SubAgent
            // may still post with its handle, so the wait goes on without
            // the reply.
            let mut reply_open = true;
            loop {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        channel.cancel(&req_id, host.id(), "cancelled");
                        break Err(WorkerError::Cancelled);
                    }
                    () = &mut posted => break Ok(()),
                    answer = &mut reply, if reply_open => match answer {
                        // Boxed: a waiting attempt need not hold room for it.
                        Ok(answer) => break Box::pin(settle(&*host, answer)).await,
                        Err(_) => reply_open = false,
                    },
                }
            }
        };
        match worktree {
            Some(worktree) => Box::pin((*worktree).end(host, joined)).await,
            None => joined,
        }
    }
}

/// Turns the MainAI's reply into the Final, unless the SubAgent posted one.
async fn settle(host: &dyn AttemptHost, reply: SpawnReply) -> Result<(), WorkerError> {
    let posted = host
        .last_final()
        .await
        .map_err(|e| WorkerError::Failed(format!("cannot read the final: {e}")))?;
    if posted.is_some() {
        return Ok(());
    }
    let (value, ok) = match reply {
        SpawnReply::Ack {
            value, ok, error, ..
        } => match (value, error) {
            (Value::Null, Some(error)) => {
                return Err(WorkerError::Failed(format!("the MainAI reported: {error}")));
            }
            (Value::Null, None) => {
                return Err(WorkerError::Failed(
                    "spawn_ack without a value, and the SubAgent posted no result".to_owned(),
                ));
            }
            (value, _) => (value, ok),
        },
        SpawnReply::Halt { value, reason } => (
            json!({ "halted": true, "reason": reason, "value": value }),
            true,
        ),
    };
    host.record_output(PRODUCER, vec![OutputEvent::inline_final(value, ok)])
        .await
        .map(|_| ())
        .map_err(|e| WorkerError::Failed(format!("recording the final failed: {e}")))
}
