//! A MainAI session as the generator plays it: login with the admin token
//! (`POST /v1/operators`), the WebSocket of `/v1/operators/{sid}/ws`, a
//! writer task that batches outgoing frames, and the few fields of the
//! server's frames the workloads read. `logout` deletes the session so runs
//! do not pile sessions up in the daemon.

use anyhow::{Context, bail};
use futures_util::stream::{SplitStream, StreamExt};
use futures_util::{Sink, SinkExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::daemon::Target;

/// Largest frame the generator accepts (the server's frames are small).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The server's frames, as far as the workloads read them.
#[derive(Debug, Deserialize)]
pub(crate) struct Incoming {
    #[serde(rename = "type")]
    pub kind: Kind,
    #[serde(default)]
    pub req_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub worker_handle: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Server → client frame types (docs/protocol.md, Frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Spawn,
    Ask,
    HookBefore,
    HookAfter,
    Cancel,
    TaskAccepted,
    TaskEvent,
    TaskDone,
    Error,
    #[serde(other)]
    Unknown,
}

/// What a received WebSocket message means to a workload.
#[derive(Debug)]
pub(crate) enum Received {
    Frame(Box<Incoming>),
    /// A `task_event` (not parsed: the workloads only count tasks).
    Event,
    /// Ping, pong, binary: nothing to do.
    Other,
    /// A text frame that is not one of ours.
    Malformed,
    /// The socket closed or failed.
    Closed,
}

/// A logged-in session with an open socket.
#[derive(Debug)]
pub(crate) struct Session {
    pub sid: String,
    token: String,
    /// Frames to send, in order; the writer task batches them.
    pub out: mpsc::UnboundedSender<Message>,
    incoming: SplitStream<Socket>,
}

impl Session {
    /// Logs in and connects.
    pub(crate) async fn open(http: &reqwest::Client, target: &Target) -> anyhow::Result<Session> {
        let login = json!({"kind": "main_ai", "description": "swarmd-bench"});
        let response = http
            .post(target.url("/v1/operators"))
            .bearer_auth(&target.admin_token)
            .json(&login)
            .send()
            .await
            .context("login request")?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.as_u16() != 201 {
            bail!("login answered {status}: {body}");
        }
        let (Some(sid), Some(token)) = (body["sid"].as_str(), body["token"].as_str()) else {
            bail!("login answer without sid and token: {body}");
        };
        let ws_base = target.base.replacen("http", "ws", 1);
        let mut request = format!("{ws_base}/v1/operators/{sid}/ws").into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}"))?,
        );
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE))
            // tungstenite zero-fills this much before every read (128 KiB by default).
            .read_buffer_size(8 << 10);
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
            .await
            .context("WebSocket connect")?;
        let (sink, incoming) = socket.split();
        let (out, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(sink, rx));
        Ok(Session {
            sid: sid.to_owned(),
            token: token.to_owned(),
            out,
            incoming,
        })
    }

    /// Queues a JSON frame; false once the writer is gone.
    pub(crate) fn send(&self, frame: &Value) -> bool {
        self.out.send(Message::text(frame.to_string())).is_ok()
    }

    /// The next message from the server.
    pub(crate) async fn recv(&mut self) -> Received {
        match self.incoming.next().await {
            Some(Ok(Message::Text(text))) => classify(text.as_str()),
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => Received::Closed,
            Some(Ok(_)) => Received::Other,
        }
    }

    /// Closes the socket and deletes the session.
    pub(crate) async fn logout(
        self,
        http: &reqwest::Client,
        target: &Target,
    ) -> anyhow::Result<()> {
        let _ = self.out.send(Message::Close(None));
        let response = http
            .delete(target.url(&format!("/v1/operators/{}", self.sid)))
            .bearer_auth(&self.token)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("logout answered {}", response.status());
        }
        Ok(())
    }
}

/// Parses a text frame; `task_event`s are recognised by their prefix (the
/// server writes the tag first) and not parsed.
pub(crate) fn classify(text: &str) -> Received {
    if text.starts_with(r#"{"type":"task_event""#) {
        return Received::Event;
    }
    match serde_json::from_str::<Incoming>(text) {
        Ok(frame) => Received::Frame(Box::new(frame)),
        Err(_) => Received::Malformed,
    }
}

/// Sends queued frames, flushing once per batch of what is ready.
async fn write_frames<S>(mut sink: S, mut rx: mpsc::UnboundedReceiver<Message>)
where
    S: Sink<Message> + Unpin,
{
    while let Some(first) = rx.recv().await {
        let closing = matches!(first, Message::Close(_));
        if sink.feed(first).await.is_err() {
            return;
        }
        if !closing {
            while let Ok(next) = rx.try_recv() {
                if sink.feed(next).await.is_err() {
                    return;
                }
            }
        }
        if sink.flush().await.is_err() || closing {
            return;
        }
    }
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_read_by_their_type_and_unknown_fields_are_skipped() {
        let spawn = r#"{"type":"spawn","req_id":"r1","task_id":"t1","agent":"x",
            "attempt":1,"capability_token":"swc1.a","worker_handle":"wh-1",
            "directive":"…","base_url":"http://x","deadline":1}"#;
        let Received::Frame(frame) = classify(spawn) else {
            panic!("not a frame");
        };
        assert_eq!(frame.kind, Kind::Spawn);
        assert_eq!(frame.worker_handle.as_deref(), Some("wh-1"));
        assert_eq!(frame.req_id.as_deref(), Some("r1"));

        let done = r#"{"type":"task_done","task_id":"t1","attempt":1,"status":"pass",
            "ok":true,"value":{"nested":[1,2,{"deep":"x"}]}}"#;
        let Received::Frame(frame) = classify(done) else {
            panic!("not a frame");
        };
        assert_eq!(
            (frame.kind, frame.status.as_deref()),
            (Kind::TaskDone, Some("pass"))
        );
    }

    #[test]
    fn events_unknown_types_and_garbage_are_told_apart() {
        assert!(matches!(
            classify(r#"{"type":"task_event","task_id":"t","seq":3}"#),
            Received::Event
        ));
        let Received::Frame(frame) = classify(r#"{"type":"brand_new"}"#) else {
            panic!("not a frame");
        };
        assert_eq!(frame.kind, Kind::Unknown);
        assert!(matches!(classify("[1, 2]"), Received::Malformed));
    }
}
