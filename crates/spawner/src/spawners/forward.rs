//! Forwarding a worker's events into the attempt's tail as they arrive,
//! batching whatever is already waiting into one append.

use swarmd_engine::{AttemptHost, EngineError};
use swarmd_output_store::OutputEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events in flight between a worker and the store; a full channel makes the
/// worker wait (a process's pipe fills, a Lua `emit_*` blocks).
pub(super) const CHANNEL: usize = 256;
const MAX_BATCH: usize = 64;

/// Appends everything received until the sender closes, or until `done` is
/// cancelled and what is already queued has been appended (a worker that
/// ended without dropping its sender, such as a Lua thread stuck in a long C
/// call, cannot hold the attempt open). On an append error the receiver is
/// dropped, which stops the worker, and the error returned.
pub(super) async fn forward(
    host: &dyn AttemptHost,
    producer: &str,
    mut events: mpsc::Receiver<OutputEvent>,
    done: &CancellationToken,
) -> Result<(), EngineError> {
    loop {
        let first = tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => event,
                None => return Ok(()),
            },
            () = done.cancelled() => match events.try_recv() {
                Ok(event) => event,
                Err(_) => return Ok(()),
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        host.record_output(producer, batch).await?;
    }
}
