//! One attempt's worktree as a spawner sees it: opened before the worker
//! starts, and ended once the worker has: leftovers committed, the
//! `worktree` artifact recorded, the directory released per `keep`.
//!
//! A checkout whose `.git` no longer names its git directory (its worker
//! replaced it) has no git run in it: its attempt fails with that reason.
//!
//! The opening and the end each run in a tokio task of their own, awaited by
//! the spawn and the join: the engine drops a spawn that is cancelled and
//! waits for a stopped worker only so long, and neither drop may leave a
//! worktree half-made or half-released. One that is dropped unended (its
//! spawn or worker abandoned) has its leftovers committed and is released
//! as a failed attempt, without an artifact.

use std::sync::Arc;

use swarmd_engine::{AttemptHost, WorkerError};
use swarmd_output_store::OutputEvent;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::{Checkout, PRODUCER, WorktreeError, WorktreeSpec, Worktrees};

/// An attempt's open worktree.
#[derive(Debug)]
pub struct AttemptWorktree {
    trees: Arc<Worktrees>,
    checkout: Checkout,
    /// Whether dropping this releases the worktree: until `end` or
    /// `abandon` takes it over.
    armed: bool,
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
        let (made, opened) = oneshot::channel();
        let spec = spec.clone();
        let task_id = task_id.to_owned();
        let opening = async move {
            let worktree = trees
                .create(&spec, &task_id, attempt)
                .await
                .map(|checkout| AttemptWorktree {
                    trees,
                    checkout,
                    armed: true,
                });
            // Nobody waits any more: dropping it releases it.
            drop(made.send(worktree));
        };
        tokio::spawn(opening.in_current_span());
        let worktree = opened.await.map_err(|_| WorktreeError::Spawn {
            source: std::io::Error::other("the worktree's opening did not finish"),
        })??;
        tracing::debug!(
            branch = %worktree.checkout.branch,
            base = %worktree.checkout.base,
            "worktree added"
        );
        Ok(worktree)
    }

    pub fn checkout(&self) -> &Checkout {
        &self.checkout
    }

    /// Ends the attempt's worktree after its worker ended with `joined`:
    /// commits leftovers, records the `worktree` artifact as the attempt's
    /// epilogue (so a cancelled attempt has it too), then releases the
    /// directory; an attempt passed when it joined cleanly and its last
    /// Final is ok. Returns how the attempt ended: `joined`, except that a
    /// checkout whose `.git` no longer names its git directory fails an
    /// attempt that was not cancelled, with the refusal as its reason (also
    /// recorded as a `worktree` progress note). Other failures are logged,
    /// never turned into the attempt's verdict.
    pub async fn end(
        mut self,
        host: Arc<dyn AttemptHost>,
        joined: Result<(), WorkerError>,
    ) -> Result<(), WorkerError> {
        self.armed = false;
        let (trees, checkout) = (Arc::clone(&self.trees), self.checkout.clone());
        let unfinished = joined.clone();
        let ending = async move {
            let mut refused = None;
            match trees.conclude(&checkout).await {
                Ok(report) => {
                    let artifact = report.artifact();
                    if let Err(error) = host.record_epilogue(PRODUCER, vec![artifact]).await {
                        tracing::info!(
                            branch = %report.branch,
                            head = %report.head,
                            files = report.files.len(),
                            %error,
                            "worktree artifact not recorded; the work is on its branch"
                        );
                    }
                }
                Err(
                    error @ (WorktreeError::Tampered { .. } | WorktreeError::Unregistered { .. }),
                ) => {
                    tracing::warn!(branch = %checkout.branch, %error, "worktree refused");
                    let note = OutputEvent::Progress {
                        stage: PRODUCER.to_owned(),
                        note: Some(error.to_string()),
                    };
                    if let Err(error) = host.record_epilogue(PRODUCER, vec![note]).await {
                        tracing::info!(%error, "worktree refusal not recorded");
                    }
                    refused = Some(error.to_string());
                }
                Err(error) => {
                    tracing::warn!(branch = %checkout.branch, %error, "worktree not described");
                }
            }
            let passed = refused.is_none()
                && joined.is_ok()
                && host
                    .last_final()
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| r.event.final_ok())
                    .unwrap_or(false);
            if let Err(error) = trees.release(&checkout, passed).await {
                tracing::warn!(branch = %checkout.branch, %error, "worktree not released");
            }
            match (joined, refused) {
                (Err(WorkerError::Cancelled), _) => Err(WorkerError::Cancelled),
                (_, Some(reason)) => Err(WorkerError::Failed(reason)),
                (joined, None) => joined,
            }
        };
        match tokio::spawn(ending.in_current_span()).await {
            Ok(ended) => ended,
            Err(error) => {
                tracing::warn!(%error, "the worktree's end did not finish");
                unfinished
            }
        }
    }

    /// Releases a worktree whose worker never started.
    pub async fn abandon(mut self) {
        self.armed = false;
        release_failed(Arc::clone(&self.trees), self.checkout.clone()).await;
    }
}

impl Drop for AttemptWorktree {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let release = release_failed(Arc::clone(&self.trees), self.checkout.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(release.in_current_span())),
            // Without a runtime, recovery at the next start ends it.
            Err(_) => tracing::warn!(branch = %self.checkout.branch, "worktree left for recovery"),
        }
    }
}

/// Commits what is left in `checkout` and releases it as the worktree of an
/// attempt that did not pass; nothing is recorded.
async fn release_failed(trees: Arc<Worktrees>, checkout: Checkout) {
    if let Err(error) = trees.conclude(&checkout).await {
        tracing::warn!(branch = %checkout.branch, %error, "worktree not described");
    }
    if let Err(error) = trees.release(&checkout, false).await {
        tracing::warn!(branch = %checkout.branch, %error, "worktree not released");
    }
}
