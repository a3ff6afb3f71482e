//! A web page on the operator's machine against the real binary, with
//! `auth.loopback_login = true`: a cross-site form post, a page whose own
//! name was rebound to 127.0.0.1 (`Host: evil.example`), a foreign `Origin`
//! on the API, on `/mcp` and on a WebSocket upgrade. None of them logs a
//! session in, reads a token or opens a socket; the daemon's own origin
//! (the dashboard) and non-browser clients go on working.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::harness::{expect_error, parts};

const CONFIG: &str = r#"
[auth]
loopback_login = true

[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// The sessions the admin sees.
async fn sessions(sw: &Swarmd) -> usize {
    let (status, list) = parts(sw.get("/v1/operators", &sw.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{list}");
    list.as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_rebinding_page_reads_nothing_and_logs_nothing_in() {
    let sw = Swarmd::new(CONFIG).start().await;
    let port = sw.base.rsplit(':').next().unwrap().to_owned();
    let evil = format!("evil.example:{port}");

    // The rebinding page's login: its Host is its own name.
    let login = sw
        .http
        .post(sw.url("/v1/operators"))
        .header("host", &evil)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(login, 421, "host_not_allowed").await;
    // Nor can it read with a credential it got elsewhere.
    let read = sw
        .get("/v1/tasks", &sw.admin)
        .header("host", &evil)
        .send()
        .await
        .unwrap();
    expect_error(read, 421, "host_not_allowed").await;
    let mcp = sw
        .post("/mcp", &sw.admin)
        .header("host", &evil)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize())
        .send()
        .await
        .unwrap();
    expect_error(mcp, 421, "host_not_allowed").await;
    assert_eq!(sessions(&sw).await, 0);

    // Loopback names and literals are answered.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let ok = sw
            .get("/healthz", "")
            .header("host", host.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{host}");
    }
}

#[tokio::test]
async fn a_cross_site_page_cannot_log_in_post_or_open_a_socket() {
    let sw = Swarmd::new(CONFIG).start().await;
    let evil = "https://evil.example";

    // The form post a browser sends without a preflight.
    let form = sw
        .http
        .post(sw.url("/v1/operators"))
        .header("origin", evil)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(form, 403, "origin_not_allowed").await;
    // Without an Origin (a browser that hides it), text/plain is still no login.
    let plain = sw
        .http
        .post(sw.url("/v1/operators"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    expect_error(plain, 415, "unsupported_media_type").await;
    let empty = sw.http.post(sw.url("/v1/operators")).send().await.unwrap();
    expect_error(empty, 415, "unsupported_media_type").await;
    assert_eq!(sessions(&sw).await, 0, "no cross-site login was stored");

    // A foreign page with a stolen credential is refused on every surface.
    let create = sw
        .post("/v1/tasks", &sw.admin)
        .header("origin", evil)
        .json(&json!({"agent": "cat", "prompt": "p"}))
        .send()
        .await
        .unwrap();
    expect_error(create, 403, "origin_not_allowed").await;
    let mcp = sw
        .post("/mcp", &sw.admin)
        .header("origin", evil)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize())
        .send()
        .await
        .unwrap();
    expect_error(mcp, 403, "origin_not_allowed").await;
    let other_port = sw
        .post("/v1/tasks", &sw.admin)
        .header("origin", "http://127.0.0.1:1")
        .json(&json!({"agent": "cat", "prompt": "p"}))
        .send()
        .await
        .unwrap();
    expect_error(other_port, 403, "origin_not_allowed").await;

    // A non-browser client logs in; the daemon's own page may too.
    let (status, login) = parts(
        sw.http
            .post(sw.url("/v1/operators"))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{login}");
    let (status, own) = parts(
        sw.http
            .post(sw.url("/v1/operators"))
            .header("origin", sw.base.as_str())
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{own}");

    // The socket upgrade from a foreign page is refused; from none it opens.
    let sid = login["sid"].as_str().unwrap();
    let token = login["token"].as_str().unwrap();
    let upgrade = |origin: Option<&str>| {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = sw
            .ws_url(&format!("/v1/operators/{sid}/ws"))
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        if let Some(origin) = origin {
            request
                .headers_mut()
                .insert("origin", origin.parse().unwrap());
        }
        tokio_tungstenite::connect_async(request)
    };
    match upgrade(Some(evil)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403);
        }
        other => panic!("a foreign page opened the socket: {:?}", other.map(|_| ())),
    }
    assert!(
        upgrade(None).await.is_ok(),
        "a plain client opens its socket"
    );

    let scrape = sw.metrics().await;
    assert!(
        scrape.contains("swarmd_requests_refused_total{reason=\"origin\"}"),
        "{scrape}"
    );
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "0"}
        }
    })
}
