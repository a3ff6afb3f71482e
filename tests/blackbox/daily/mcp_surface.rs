//! The MCP surface a coding agent meets, played with the official Python
//! SDK over HTTP: `tools/list` holds swarmd's own tools only (the upstream
//! `mse_*` aliases are opt-in) with typed, standard JSON Schemas; closing a
//! session is answered as the SDK expects (no `Session termination failed`);
//! a client keeps its session across a daemon restart on the same state
//! directory (for its opener only, and not once deleted); and `task` shows
//! a coding task's branch and diff.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::daemon::{Swarmd, eventually};
use crate::mcp::{LEGACY, MODERN, Via, client, printed, run};
use crate::worktrees::{git, make_repo, recorded_artifact};

/// The formats of the JSON Schema 2020-12 vocabulary.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

const CAT: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// Every `format` string under `value`, with where it is.
fn formats(value: &Value, at: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get("format") {
                found.push((at.to_owned(), format.clone()));
            }
            for (key, inner) in map {
                formats(inner, &format!("{at}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                formats(inner, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// The object schema `schema` stands for, following `$ref` (into `root`'s
/// `$defs`) and `anyOf`/`oneOf` branches.
fn object_schema<'a>(root: &'a Value, schema: &'a Value) -> Option<&'a Value> {
    if schema.get("properties").is_some() {
        return Some(schema);
    }
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.strip_prefix("#/$defs/")?;
        return object_schema(root, &root["$defs"][name]);
    }
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|key| schema[key].as_array())
        .flatten()
        .find_map(|branch| object_schema(root, branch))
}

#[tokio::test]
async fn the_tool_list_is_swarmds_own_with_typed_standard_schemas() {
    let sw = Swarmd::new(CAT).start().await;
    let seen = run(&sw, Via::Http, MODERN, "tools", &sw.admin, &[]).await;
    let tools = seen["tools"].as_object().unwrap();

    let aliases: Vec<_> = tools.keys().filter(|n| n.starts_with("mse_")).collect();
    assert!(aliases.is_empty(), "upstream aliases listed: {aliases:?}");
    assert!(tools.contains_key("spawn") && tools.contains_key("task"));

    let mut found = Vec::new();
    for (name, tool) in tools {
        formats(&tool["input"], &format!("{name}/input"), &mut found);
        formats(&tool["output"], &format!("{name}/output"), &mut found);
    }
    let odd: Vec<_> = found
        .iter()
        .filter(|(_, format)| !STANDARD_FORMATS.contains(&format.as_str()))
        .collect();
    assert!(odd.is_empty(), "non-standard formats: {odd:?}");

    for tool in ["spawn", "spawn_many"] {
        let input = &tools[tool]["input"];
        let policy = if tool == "spawn" {
            &input["properties"]["policy"]
        } else {
            let entry = object_schema(input, &input["properties"]["tasks"]["items"])
                .unwrap_or_else(|| panic!("spawn_many's entries are objects: {input}"));
            &entry["properties"]["policy"]
        };
        let typed = object_schema(input, policy)
            .unwrap_or_else(|| panic!("{tool}: policy is typed: {policy}"));
        let properties = &typed["properties"];
        let typed_as = |field: &str, kind: &str| {
            let types = &properties[field]["type"];
            types == kind || types.as_array().is_some_and(|t| t.contains(&json!(kind)))
        };
        assert!(typed_as("max_attempts", "integer"), "{typed}");
        assert_eq!(properties["max_attempts"]["maximum"], 100, "{typed}");
        assert!(typed_as("retry_on", "array"), "{typed}");
        assert!(typed_as("max_cost_usd", "number"), "{typed}");
        assert_eq!(typed["additionalProperties"], false, "{typed}");
    }
    // The minimum of an unsigned integer survives the dropped format, and a
    // bound the tool enforces is stated.
    let after = &tools["output"]["input"]["properties"]["after_seq"];
    assert_eq!(after["minimum"], 0, "{after}");
    let wait = &tools["wait"]["input"]["properties"]["timeout_secs"];
    assert_eq!(
        (&wait["minimum"], &wait["maximum"]),
        (&json!(1), &json!(600)),
        "{wait}"
    );

    // A spawn through the typed policy still decodes it as the engine does.
    let bad = json!({"agent": "cat", "prompt": "x", "policy": {"max_attempts": 0}});
    let outcome = crate::mcp::call(&sw, Via::Http, &sw.admin, "spawn", bad).await;
    let body = crate::mcp::tool_error(&outcome);
    assert_eq!(body["code"], "bad_request", "{body}");

    // An alias is an unknown tool while the key is off.
    let joined = json!({"desc": "x"});
    let args = joined.to_string();
    let env = [
        ("MCP_TOOL", "mse_operator_join"),
        ("MCP_ARGS", args.as_str()),
    ];
    let (mut command, _state) = client(&sw, Via::Http, MODERN, "call", &sw.admin, &env);
    let output = command.output().await.unwrap();
    assert!(!output.status.success(), "an unknown tool is refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no tool named `mse_operator_join`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn closing_a_session_is_answered_as_the_sdks_expect() {
    let sw = Swarmd::new(CAT).start().await;
    let args = json!({"agent": "cat", "prompt": "{}"}).to_string();
    let env = [("MCP_TOOL", "spawn"), ("MCP_ARGS", args.as_str())];
    let (mut command, _state) = client(&sw, Via::Http, LEGACY, "call", &sw.admin, &env);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the client finished in time")
        .unwrap();
    let seen = printed(&sw, "call", &output);
    assert_eq!(seen["is_error"], false, "{seen}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("Session termination failed"),
        "the SDK complained on close: {stderr}"
    );

    // The same by hand: 200 to the DELETE, then the id is gone.
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    });
    let opened = sw
        .post("/mcp", &sw.admin)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let id = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let delete = |bearer: &str| {
        sw.http
            .delete(sw.url("/mcp"))
            .bearer_auth(bearer)
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
    };
    let closed = delete(&sw.admin).await.unwrap();
    assert_eq!(closed.status(), 200, "{:?}", closed.text().await);
    let again = delete(&sw.admin).await.unwrap();
    assert_eq!(again.status(), 404, "a closed session is unknown");
}

#[tokio::test]
async fn an_http_client_keeps_its_session_across_a_daemon_restart() {
    let mut sw = Swarmd::new(CAT).start().await;
    let pause = tempfile::tempdir().unwrap();
    let pause_dir = pause.path().display().to_string();
    let admin = sw.admin.clone();
    let env = [
        ("MCP_PAUSE", pause_dir.as_str()),
        ("SWARMD_ADMIN", admin.as_str()),
    ];
    let (mut command, _state) = client(&sw, Via::Http, LEGACY, "restart", &admin, &env);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = pause.path().join("ready");
    eventually("the client's first call", || ready.exists()).await;

    sw.kill9().await;
    sw.restart().await;
    std::fs::write(pause.path().join("go"), b"").unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the client finished in time")
        .unwrap();
    let seen = printed(&sw, "restart", &output);

    assert_eq!(seen["before"]["is_error"], false, "{seen}");
    assert_eq!(seen["after"]["is_error"], false, "{seen}");
    let waited = &seen["waited"]["structured"];
    assert_eq!(waited["tasks"][0]["status"], "pass", "{seen}");
    assert_eq!(waited["tasks"][0]["value"], json!({"n": 2}), "{seen}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("Session terminated"), "{stderr}");
}

/// `POST /mcp` of `message` with `bearer`, naming session `id` when given:
/// the status and the body's text.
async fn post_mcp(sw: &Swarmd, bearer: &str, id: Option<&str>, message: &Value) -> (u16, String) {
    let mut request = sw
        .post("/mcp", bearer)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(message);
    if let Some(id) = id {
        request = request.header("mcp-session-id", id);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    (status, header.unwrap_or(text))
}

#[tokio::test]
async fn a_session_comes_back_after_a_restart_for_its_opener_only() {
    let mut sw = Swarmd::new(CAT).start().await;
    let other = sw.login(json!({"roles": ["main-ai"]})).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    });
    let (status, id) = post_mcp(&sw, &sw.admin, None, &initialize).await;
    assert_eq!(status, 200, "{id}");
    let file = sw.dir().join("state/mcp-sessions.json");
    let meta = std::fs::metadata(&file).expect("the session is recorded");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    sw.kill9().await;
    sw.restart().await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Another credential naming the id learns nothing.
    let (status, body) = post_mcp(&sw, &other.token, Some(&id), &list).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = post_mcp(&sw, &sw.admin, Some(&id), &list).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"spawn\""), "{body}");

    // A deleted session stays gone, across a restart too.
    let closed = sw
        .http
        .delete(sw.url("/mcp"))
        .bearer_auth(&sw.admin)
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);
    sw.kill9().await;
    sw.restart().await;
    let (status, body) = post_mcp(&sw, &sw.admin, Some(&id), &list).await;
    assert_eq!(status, 404, "{body}");
}

/// `coder` adds a line to `notes.txt` in its worktree and exits; swarmd
/// commits it on the attempt's branch.
const CODER: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", "echo 'a line from the coder' >> notes.txt; echo done"]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

#[tokio::test]
async fn the_task_tool_shows_a_coding_tasks_branch_and_diff() {
    let sw = Swarmd::new(CODER).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    let sw = sw.start().await;
    let (status, body) = sw
        .create(json!({"agent": "coder", "prompt": "go", "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    sw.finished(&task).await;
    let recorded = recorded_artifact(&sw, &task).await;
    let branch = recorded["branch"].as_str().unwrap().to_owned();

    let args = json!({"task_id": task});
    let seen = crate::mcp::call(&sw, Via::Http, &sw.admin, "task", args).await;
    assert_eq!(seen["is_error"], false, "{seen}");
    let changes = &seen["structured"]["changes"];
    assert_eq!(changes["attempt"], 1, "{changes}");
    assert_eq!(changes["branch"], branch.as_str(), "{changes}");
    assert_eq!(
        changes["base"],
        git(&repo, &["rev-parse", "main"]).as_str(),
        "{changes}"
    );
    assert_eq!(
        changes["head"],
        git(&repo, &["rev-parse", &branch]).as_str(),
        "{changes}"
    );
    assert_eq!(changes["files"], json!(["notes.txt"]), "{changes}");
    assert_eq!(changes["insertions"], 1, "{changes}");
    assert_eq!(changes["deletions"], 0, "{changes}");
    assert_eq!(changes["truncated"], false, "{changes}");
    let diff = changes["diff"].as_str().unwrap();
    assert!(diff.contains("+a line from the coder"), "{diff}");
    assert_eq!(
        diff.trim_end(),
        git(&repo, &["diff", "main", &branch]).trim_end(),
        "{changes}"
    );
}
