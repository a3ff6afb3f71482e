//! Hostile clients, tenants: one operator session plays against another.
//! It pins work to the other's MainAI (`operator_sid`, over HTTP, MCP and
//! through a worker's sub-task), reads the other's tasks, outputs, events
//! and results (HTTP list, get, wait, output, audit; MCP `task`, `tasks`,
//! `output`, `wait`; WebSocket `subscribe`), cancels them, and continues
//! them (`continue_from` over HTTP, WebSocket and MCP). Every attempt is
//! refused: a pin with `403 forbidden`, everything naming the other's task
//! exactly as an unknown task is (`404 not_found`), and nothing reaches the
//! other's MainAI. The owner, the admin and an observer still see it all.

use serde_json::{Value, json};

use crate::daemon::{Login, Swarmd, Ws, delegate_frame};
use crate::harness::parts;

const AGENTS: &str = r#"
[agents.helper]
kind = "operator"

[agents.planner]
kind = "operator"
operator_role = "main-ai"
allow_subtasks = true

[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// An id no task has.
const ABSENT: &str = "T-0190a1b2c3d47e8f9a0b1c2d3e4f5a6b";

/// An observer token for the daemon's keys.
async fn observer(sw: &Swarmd) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args([
            "token", "mint", "--role", "observer", "--ttl", "600", "--config",
        ])
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// `GET path` with `bearer`: status and JSON body.
async fn get(sw: &Swarmd, path: &str, bearer: &str) -> (u16, Value) {
    parts(sw.get(path, bearer).send().await.unwrap()).await
}

/// `POST /v1/tasks` with `bearer`: status and JSON body.
async fn create(sw: &Swarmd, bearer: &str, body: Value) -> (u16, Value) {
    parts(
        sw.post("/v1/tasks", bearer)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// The ids of the tasks a `GET /v1/tasks…` page lists.
async fn listed(sw: &Swarmd, path: &str, bearer: &str) -> Vec<String> {
    let (status, page) = get(sw, path, bearer).await;
    assert_eq!(status, 200, "{page}");
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A refusal that says no more than an unknown task's would.
fn assert_absent(what: &str, status: u16, body: &Value, task: &str) {
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("not_found")),
        "{what}: {body}"
    );
    let message = body["error"].as_str().unwrap();
    assert_eq!(message, format!("task {task} not found"), "{what}");
}

/// A minimal MCP client over Streamable HTTP: one session, JSON-RPC calls.
struct Mcp<'a> {
    sw: &'a Swarmd,
    token: String,
    session: String,
    next: u64,
}

impl<'a> Mcp<'a> {
    async fn open(sw: &'a Swarmd, token: &str) -> Mcp<'a> {
        let mut mcp = Mcp {
            sw,
            token: token.to_owned(),
            session: String::new(),
            next: 1,
        };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "tenants", "version": "0"}});
        let (session, answer) = mcp.post("initialize", init, true).await;
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        mcp.session = session.expect("an MCP session id");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let sent = mcp.request(&note).send().await.unwrap();
        assert!(sent.status().is_success(), "{}", sent.status());
        mcp
    }

    fn request(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .sw
            .post("/mcp", &self.token)
            .header("Accept", "application/json, text/event-stream")
            .json(body);
        if !self.session.is_empty() {
            request = request
                .header("Mcp-Session-Id", &self.session)
                .header("MCP-Protocol-Version", "2025-06-18");
        }
        request
    }

    /// One JSON-RPC request; the session id header (when asked) and the
    /// response message.
    async fn post(&mut self, method: &str, params: Value, open: bool) -> (Option<String>, Value) {
        let id = self.next;
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.request(&body).send().await.unwrap();
        assert!(
            answer.status().is_success(),
            "{method}: {}",
            answer.status()
        );
        let session = open
            .then(|| answer.headers().get("mcp-session-id"))
            .flatten()
            .map(|v| v.to_str().unwrap().to_owned());
        let text = answer.text().await.unwrap();
        let message = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .chain(std::iter::once(text.as_str()))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"));
        (session, message)
    }

    /// A tool call's result: `Ok(structured)` or `Err({error, code})`.
    async fn call(&mut self, tool: &str, args: Value) -> Result<Value, Value> {
        let params = json!({"name": tool, "arguments": args});
        let (_, message) = self.post("tools/call", params, false).await;
        let result = &message["result"];
        assert!(result.is_object(), "{tool}: {message}");
        if result["isError"] == true {
            let text = result["content"][0]["text"].as_str().unwrap();
            return Err(serde_json::from_str(text).unwrap());
        }
        Ok(result["structuredContent"].clone())
    }
}

/// A finished `cat` task the session `owner` created.
async fn finished_task(sw: &Swarmd, owner: &Login, prompt: &str) -> String {
    let (status, body) = create(
        sw,
        &owner.token,
        json!({"agent": "cat", "prompt": prompt, "wait_secs": 20}),
    )
    .await;
    assert_eq!((status, &body["status"]), (201, &json!("pass")), "{body}");
    body["task_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn only_the_admin_or_the_session_itself_pins_a_task_to_a_session() {
    let sw = Swarmd::new(AGENTS).start().await;
    let victim = sw.login(json!({"roles": ["main-ai"]})).await;
    let attacker = sw.login(json!({})).await;
    let mut victim_ws = sw.connect(&victim).await;
    let mut attacker_ws = sw.connect(&attacker).await;

    // Over HTTP: pinned to the victim, to a session that does not exist
    // (the same answer: the attacker learns nothing of which sessions
    // exist), and with a worker's handle of a task the attacker owns.
    for sid in [victim.sid.as_str(), "S-00000000000000000000000000000000"] {
        let (status, body) = create(
            &sw,
            &attacker.token,
            json!({"agent": "helper", "prompt": "run my prompt with your tools",
                   "operator_sid": sid}),
        )
        .await;
        assert_eq!(
            (status, &body["code"]),
            (403, &json!("forbidden")),
            "{body}"
        );
        assert!(
            body["error"].as_str().unwrap().contains("operator_sid"),
            "{body}"
        );
    }
    // Over MCP `spawn` and `spawn_many`.
    let mut mcp = Mcp::open(&sw, &attacker.token).await;
    let pinned = json!({"agent": "helper", "prompt": "run this", "operator_sid": victim.sid});
    let refused = mcp.call("spawn", pinned.clone()).await.unwrap_err();
    assert_eq!(refused["code"], "forbidden", "{refused}");
    let many = mcp
        .call("spawn_many", json!({"tasks": [pinned]}))
        .await
        .unwrap();
    assert_eq!(
        (&many["created"], &many["results"][0]["code"]),
        (&json!(0), &json!("forbidden")),
        "{many}"
    );
    // A worker of the attacker's own task pins a sub-task to the victim.
    attacker_ws
        .send(delegate_frame("a-1", "planner", "plan"))
        .await;
    let spawn = attacker_ws.recv_type("spawn").await;
    let handle = spawn["worker_handle"].as_str().unwrap().to_owned();
    let (status, body) = create(
        &sw,
        &handle,
        json!({"agent": "helper", "prompt": "sub", "operator_sid": victim.sid}),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (403, &json!("forbidden")),
        "{body}"
    );

    // The session pins to itself, and the admin to anyone.
    let (status, own) = create(
        &sw,
        &attacker.token,
        json!({"agent": "helper", "prompt": "mine", "operator_sid": attacker.sid}),
    )
    .await;
    assert_eq!(status, 201, "{own}");
    // Its own `spawn` comes to it.
    attacker_ws
        .recv_until(|f| f["type"] == "spawn" && f["task_id"] == own["task_id"])
        .await;
    let (status, admins) = create(
        &sw,
        &sw.admin,
        json!({"agent": "helper", "prompt": "from the admin", "operator_sid": victim.sid}),
    )
    .await;
    assert_eq!(status, 201, "{admins}");
    // The victim's first `spawn` is the admin's task: nothing the attacker
    // tried reached it.
    let first = victim_ws.recv_type("spawn").await;
    assert_eq!(first["task_id"], admins["task_id"], "{first}");
    let (_, all) = get(&sw, "/v1/tasks", &sw.admin).await;
    let pinned: Vec<&Value> = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["operator_sid"] == victim.sid.as_str())
        .collect();
    assert_eq!(pinned.len(), 1, "{all}");
}

#[tokio::test]
async fn a_session_reads_continues_and_cancels_only_its_own_tasks() {
    let sw = Swarmd::new(AGENTS).start().await;
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let other = sw.login(json!({})).await;
    let observer = observer(&sw).await;
    let theirs = finished_task(&sw, &owner, "the owner's secret prompt").await;
    let mine = finished_task(&sw, &other, "the other's prompt").await;

    // HTTP reads: the owner's task is an unknown task to the other session.
    let unknown = |path: &str| path.replace(&theirs, ABSENT);
    for path in [
        format!("/v1/tasks/{theirs}"),
        format!("/v1/tasks/{theirs}/wait?timeout_secs=1"),
        format!("/v1/tasks/{theirs}/output"),
    ] {
        let (status, body) = get(&sw, &path, &other.token).await;
        assert_absent(&path, status, &body, &theirs);
        let (status, body) = get(&sw, &unknown(&path), &other.token).await;
        assert_absent(&path, status, &body, ABSENT);
        // The owner, the admin and an observer read it.
        for bearer in [&owner.token, &sw.admin, &observer] {
            let (status, body) = get(&sw, &path, bearer).await;
            assert_eq!(status, 200, "{path}: {body}");
        }
    }
    let stream = sw
        .get(&format!("/v1/tasks/{theirs}/output"), &other.token)
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let (status, body) = parts(stream).await;
    assert_absent("the output stream", status, &body, &theirs);
    // Lists: only the caller's own tasks, whatever the filter asks for.
    for path in [
        "/v1/tasks".to_owned(),
        format!("/v1/tasks?session={}", owner.sid),
        "/v1/tasks?q=secret".to_owned(),
    ] {
        let ids = listed(&sw, &path, &other.token).await;
        assert!(!ids.contains(&theirs), "{path}: {ids:?}");
    }
    assert_eq!(
        listed(&sw, "/v1/tasks", &other.token).await,
        std::slice::from_ref(&mine)
    );
    assert!(
        listed(&sw, "/v1/tasks", &owner.token)
            .await
            .contains(&theirs)
    );
    for bearer in [&sw.admin, &observer] {
        let ids = listed(&sw, "/v1/tasks", bearer).await;
        assert!(ids.contains(&theirs) && ids.contains(&mine), "{ids:?}");
    }
    let (status, audit) = get(&sw, "/v1/audit?limit=1000", &other.token).await;
    assert_eq!(status, 200, "{audit}");
    let records = audit["records"].as_array().unwrap();
    assert!(
        records.iter().all(|r| r["session"] == other.sid.as_str()),
        "{audit}"
    );

    // Cancel and continue: an unknown task too.
    let (status, body) = parts(
        sw.post(&format!("/v1/tasks/{theirs}/cancel"), &other.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_absent("cancel", status, &body, &theirs);
    let (status, body) = create(
        &sw,
        &other.token,
        json!({"prompt": "go on", "continue_from": theirs}),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    // Over the socket: `continue_from`, `subscribe` and `cancel_task`.
    let mut ws: Ws = sw.connect(&other).await;
    ws.send(
        json!({"type": "spawn_task", "req_id": "w-1", "agent": "cat",
                   "prompt": "go on", "continue_from": theirs}),
    )
    .await;
    ws.send(
        json!({"type": "subscribe", "req_id": "w-2", "task_id": theirs,
                   "after_seq": 0}),
    )
    .await;
    ws.send(json!({"type": "cancel_task", "req_id": "w-3", "task_id": theirs}))
        .await;
    // The three answers come in any order; a `task_event` is not one.
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 3 {
        let (frame, _) = ws
            .recv_until(|f| f["req_id"].is_string() && f["type"] != "task_event")
            .await;
        answers.insert(frame["req_id"].as_str().unwrap().to_owned(), frame);
    }
    for (req_id, refused) in &answers {
        assert_eq!(
            (&refused["type"], &refused["code"]),
            (&json!("error"), &json!("not_found")),
            "{req_id}: {refused}"
        );
    }

    // MCP: `task`, `output`, `wait`, `tasks`, `cancel` and `spawn`.
    let mut mcp = Mcp::open(&sw, &other.token).await;
    let by_id = json!({"task_id": theirs});
    for (tool, args) in [
        ("task", by_id.clone()),
        ("output", by_id.clone()),
        ("cancel", by_id),
        ("wait", json!({"task_ids": [theirs], "timeout_secs": 1})),
        ("spawn", json!({"prompt": "go on", "continue_from": theirs})),
    ] {
        let refused = mcp.call(tool, args).await.unwrap_err();
        assert_eq!(refused["code"], "not_found", "{tool}: {refused}");
    }
    let page = mcp.call("tasks", json!({})).await.unwrap();
    let ids: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine.as_str()], "{page}");

    // The owner continues its own task; the admin reads it all still.
    let (status, body) = create(
        &sw,
        &owner.token,
        json!({"prompt": "go on", "continue_from": theirs, "wait_secs": 20}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let view = sw.task(&theirs).await;
    assert_eq!(view["status"], "pass", "{view}");
}
