//! Hostile MCP clients over plain HTTP at `/mcp`: a flood of `initialize`
//! requests with and without the protocol header, one credential trying to
//! fill the whole session table, a credential posting into, streaming from
//! or deleting a session another opened, JSON nested past the intake bound
//! in tool arguments, an `initialize` past its bound, and a foreign `Host`
//! or `Origin`. Asserts the caps
//! count what is opened, each credential keeps its share (the admin
//! always), a session answers only its opener, no session id reaches the
//! log, deep arguments are refused, and rebinding names are turned away.

use serde_json::{Value, json};

use crate::harness::{Daemon, PATIENCE, expect_error, parts};

/// The initialize-era revision the raw requests speak.
const REVISION: &str = "2025-11-25";

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": REVISION, "capabilities": {},
                   "clientInfo": {"name": "hostile", "version": "0"}}
    })
}

/// A POST to `/mcp` as `bearer`, inside `session` when given.
fn post(
    daemon: &Daemon,
    bearer: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let request = daemon
        .http
        .post(daemon.url("/mcp"))
        .bearer_auth(bearer)
        .header("Accept", "application/json, text/event-stream")
        .json(body);
    match session {
        Some(id) => request
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", REVISION),
        None => request,
    }
}

/// Opens an MCP session as `bearer`, with the protocol header when `header`
/// (the header rmcp ignores for the handshake): the answer as it came.
async fn open(daemon: &Daemon, bearer: &str, header: bool) -> reqwest::Response {
    let request = post(daemon, bearer, None, &initialize());
    let request = if header {
        request.header("MCP-Protocol-Version", REVISION)
    } else {
        request
    };
    request.send().await.unwrap()
}

/// Opens a session and completes the handshake; its id.
async fn session(daemon: &Daemon, bearer: &str) -> String {
    let answer = open(daemon, bearer, true).await;
    assert_eq!(answer.status(), 200, "{}", daemon.log());
    let id = answer.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post(daemon, bearer, Some(&id), &initialized)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
    id
}

/// The JSON-RPC answer to request `id` in an SSE (or JSON) response body.
async fn answer_to(response: reqwest::Response, id: u64) -> Value {
    let status = response.status();
    let text = tokio::time::timeout(PATIENCE, response.text())
        .await
        .expect("the answer arrives")
        .unwrap();
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer to request {id} in {text}"))
}

/// Calls `tool` with `arguments` inside `session`; the tool result.
async fn call(daemon: &Daemon, bearer: &str, session: &str, tool: &str, arguments: Value) -> Value {
    let request = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}
    });
    let response = post(daemon, bearer, Some(session), &request)
        .send()
        .await
        .unwrap();
    let answer = answer_to(response, 7).await;
    answer["result"].clone()
}

/// Logs an operator session in as the admin; its `sws-` token.
async fn operator(daemon: &Daemon) -> String {
    let answer = daemon
        .post("/v1/operators", &daemon.admin)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(answer).await;
    assert_eq!(status, 201, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// A 429 `too_many_sessions` with a `Retry-After` of whole seconds.
async fn expect_refused(answer: reqwest::Response) {
    let retry = answer
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let seconds = retry.as_deref().and_then(|v| v.parse::<u64>().ok());
    assert!(seconds.is_some_and(|s| s > 0), "Retry-After: {retry:?}");
    expect_error(answer, 429, "too_many_sessions").await;
}

/// The value of the sample `name` in the daemon's metrics, 0 when absent.
async fn metric(daemon: &Daemon, name: &str) -> f64 {
    let text = daemon
        .get("/metrics", &daemon.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A JSON array nested `depth` levels around `1`.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

#[tokio::test]
async fn the_protocol_header_does_not_slip_past_the_session_cap() {
    let daemon = Daemon::start_with("[mcp]\nmax_sessions = 3\n").await;
    let token = operator(&daemon).await;
    for n in 0..3 {
        let answer = open(&daemon, &token, n % 2 == 0).await;
        assert_eq!(answer.status(), 200, "session {n}");
    }
    // With the header or without, a fourth session is not opened.
    expect_refused(open(&daemon, &token, true).await).await;
    expect_refused(open(&daemon, &token, false).await).await;
}

#[tokio::test]
async fn an_operator_flood_leaves_the_admin_its_share() {
    let daemon = Daemon::start_with("[mcp]\nmax_sessions = 4\n").await;
    let token = operator(&daemon).await;
    let mut opened = 0;
    for _ in 0..12 {
        let answer = open(&daemon, &token, true).await;
        if answer.status() == 429 {
            expect_refused(answer).await;
            break;
        }
        assert_eq!(answer.status(), 200);
        opened += 1;
    }
    assert_eq!(opened, 4, "the operators' table holds mcp.max_sessions");
    let other = operator(&daemon).await;
    expect_refused(open(&daemon, &other, true).await).await;

    // The admin is not among those that filled it.
    let answer = open(&daemon, &daemon.admin, true).await;
    assert_eq!(answer.status(), 200, "{}", daemon.log());
    let refused = metric(
        &daemon,
        "swarmd_mcp_sessions_refused_total{reason=\"total\"}",
    )
    .await;
    assert_eq!(refused, 2.0);
}

#[tokio::test]
async fn each_credential_has_its_own_share() {
    let daemon =
        Daemon::start_with("[mcp]\nmax_sessions = 8\nmax_sessions_per_credential = 2\n").await;
    let (first, second) = (operator(&daemon).await, operator(&daemon).await);
    for token in [&first, &daemon.admin] {
        for _ in 0..2 {
            assert_eq!(open(&daemon, token, true).await.status(), 200);
        }
        expect_refused(open(&daemon, token, true).await).await;
    }
    // The first credential's flood took nothing from the second.
    for _ in 0..2 {
        assert_eq!(open(&daemon, &second, false).await.status(), 200);
    }
    let refused = metric(
        &daemon,
        "swarmd_mcp_sessions_refused_total{reason=\"credential\"}",
    )
    .await;
    assert_eq!(refused, 2.0);
}

#[tokio::test]
async fn a_session_answers_only_the_credential_that_opened_it() {
    let daemon = Daemon::start().await;
    let own = session(&daemon, &daemon.admin).await;
    let intruder = operator(&daemon).await;
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});

    // Posting, streaming and deleting a foreign session are answered as for
    // a session that does not exist.
    let unknown = "0123456789abcdef0123456789abcdef";
    for id in [own.as_str(), unknown] {
        let (status, body) = parts(
            post(&daemon, &intruder, Some(id), &ping)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
        let stream = daemon
            .http
            .get(daemon.url("/mcp"))
            .bearer_auth(&intruder)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", REVISION)
            .send()
            .await
            .unwrap();
        expect_error(stream, 404, "not_found").await;
        let deleted = daemon
            .http
            .delete(daemon.url("/mcp"))
            .bearer_auth(&intruder)
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", REVISION)
            .send()
            .await
            .unwrap();
        expect_error(deleted, 404, "not_found").await;
    }

    // The opener's session is untouched.
    let answer = post(&daemon, &daemon.admin, Some(&own), &ping)
        .send()
        .await
        .unwrap();
    assert_eq!(answer_to(answer, 3).await["result"], json!({}));
    let log = daemon.log();
    assert!(!log.contains(&own), "a session id was logged:\n{log}");
}

#[tokio::test]
async fn an_initialize_past_its_bound_is_refused_and_opens_nothing() {
    let daemon = Daemon::start().await;
    // Params the session would keep for its life, and in the session
    // file rewritten at every open: refused, well under the body limit.
    let mut heavy = initialize();
    heavy["params"]["capabilities"]["experimental"] = json!({"pad": "x".repeat(64 * 1024)});
    let answer = post(&daemon, &daemon.admin, None, &heavy)
        .send()
        .await
        .unwrap();
    assert!(answer.headers().get("mcp-session-id").is_none());
    expect_error(answer, 413, "payload_too_large").await;
    // An ordinary one still opens.
    let answer = open(&daemon, &daemon.admin, true).await;
    assert_eq!(answer.status(), 200);
    assert!(answer.headers().get("mcp-session-id").is_some());
}

#[tokio::test]
async fn tool_arguments_nested_past_the_bound_are_refused() {
    let daemon = Daemon::start().await;
    let id = session(&daemon, &daemon.admin).await;

    // The arguments object is the HTTP body's level: input 63 deep fits.
    let fits = call(
        &daemon,
        &daemon.admin,
        &id,
        "spawn",
        json!({"agent": "cat", "prompt": "p", "input": nested(63)}),
    )
    .await;
    assert_eq!(fits["isError"], json!(false), "{fits}");
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "h"})).await;
    let handle = daemon.handle(&task, 1).await;
    for (tool, arguments) in [
        (
            "spawn",
            json!({"agent": "cat", "prompt": "p", "input": nested(64)}),
        ),
        (
            "spawn",
            json!({"agent": "cat", "prompt": "p", "input": nested(124)}),
        ),
        (
            "worker_submit",
            json!({"worker_handle": handle, "value": nested(124)}),
        ),
    ] {
        let result = call(&daemon, &daemon.admin, &id, tool, arguments).await;
        assert_eq!(result["isError"], json!(true), "{tool}: {result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        let error: Value = serde_json::from_str(text).unwrap();
        assert_eq!(error["code"], "bad_request", "{tool}: {error}");
        assert!(
            error["error"].as_str().unwrap().contains("64"),
            "{tool}: {error}"
        );
    }
    // The refused submit left the attempt open: a fine one still lands.
    let fine = call(
        &daemon,
        &daemon.admin,
        &id,
        "worker_submit",
        json!({"worker_handle": handle, "value": "done"}),
    )
    .await;
    assert_eq!(fine["isError"], json!(false), "{fine}");
    daemon.release(&task);
    assert_eq!(daemon.finished(&task).await["status"], "pass");
}

#[tokio::test]
async fn a_rebinding_host_or_a_foreign_origin_is_turned_away() {
    let daemon = Daemon::start().await;
    let port = daemon.base.rsplit(':').next().unwrap().to_owned();
    let with = |host: &str, origin: Option<&str>| {
        let request = post(&daemon, &daemon.admin, None, &initialize()).header("Host", host);
        match origin {
            Some(origin) => request.header("Origin", origin),
            None => request,
        }
        .send()
    };
    // A rebinding name and a foreign page are refused, by the daemon's own
    // guard or by rmcp's check behind it.
    for (host, origin) in [
        (format!("evil.example:{port}"), None),
        (format!("127.0.0.1:{port}"), Some("http://evil.example")),
    ] {
        let (status, body) = parts(with(&host, origin).await.unwrap()).await;
        assert!(
            matches!(status, 403 | 421),
            "{host} {origin:?}: {status} {body}"
        );
        assert!(body["code"].is_string(), "{body}");
    }
    // rmcp answers only the names the daemon is reached by, whatever passes
    // before it: an address it is not bound to is refused, with rmcp's reason.
    let (status, body) = parts(with(&format!("10.1.2.3:{port}"), None).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains("Host"), "{body}");
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let origin = format!("http://{host}");
        let answer = with(&host, Some(&origin)).await.unwrap();
        assert_eq!(answer.status(), 200, "{host}");
    }
}
