//! A MainAI session as the generator plays it: login with the admin token
//! (`POST /v1/operators`), the WebSocket of `/v1/operators/{sid}/ws`, a
//! writer task that batches outgoing frames (`swarmd-wire`'s
//! `ClientFrame`s), and the few fields of the server's frames the workloads
//! read. `logout` deletes the session so runs
//! do not pile sessions up in the daemon.

use anyhow::{Context, bail};
use futures_util::stream::{SplitStream, StreamExt};
use futures_util::{Sink, SinkExt};
use serde::Deserialize;
use serde_json::{Value, json};
use swarmd_types::ids::{ReqId, TaskId};
use swarmd_wire::{ClientFrame, SpawnTaskFrame};
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

/// The server's frames, as far as the workloads read them: the few fields
/// they use, unknown types tolerated. Cheaper per frame than decoding the
/// whole `swarmd_wire::ServerFrame`, and a frame of a newer server still
/// reads.
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

    /// Queues a frame; false once the writer is gone.
    pub(crate) fn send(&self, frame: &ClientFrame) -> bool {
        match serde_json::to_string(frame) {
            Ok(text) => self.out.send(Message::text(text)).is_ok(),
            Err(_) => false,
        }
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

/// A request id the generator makes: a letter naming the workload's kind of
/// request and a counter.
pub(crate) fn own_req_id(kind: char, n: u64) -> ReqId {
    ReqId::new(format!("{kind}{n}")).expect("a letter and a number is a valid req_id")
}

/// A `spawn_task` of `agent` with `prompt`, delegated back to this session
/// as a `spawn` frame when `delegate`.
pub(crate) fn spawn_task(req_id: ReqId, agent: &str, prompt: &str, delegate: bool) -> ClientFrame {
    ClientFrame::SpawnTask(Box::new(SpawnTaskFrame {
        req_id,
        agent: agent.to_owned(),
        prompt: prompt.to_owned(),
        system: None,
        input: None,
        metadata: None,
        layers: None,
        policy: None,
        delegate,
        continue_from: None,
    }))
}

/// The reply that lets the server go on after an `ask` or a `hook_before`
/// (`None` for any other frame, or one without a valid `req_id`): a null
/// answer, an approving ack.
pub(crate) fn go_on(kind: Kind, req_id: Option<String>) -> Option<ClientFrame> {
    let req_id = ReqId::new(req_id?).ok()?;
    match kind {
        Kind::Ask => Some(ClientFrame::Answer {
            req_id,
            value: Value::Null,
        }),
        Kind::HookBefore => Some(ClientFrame::HookAck {
            req_id,
            ok: true,
            reason: None,
        }),
        _ => None,
    }
}

/// The `spawn_ack` of a played SubAgent: passed, or failed with `error`.
pub(crate) fn spawn_ack(req_id: ReqId, outcome: Result<(), String>) -> ClientFrame {
    ClientFrame::SpawnAck {
        req_id,
        value: Value::Null,
        ok: outcome.is_ok(),
        error: outcome.err(),
        stats: None,
    }
}

/// A `cancel_task` of `task_id`.
pub(crate) fn cancel_task(req_id: ReqId, task_id: TaskId) -> ClientFrame {
    ClientFrame::CancelTask { req_id, task_id }
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
