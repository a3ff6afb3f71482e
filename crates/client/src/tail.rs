//! `swarmd task tail`: follows `GET /v1/tasks/{id}/output` as Server-Sent
//! Events and prints each event's data as one NDJSON line.
//!
//! A dropped connection is resumed with `Last-Event-ID` (a few times in a
//! row at most); the stream ends when the server closes it.

use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use swarmd_types::ids::TaskId;

use super::{ApiClient, ClientError, request_error};

/// Consecutive failed connections before `tail` gives up.
const MAX_RECONNECTS: u32 = 5;
/// Pause before reconnecting.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Where a tail starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailOptions {
    /// Only this attempt's output; unset: every attempt in order.
    pub attempt: Option<u32>,
    /// Only events after this sequence number of `attempt`. A seq is one
    /// attempt's, so the daemon refuses it without `attempt` (`400`).
    pub after_seq: Option<u64>,
}

/// One dispatched Server-Sent Event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// `id:` field, if any.
    pub id: Option<String>,
    /// `event:` field, if any.
    pub event: Option<String>,
    /// `data:` lines joined with `\n`.
    pub data: String,
}

/// An incremental `text/event-stream` parser: feed it chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    pending: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// Parses `chunk` and returns every event it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
            if let Some(event) = self.take_line(&line) {
                events.push(event);
            }
        }
        events
    }

    fn take_line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.pending);
            return std::mem::take(&mut self.has_data).then_some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if self.has_data {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(value);
                self.has_data = true;
            }
            "id" => self.pending.id = Some(value.to_owned()),
            "event" => self.pending.event = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

/// The NDJSON line for an event's data: the JSON itself when it is JSON,
/// else the data as a JSON string.
fn ndjson_line(data: &str) -> String {
    match serde_json::from_str::<Value>(data) {
        Ok(value) => value.to_string(),
        Err(_) => Value::String(data.to_owned()).to_string(),
    }
}

impl ApiClient {
    /// Streams task `id`'s output events to `out`, one JSON object per line,
    /// until the server ends the stream. Returns the number of events written.
    ///
    /// # Errors
    /// `Status` for a refusal, `Request` after `MAX_RECONNECTS` failed
    /// connections in a row, `Io` if `out` cannot be written.
    pub async fn tail_output(
        &self,
        id: &TaskId,
        options: TailOptions,
        out: &mut (dyn Write + Send),
    ) -> Result<u64, ClientError> {
        let mut query = Vec::new();
        if let Some(attempt) = options.attempt {
            query.push(format!("attempt={attempt}"));
        }
        if let Some(after) = options.after_seq {
            query.push(format!("after_seq={after}"));
        }
        let path = match query.is_empty() {
            true => format!("/v1/tasks/{id}/output"),
            false => format!("/v1/tasks/{id}/output?{}", query.join("&")),
        };
        let url = self.url(&path);
        let mut last_id: Option<String> = None;
        let mut written = 0;
        let mut failures = 0;
        loop {
            let mut request = self
                .get(&path)
                .header(reqwest::header::ACCEPT, "text/event-stream");
            if let Some(id) = &last_id {
                request = request.header("Last-Event-ID", id.as_str());
            }
            let response = match self.send(request, &url).await {
                Ok(response) => response,
                Err(error @ ClientError::Request { .. }) if failures < MAX_RECONNECTS => {
                    failures += 1;
                    tracing::warn!(%error, failures, "output stream unavailable; retrying");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let mut parser = SseParser::default();
            let mut body = response.bytes_stream();
            let dropped = loop {
                match body.next().await {
                    None => return Ok(written),
                    Some(Err(error)) => break request_error(&url, &error),
                    Some(Ok(chunk)) => {
                        failures = 0;
                        for event in parser.push(&chunk) {
                            if event.id.is_some() {
                                last_id = event.id.clone();
                            }
                            writeln!(out, "{}", ndjson_line(&event.data))
                                .and_then(|()| out.flush())
                                .map_err(|source| ClientError::Io {
                                    action: "write to stdout",
                                    source,
                                })?;
                            written += 1;
                        }
                    }
                }
            };
            failures += 1;
            if failures > MAX_RECONNECTS {
                return Err(dropped);
            }
            tracing::warn!(error = %dropped, "output stream dropped; resuming");
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_handles_split_chunks_multiline_data_and_comments() {
        let mut parser = SseParser::default();
        let mut events = parser.push(b": keep-alive\nid: 1\nevent: output\ndata: {\"a\"");
        assert!(events.is_empty());
        events.extend(parser.push(b":1}\r\n\r\nid: 2\ndata: line one\ndata: line two\n\n"));
        events.extend(parser.push(b"id: 3\n\n"));
        assert_eq!(
            events,
            [
                SseEvent {
                    id: Some("1".into()),
                    event: Some("output".into()),
                    data: "{\"a\":1}".into(),
                },
                SseEvent {
                    id: Some("2".into()),
                    event: None,
                    data: "line one\nline two".into(),
                },
            ]
        );
    }

    #[test]
    fn ndjson_lines_are_compact_json() {
        assert_eq!(
            ndjson_line("{ \"type\" : \"progress\" }"),
            "{\"type\":\"progress\"}"
        );
        assert_eq!(ndjson_line("plain\ntext"), "\"plain\\ntext\"");
    }
}
