//! The event ids of a restored MCP session (docs/mcp.md, Sessions across a
//! restart), over raw Streamable HTTP: within one daemon a `GET` with the
//! `Last-Event-ID` of a call in flight resumes its stream; after a restart
//! the session comes back on the same id, the same calls' streams get
//! other event ids, and a resume with an id from before the restart is
//! answered `404 not_found` (the stream cannot be resumed), never with the
//! events of the new daemon's stream rmcp numbers as the old one.

use std::time::Duration;

use reqwest::{RequestBuilder, Response};
use serde_json::{Value, json};

use crate::daemon::Swarmd;

const VERSION: &str = "2025-11-25";

/// The `/mcp` request `builder`, with the headers of a Streamable HTTP
/// client of session `session` (none for the `initialize`).
fn mcp(builder: RequestBuilder, session: Option<&str>) -> RequestBuilder {
    let builder = builder
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(30));
    match session {
        Some(id) => builder
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", VERSION),
        None => builder,
    }
}

/// An SSE answer read event by event.
struct Events {
    response: Response,
    buffer: String,
}

impl Events {
    fn new(response: Response) -> Events {
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next event's id and data; `None` when the stream ends.
    async fn next(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    }
                }
                if id.is_empty() && data.is_empty() {
                    continue;
                }
                return Some((id, data));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("an SSE event in time")
                .unwrap()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads on until the answer to call `call`; its data.
    async fn answer(&mut self, call: u64) -> Value {
        while let Some((_, data)) = self.next().await {
            if let Ok(message) = serde_json::from_str::<Value>(&data)
                && message["id"] == call
            {
                return message;
            }
        }
        panic!("the stream ended without the answer to call {call}");
    }
}

/// Calls `tool` with `args` as call `call` of session `session`: its
/// answer's stream.
async fn call(sw: &Swarmd, session: &str, call: u64, tool: &str, args: Value) -> Events {
    let body = json!({"jsonrpc": "2.0", "id": call, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    let response = mcp(sw.post("/mcp", &sw.admin), Some(session))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "tools/call {tool}");
    Events::new(response)
}

/// Spawns a `sleepy` task (call `first`), then waits 5 s for it (call
/// `first + 1`) and returns that wait's stream, still open, with the id of
/// its first event.
async fn waiting(sw: &Swarmd, session: &str, first: u64) -> (Events, String) {
    let spawned = call(
        sw,
        session,
        first,
        "spawn",
        json!({"agent": "sleepy", "prompt": "x"}),
    )
    .await
    .answer(first)
    .await;
    let task = spawned["result"]["structuredContent"]["task_id"].clone();
    assert!(task.is_string(), "{spawned}");
    let args = json!({"task_ids": [task], "timeout_secs": 5});
    let mut wait = call(sw, session, first + 1, "wait", args).await;
    let (id, _) = wait.next().await.expect("the wait's stream has an event");
    assert!(!id.is_empty(), "the wait's first event has an id");
    (wait, id)
}

/// Resumes session `session`'s stream after event `last`.
async fn resume(sw: &Swarmd, session: &str, last: &str) -> Response {
    mcp(sw.get("/mcp", &sw.admin), Some(session))
        .header("last-event-id", last)
        .send()
        .await
        .unwrap()
}

const SLEEPY: &str = r#"
[agents.sleepy]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 30"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }
"#;

#[tokio::test]
async fn an_event_id_from_before_a_restart_resumes_nothing_after_it() {
    let mut sw = Swarmd::new(SLEEPY).start().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let opened = mcp(sw.post("/mcp", &sw.admin), None)
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200, "initialize");
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    Events::new(opened).answer(1).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let accepted = mcp(sw.post("/mcp", &sw.admin), Some(&session))
        .json(&initialized)
        .send()
        .await
        .unwrap();
    assert!(accepted.status().is_success(), "{}", accepted.status());

    // Within one daemon a call's stream in flight is resumed: its answer
    // comes on the resumed stream.
    let (_cut, before) = waiting(&sw, &session, 2).await;
    let resumed = resume(&sw, &session, &before).await;
    assert_eq!(resumed.status(), 200, "a resume within one daemon");
    let answer = Events::new(resumed).answer(3).await;
    assert_eq!(
        answer["result"]["structuredContent"]["done"], false,
        "{answer}"
    );

    sw.kill9().await;
    sw.restart().await;
    // The session comes back on its id, and the same calls make the same
    // streams rmcp numbers as before, under other ids.
    let (_open, after) = waiting(&sw, &session, 4).await;
    assert_ne!(after, before, "an id minted before the restart too");
    // rmcp's own part of the ids is the same: only the tag of the
    // session's life tells them apart.
    let own = |id: &str| id.rsplit_once('-').map(|(_, own)| own.to_owned());
    assert_eq!(own(&after), own(&before), "{before} {after}");

    // The old id names no stream of the new daemon, not even the wait in
    // flight that rmcp numbers as the old one.
    let refused = resume(&sw, &session, &before).await;
    assert_eq!(refused.status(), 404, "resume after {before}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "not_found", "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("cannot be resumed"), "{body}");
    // The new daemon's own id still resumes the wait.
    let resumed = resume(&sw, &session, &after).await;
    assert_eq!(resumed.status(), 200, "a resume within the new daemon");
    let answer = Events::new(resumed).answer(5).await;
    assert_eq!(
        answer["result"]["structuredContent"]["done"], false,
        "{answer}"
    );
}
