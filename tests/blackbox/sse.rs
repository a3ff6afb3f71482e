//! A minimal Server-Sent Events client for the tests: opens a route with
//! `Accept: text/event-stream` (and `Last-Event-ID`) and yields events.

use std::collections::VecDeque;

use futures_util::StreamExt;
use serde_json::Value;
use swarmd_client::{SseEvent, SseParser};

use crate::harness::{Daemon, PATIENCE};

/// An open SSE response.
pub(crate) struct Sse {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl Sse {
    pub(crate) async fn open(daemon: &Daemon, path: &str, last_id: Option<&str>) -> Sse {
        let mut request = daemon
            .get(path, &daemon.admin)
            .header("accept", "text/event-stream");
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        Sse {
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::default(),
            ready: VecDeque::new(),
        }
    }

    pub(crate) async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next())
                .await
                .expect("no SSE event in time")?;
            self.ready.extend(self.parser.push(&chunk.unwrap()));
        }
    }

    /// The next event's id and its OutputEvent.
    pub(crate) async fn data(&mut self) -> (String, Value) {
        let event = self.next().await.expect("the stream ended early");
        let record: Value = serde_json::from_str(&event.data).unwrap();
        (event.id.unwrap_or_default(), record["event"].clone())
    }
}
