//! One attempt's worktree as a spawner sees it: opened before the worker
//! starts, and ended once the worker has: leftovers committed, the
//! `worktree` artifact recorded, the directory released per `keep`.
//!
//! The end runs in a tokio task of its own and the worker's join awaits it:
//! the engine waits for a stopped worker only so long, and dropping the join
//! must not leave a worktree half-released.

use std::sync::Arc;

use swarmd_engine::{AttemptHost, WorkerError};
use swarmd_output_store::{ContentRef, OutputEvent};
use tracing::Instrument;

use super::{ARTIFACT, Checkout, WorktreeError, WorktreeSpec, Worktrees};

/// Producer name of the `worktree` artifact.
const PRODUCER: &str = "worktree";

/// An attempt's open worktree.
#[derive(Debug)]
pub struct AttemptWorktree {
    trees: Arc<Worktrees>,
    checkout: Checkout,
}

impl AttemptWorktree {
    /// Adds the worktree of attempt `attempt` of `task_id`.
    ///
    /// # Errors
    /// As [`Worktrees::create`].
    pub async fn open(
        trees: Arc<Worktrees>,
        spec: &WorktreeSpec,
        task_id: &str,
        attempt: u32,
    ) -> Result<AttemptWorktree, WorktreeError> {
        let checkout = trees.create(spec, task_id, attempt).await?;
        tracing::debug!(branch = %checkout.branch, base = %checkout.base, "worktree added");
        Ok(AttemptWorktree { trees, checkout })
    }

    pub fn checkout(&self) -> &Checkout {
        &self.checkout
    }

    /// Ends the attempt's worktree after its worker ended with `joined`:
    /// commits leftovers, records the `worktree` artifact (an attempt the
    /// engine already closed, a cancelled one, refuses it: the work is on
    /// the branch all the same), then releases the directory; an attempt
    /// passed when it joined cleanly and its last Final is ok. Failures are
    /// logged, never turned into the attempt's verdict.
    pub async fn end(self, host: Arc<dyn AttemptHost>, joined: &Result<(), WorkerError>) {
        let clean = joined.is_ok();
        let ending = async move {
            match self.trees.conclude(&self.checkout).await {
                Ok(report) => {
                    let artifact = OutputEvent::Artifact {
                        name: ARTIFACT.to_owned(),
                        content: ContentRef::Inline {
                            value: serde_json::to_value(&report).unwrap_or_default(),
                        },
                    };
                    if let Err(error) = host.record_output(PRODUCER, vec![artifact]).await {
                        tracing::info!(
                            branch = %report.branch,
                            head = %report.head,
                            files = report.files.len(),
                            %error,
                            "worktree artifact not recorded; the work is on its branch"
                        );
                    }
                }
                Err(error) => {
                    tracing::warn!(branch = %self.checkout.branch, %error, "worktree not described");
                }
            }
            let passed = clean
                && host
                    .last_final()
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| r.event.final_ok())
                    .unwrap_or(false);
            if let Err(error) = self.trees.release(&self.checkout, passed).await {
                tracing::warn!(branch = %self.checkout.branch, %error, "worktree not released");
            }
        };
        let task = tokio::spawn(ending.in_current_span());
        if let Err(error) = task.await {
            tracing::warn!(%error, "the worktree's end did not finish");
        }
    }

    /// Releases a worktree whose worker never started.
    pub async fn abandon(self) {
        if let Err(error) = self.trees.release(&self.checkout, false).await {
            tracing::warn!(branch = %self.checkout.branch, %error, "worktree not released");
        }
    }
}
