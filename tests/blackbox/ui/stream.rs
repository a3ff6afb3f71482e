//! An open `/v1/events` stream read frame by frame, for the black-box
//! tests of the event feed's scope.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::daemon::Swarmd;
use crate::harness::PATIENCE;

/// One SSE frame with data: its id, event name and parsed data.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) id: Option<String>,
    pub(super) name: String,
    pub(super) data: Value,
}

/// An open `/v1/events` stream, read frame by frame.
pub(super) struct Stream {
    pub(super) body: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    /// What was read and not yet taken as a frame.
    pub(super) text: String,
    /// The ids of the `id:`-only events (progress ids) passed over so far.
    pub(super) progress: Vec<String>,
}

impl Stream {
    pub(super) async fn open(sw: &Swarmd, query: &str, bearer: &str, after: u64) -> Stream {
        let response = sw
            .get(&format!("/v1/events?{query}"), bearer)
            .header("accept", "text/event-stream")
            .header("last-event-id", after.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        Stream {
            body: response.bytes_stream().boxed(),
            text: String::new(),
            progress: Vec::new(),
        }
    }

    /// The next frame with data, or `None` when none comes within `wait`.
    pub(super) async fn next_within(&mut self, wait: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let (mut id, mut name, mut data) = (None, "message".to_owned(), String::new());
                for line in block.lines() {
                    if let Some(rest) = line.strip_prefix("id:") {
                        id = Some(rest.trim().to_owned());
                    } else if let Some(rest) = line.strip_prefix("event:") {
                        rest.trim().clone_into(&mut name);
                    } else if let Some(rest) = line.strip_prefix("data:") {
                        data.push_str(rest.trim());
                    }
                }
                if !data.is_empty() {
                    let data = serde_json::from_str(&data).unwrap();
                    return Some(Frame { id, name, data });
                }
                self.progress.extend(id);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()?;
            let chunk = chunk.expect("the stream ended").unwrap();
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    pub(super) async fn next(&mut self) -> Frame {
        self.next_within(PATIENCE).await.expect("no frame in time")
    }
}
