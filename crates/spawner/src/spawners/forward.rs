//! Forwarding a worker's events into the attempt's tail as they arrive,
//! batching whatever is already waiting into one append.
//!
//! What waits is bounded in bytes as well as in events: the worker's channel
//! holds one event ([`CHANNEL`]), and the forwarder takes events from it
//! while an append is in flight only as long as what it holds is under
//! [`QUEUE_BYTES`] and [`MAX_QUEUED`] events; a batch is at most
//! [`MAX_BATCH`] events and stops once it reaches [`BATCH_BYTES`] (an event
//! larger than that goes alone). A worker emitting large values waits on the
//! store instead of piling copies of them up in the daemon's memory, and each
//! large value meets the attempt's output budget on its own.

use std::collections::VecDeque;

use serde_json::Value;
use swarmd_engine::{AttemptHost, EngineError};
use swarmd_output_store::{ContentRef, OutputEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The worker's channel: a full channel makes the worker wait (a process's
/// pipe fills, a Lua `emit_*` blocks). One event: the forwarder takes each
/// at once while it holds little, so this costs no batching.
pub(super) const CHANNEL: usize = 1;
/// Events the forwarder holds at most besides the append in flight.
const MAX_QUEUED: usize = 256;
/// The forwarder takes no more events while it holds this many bytes.
const QUEUE_BYTES: usize = 4 << 20;
/// Events one append carries at most.
const MAX_BATCH: usize = 64;
/// A batch takes no more events once it weighs this many bytes.
const BATCH_BYTES: usize = 1 << 20;

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
    let mut queue = Queue::default();
    let mut open = true;
    let mut append = None;
    loop {
        if append.is_none() && !queue.events.is_empty() {
            append = Some(host.record_output(producer, queue.batch()));
        }
        if append.is_none() && !open {
            return Ok(());
        }
        let room = open && queue.has_room();
        tokio::select! {
            biased;
            appended = async {
                match append.as_mut() {
                    Some(append) => append.await,
                    None => std::future::pending().await,
                }
            }, if append.is_some() => {
                append = None;
                appended?;
            }
            event = events.recv(), if room => match event {
                Some(event) => queue.push(event),
                None => open = false,
            },
            () = done.cancelled(), if room => match events.try_recv() {
                Ok(event) => queue.push(event),
                Err(_) => open = false,
            },
        }
    }
}

/// Events received and not appended yet, with what they weigh.
#[derive(Default)]
struct Queue {
    events: VecDeque<(OutputEvent, usize)>,
    bytes: usize,
}

impl Queue {
    fn has_room(&self) -> bool {
        self.events.len() < MAX_QUEUED && self.bytes < QUEUE_BYTES
    }

    fn push(&mut self, event: OutputEvent) {
        let weight = weight(&event);
        self.bytes += weight;
        self.events.push_back((event, weight));
    }

    /// The next batch: at least one event, at most `MAX_BATCH`, and none
    /// added once it weighs `BATCH_BYTES`.
    fn batch(&mut self) -> Vec<OutputEvent> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < MAX_BATCH && (batch.is_empty() || bytes < BATCH_BYTES) {
            let Some((event, weight)) = self.events.pop_front() else {
                break;
            };
            self.bytes -= weight;
            bytes += weight;
            batch.push(event);
        }
        batch
    }
}

/// About what `event` takes as JSON, without encoding it: its inline value
/// or note, plus a little for the rest.
fn weight(event: &OutputEvent) -> usize {
    let body = match event {
        OutputEvent::Progress { note, .. } => note.as_ref().map_or(0, String::len),
        _ => match event.content() {
            Some(ContentRef::Inline { value }) => value_weight(value),
            _ => 0,
        },
    };
    body + 64
}

fn value_weight(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len() + 2,
        Value::Array(items) => {
            items
                .iter()
                .map(|item| value_weight(item) + 1)
                .sum::<usize>()
                + 2
        }
        Value::Object(fields) => {
            let inner: usize = fields
                .iter()
                .map(|(key, item)| key.len() + 4 + value_weight(item))
                .sum();
            inner + 2
        }
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(bytes: usize) -> OutputEvent {
        OutputEvent::Partial {
            chunk: ContentRef::Inline {
                value: Value::String("x".repeat(bytes)),
            },
        }
    }

    #[test]
    fn a_batch_stops_at_its_bytes_and_a_large_event_goes_alone() {
        let mut queue = Queue::default();
        for _ in 0..3 {
            queue.push(partial(BATCH_BYTES));
        }
        for _ in 0..100 {
            queue.push(partial(10));
        }
        assert!(!queue.has_room() || queue.bytes < QUEUE_BYTES);
        assert_eq!(queue.batch().len(), 1);
        assert_eq!(queue.batch().len(), 1);
        assert_eq!(queue.batch().len(), 1);
        assert_eq!(queue.batch().len(), MAX_BATCH);
        assert_eq!(queue.batch().len(), 100 - MAX_BATCH);
        assert_eq!((queue.events.len(), queue.bytes), (0, 0));
    }

    #[test]
    fn the_queue_has_no_room_once_it_holds_its_bytes() {
        let mut queue = Queue::default();
        queue.push(partial(QUEUE_BYTES));
        assert!(!queue.has_room());
        queue.batch();
        assert!(queue.has_room());
    }
}
