//! Intake bounds against the real binary: JSON nested past the depth bound is
//! refused at every intake (HTTP bodies, WebSocket frames, a Lua agent's
//! return value, a process agent's NDJSON lines), every read route stays
//! readable across a restart, and a worker cannot name a file in its output.

use std::time::Duration;

use serde_json::{Value, json};

use crate::daemon::{Incoming, Swarmd, process_gone};
use crate::harness::parts;

/// Agents: `hold` writes its handle to `@DIR@/<task>.handle` and waits for
/// `@DIR@/<task>.done`; `deep-lua`/`cyclic-lua`/`echo-lua` are Lua agents;
/// `deep-ndjson` prints a line nested 126 deep, then a fine Final.
const AGENTS: &str = r#"
[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '%s' \"$SWARM_WORKER_HANDLE\" > \"$DIR/$SWARM_TASK_ID.tmp\" && mv \"$DIR/$SWARM_TASK_ID.tmp\" \"$DIR/$SWARM_TASK_ID.handle\"; i=0; while [ ! -e \"$DIR/$SWARM_TASK_ID.done\" ] && [ \"$i\" -lt 600 ]; do sleep 0.05; i=$((i+1)); done"]
stdin = "none"
env = { DIR = "@DIR@", PATH = "/usr/bin:/bin" }

[agents.deep-lua]
kind = "lua"
script = "@DIR@/deep.lua"

[agents.cyclic-lua]
kind = "lua"
script = "@DIR@/cyclic.lua"

[agents.echo-lua]
kind = "lua"
script = "@DIR@/echo.lua"

[agents.deep-ndjson]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '%s\n' \"$LINE\"; echo '{\"type\":\"final\",\"ok\":true,\"content\":{\"kind\":\"inline\",\"value\":\"fine\"}}'"]
stdin = "none"
stream = "ndjson"
env = { LINE = "@LINE@", PATH = "/usr/bin:/bin" }
"#;

/// A JSON array nested `depth` levels around `1`.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

/// The same as text (serde_json's own writer recurses, so keep it short).
fn nested_text(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

async fn daemon() -> Swarmd {
    let deep_line = format!(
        r#"{{"type":"partial","chunk":{{"kind":"inline","value":{}}}}}"#,
        nested_text(126)
    );
    // The TOML basic string of the line, without its quotes.
    let line = Value::String(deep_line).to_string();
    let body = AGENTS.replace("@LINE@", &line[1..line.len() - 1]);
    let sw = Swarmd::new(&body);
    let dir = sw.dir().to_owned();
    std::fs::write(
        dir.join("deep.lua"),
        "local t = {}\nfor _ = 1, 100000 do t = { t } end\nreturn t\n",
    )
    .unwrap();
    std::fs::write(dir.join("cyclic.lua"), "local t = {}\nt.me = t\nreturn t\n").unwrap();
    std::fs::write(dir.join("echo.lua"), "return string.upper(prompt)\n").unwrap();
    sw.start().await
}

async fn handle_of(sw: &Swarmd, task: &str) -> String {
    let path = sw.dir().join(format!("{task}.handle"));
    for _ in 0..400 {
        if let Ok(handle) = std::fs::read_to_string(&path) {
            return handle;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no handle for {task}\n{}", sw.log());
}

/// Asserts a 400 `bad_request` that names the depth bound.
async fn refused_for_depth(response: reqwest::Response, what: &str) {
    let (status, body) = parts(response).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_request")),
        "{what}: {body}"
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("64 levels"), "{what}: {body}");
}

/// Every read route answers 200 and the task reads back.
async fn every_read_route_answers(sw: &Swarmd, task: &str) {
    let routes = [
        format!("/v1/tasks/{task}"),
        "/v1/tasks?limit=50".to_owned(),
        format!("/v1/tasks/{task}/output"),
        format!("/v1/tasks/{task}/wait?timeout_secs=1"),
        "/v1/events?after_seq=0".to_owned(),
    ];
    for route in routes {
        let (status, body) = parts(sw.get(&route, &sw.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{route}: {body}\n{}", sw.log());
    }
}

#[tokio::test]
async fn deep_json_is_refused_at_every_http_intake_and_reads_stay_up_across_a_restart() {
    let mut sw = daemon().await;
    let (status, created) = sw.create(json!({"agent": "hold", "prompt": "p"})).await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let handle = handle_of(&sw, &task).await;

    for depth in [126, 200] {
        let value = nested_text(depth);
        let partial =
            format!(r#"{{"type":"partial","chunk":{{"kind":"inline","value":{value}}}}}"#);
        let output = sw.post("/v1/worker/output", &handle).body(partial);
        refused_for_depth(output.send().await.unwrap(), "output").await;
        let result = sw
            .post("/v1/worker/result", &handle)
            .header("content-type", "application/json")
            .body(format!(r#"{{"value":{value}}}"#));
        refused_for_depth(result.send().await.unwrap(), "result").await;
        let submit = sw
            .post("/v1/worker/submit", &handle)
            .header("content-type", "application/json")
            .body(value.clone());
        refused_for_depth(submit.send().await.unwrap(), "submit").await;
        for field in ["input", "metadata"] {
            let inner = if field == "metadata" {
                format!(r#"{{"m":{value}}}"#)
            } else {
                value.clone()
            };
            let spawn = sw
                .post("/v1/tasks", &sw.admin)
                .header("content-type", "application/json")
                .body(format!(
                    r#"{{"agent":"hold","prompt":"p","{field}":{inner}}}"#
                ));
            refused_for_depth(spawn.send().await.unwrap(), field).await;
        }
    }

    // Inside the bound, a value is stored and read back whole.
    let (status, answer) = parts(
        sw.post("/v1/worker/result", &handle)
            .json(&json!({"value": nested(60)}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    std::fs::write(sw.dir().join(format!("{task}.done")), b"").unwrap();
    let done = sw.finished(&task).await;
    assert_eq!(done["result"]["value"], nested(60), "{done}");

    every_read_route_answers(&sw, &task).await;
    sw.sigterm();
    assert!(sw.exited().await.success());
    sw.restart().await;
    every_read_route_answers(&sw, &task).await;
    assert_eq!(sw.task(&task).await["result"]["value"], nested(60));
}

#[tokio::test]
async fn a_worker_cannot_post_a_file_ref() {
    let sw = daemon().await;
    let (status, created) = sw.create(json!({"agent": "hold", "prompt": "p"})).await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let handle = handle_of(&sw, &task).await;
    for path in ["keys.json", "blobs/../keys.json", "/etc/passwd"] {
        let event = json!({"type": "artifact", "name": "k", "content":
            {"kind": "file_ref", "path": path, "size": 10, "sha256": "0".repeat(64)}});
        let (status, body) = parts(
            sw.post("/v1/worker/output", &handle)
                .json(&event)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("bad_request")),
            "{path}: {body}"
        );
        assert!(
            body["error"].as_str().unwrap().contains("file_ref"),
            "{body}"
        );
    }
    let (status, body) = parts(
        sw.get(&format!("/v1/tasks/{task}/output"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["records"], json!([]), "nothing was stored: {body}");
    let keys = std::fs::read_to_string(sw.dir().join("state/keys.json")).unwrap();
    let secret: Value = serde_json::from_str(&keys).unwrap();
    let secret = secret["current"]["secret"].as_str().unwrap();
    assert!(!body.to_string().contains(secret));
    std::fs::write(sw.dir().join(format!("{task}.done")), b"").unwrap();
}

#[tokio::test]
async fn deep_ws_frames_get_an_error_frame_and_the_socket_stays_up() {
    let sw = daemon().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    for depth in [126, 200] {
        let value = nested_text(depth);
        let frames = [
            format!(
                r#"{{"type":"spawn_task","req_id":"s-{depth}","agent":"echo-lua","prompt":"p","input":{value}}}"#
            ),
            format!(
                r#"{{"type":"spawn_task","req_id":"m-{depth}","agent":"echo-lua","prompt":"p","metadata":{{"m":{value}}}}}"#
            ),
            format!(r#"{{"type":"spawn_ack","req_id":"a-{depth}","value":{value}}}"#),
            format!(r#"{{"type":"answer","req_id":"q-{depth}","value":{value}}}"#),
        ];
        for frame in frames {
            ws.send_message(tokio_tungstenite::tungstenite::Message::text(frame.clone()))
                .await;
            let Incoming::Frame(reply) = ws.next_within(Duration::from_secs(10)).await else {
                panic!("no answer to a deep frame\n{}", sw.log());
            };
            assert_eq!(reply["type"], "error", "{reply}");
            assert_eq!(reply["code"], "bad_request", "{reply}");
            assert!(
                reply["error"].as_str().unwrap().contains("64 levels"),
                "{reply}"
            );
            let req_id: Value = serde_json::from_str::<Value>(&frame)
                .map(|f| f["req_id"].clone())
                .unwrap_or(Value::Null);
            if depth < 128 && !frame.contains("\"metadata\"") {
                assert_eq!(reply["req_id"], req_id, "{reply}");
            }
        }
    }
    // The socket still works.
    ws.send(json!({"type": "spawn_task", "req_id": "ok", "agent": "echo-lua", "prompt": "hi"}))
        .await;
    let accepted = ws.recv_type("task_accepted").await;
    let task = accepted["task_id"].as_str().unwrap();
    assert_eq!(sw.finished(task).await["result"]["value"], "HI");
}

#[tokio::test]
async fn a_deep_or_cyclic_lua_value_fails_its_task_and_the_daemon_lives_on() {
    let sw = daemon().await;
    for agent in ["deep-lua", "cyclic-lua"] {
        let (status, created) = sw.create(json!({"agent": agent, "prompt": "p"})).await;
        assert_eq!(status, 201, "{created}");
        let task = created["task_id"].as_str().unwrap();
        let done = sw.finished(task).await;
        assert_ne!(done["status"], "pass", "{done}");
        assert!(
            done.to_string().contains("64 levels"),
            "{agent}: the reason names the bound: {done}"
        );
        assert!(!process_gone(sw.pid()), "the daemon survived {agent}");
    }
    let (status, created) = sw
        .create(json!({"agent": "echo-lua", "prompt": "still here", "wait_secs": 10}))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["result"]["value"], "STILL HERE", "{created}");
}

#[tokio::test]
async fn a_deep_ndjson_line_becomes_a_note_and_reads_stay_up() {
    let mut sw = daemon().await;
    let (status, created) = sw
        .create(json!({"agent": "deep-ndjson", "prompt": "p", "wait_secs": 10}))
        .await;
    assert_eq!(
        (status, &created["status"]),
        (201, &json!("pass")),
        "{created}"
    );
    let task = created["task_id"].as_str().unwrap().to_owned();
    let records = sw.output(&task).await;
    let note = records[0]["event"]["note"].as_str().unwrap_or_default();
    assert_eq!(
        records[0]["event"]["stage"], "invalid_output",
        "{records:?}"
    );
    assert!(note.contains("64 levels"), "{note}");
    every_read_route_answers(&sw, &task).await;
    sw.sigterm();
    assert!(sw.exited().await.success());
    sw.restart().await;
    every_read_route_answers(&sw, &task).await;
}
