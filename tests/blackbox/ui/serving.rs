//! The dashboard's assets over plain HTTP: served from the binary under
//! `/ui/` with the strict CSP, nosniff and no framing (an unknown path's
//! 404 too), revalidated by ETag, compressed when asked, and no data
//! without a token.

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::harness::{Daemon, parts};
use crate::sse::Sse;

#[tokio::test]
async fn the_dashboard_is_served_with_a_strict_policy_and_an_etag() {
    let daemon = Daemon::start().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let slash = no_redirects.get(daemon.url("/ui/")).send().await.unwrap();
    assert_eq!(slash.status(), 308);
    assert_eq!(slash.headers()["location"], "/ui");
    let page = daemon.http.get(daemon.url("/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text().await.unwrap();
    // No inline script or style: every script is a module from /ui/.
    assert!(html.contains(r#"<script type="module" src="/ui/js/app.js"></script>"#));
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(!html.contains("style="), "{html}");
    // The sign-in form's field has no name: a form the browser submits
    // itself (the script not loaded yet) never puts the token in the URL.
    let field = html
        .split("<input")
        .find(|tag| tag.contains(r#"id="token""#))
        .and_then(|tag| tag.split('>').next())
        .unwrap_or_else(|| panic!("no token field: {html}"));
    assert!(!field.contains("name="), "{field}");
    let handler = html
        .split(|c: char| c.is_whitespace() || c == '<')
        .find(|word| word.starts_with("on") && word.contains('='));
    assert_eq!(handler, None, "an inline handler in {html}");

    // A module: its type, its ETag, a 304 for the same ETag.
    let js = daemon
        .http
        .get(daemon.url("/ui/js/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("javascript")
    );
    assert!(js.headers().contains_key("content-security-policy"));
    let etag = js.headers()["etag"].clone();
    let again = daemon
        .http
        .get(daemon.url("/ui/js/app.js"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // Compressed when the client asks.
    let gz = daemon
        .http
        .get(daemon.url("/ui/js/task.js"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(gz.status(), 200);
    assert_eq!(gz.headers()["content-encoding"], "gzip");

    // An unknown asset is a 404 with the API's error body.
    let missing = daemon
        .http
        .get(daemon.url("/ui/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The data behind the page still needs a token.
    let status = daemon
        .http
        .get(daemon.url("/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 401);
}

/// Every answer under `/ui` carries the dashboard's headers, an unknown
/// path's `404` (the API's `{error, code}`) too; the page names its icon,
/// an asset of its own, so the browser asks for no `/favicon.ico`.
#[tokio::test]
async fn an_unknown_path_under_ui_is_a_404_with_the_headers() {
    let daemon = Daemon::start().await;
    for path in ["/ui/nonexistent", "/ui/js/nope.js", "/ui/a/b/c"] {
        let answer = daemon.http.get(daemon.url(path)).send().await.unwrap();
        assert_eq!(answer.status(), 404, "{path}");
        let headers = answer.headers().clone();
        let csp = headers
            .get("content-security-policy")
            .unwrap_or_else(|| panic!("{path}: no CSP in {headers:?}"))
            .to_str()
            .unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(
            csp.contains("require-trusted-types-for 'script'"),
            "{path}: {csp}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["code"], "not_found", "{path}: {body}");
        assert!(body["error"].is_string(), "{path}: {body}");
    }
    // A POST to a path under `/ui` too.
    let posted = daemon
        .http
        .post(daemon.url("/ui/nonexistent"))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 404);
    assert!(posted.headers().contains_key("content-security-policy"));

    // The icon: linked from the page, served from `/ui` under the policy
    // (`img-src 'self'`).
    let html = daemon
        .http
        .get(daemon.url("/ui"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains(r#"<link rel="icon" href="/ui/favicon.svg" type="image/svg+xml">"#),
        "{html}"
    );
    let icon = daemon
        .http
        .get(daemon.url("/ui/favicon.svg"))
        .send()
        .await
        .unwrap();
    assert_eq!(icon.status(), 200);
    assert!(
        icon.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("image/svg+xml"),
        "{:?}",
        icon.headers()
    );
    assert!(icon.text().await.unwrap().starts_with("<svg"));
}

/// What the dashboard's feed asks for: the event log without `output`
/// events, paged and live, the cursor stepping over what it skips.
#[tokio::test]
async fn the_event_log_sends_only_the_kinds_asked_for() {
    let daemon = Daemon::start().await;
    let create = |prompt: &'static str| {
        daemon
            .post("/v1/tasks", &daemon.admin)
            .json(&json!({"agent": "cat", "prompt": prompt, "wait_secs": 10}))
            .send()
    };
    for prompt in ["one", "two"] {
        let (status, body) = parts(create(prompt).await.unwrap()).await;
        assert_eq!((status, &body["status"]), (201, &json!("pass")), "{body}");
    }
    let (status, all) = parts(
        daemon
            .get("/v1/events?limit=1000", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{all}");
    let last = all["next_seq"].as_u64().unwrap();
    let kinds_of = |page: &Value| -> Vec<String> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"]["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(kinds_of(&all).contains(&"output".to_owned()), "{all}");
    // `/v1/status` names the last durable event, where a follower starts.
    let (status, body) = parts(
        daemon
            .get("/v1/status", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["event_seq"], last, "{body}");
    assert_eq!(body["caller"], json!({"role": "admin"}));

    let path = "/v1/events?limit=1000&kinds=task_created,task_finished";
    let (status, page) = parts(daemon.get(path, &daemon.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        kinds_of(&page),
        [
            "task_created",
            "task_finished",
            "task_created",
            "task_finished"
        ]
    );
    // The cursor is past everything read, not only what was sent.
    assert_eq!(page["next_seq"], last);

    // Live: stored ones first, then new ones, never another kind.
    let mut sse = Sse::open(&daemon, "/v1/events?kinds=task_created", None).await;
    for _ in 0..2 {
        assert_eq!(sse.data().await.1["kind"], "task_created");
    }
    let (status, body) = parts(create("three").await.unwrap()).await;
    assert_eq!(status, 201, "{body}");
    let (id, event) = sse.data().await;
    assert_eq!(event["kind"], "task_created");
    assert_eq!(event["task_id"], body["task_id"]);
    let three_seq = id.parse::<u64>().unwrap();
    assert!(three_seq > last);

    // A stream that steps over events it does not send says how far it
    // read, as an `id:`-only event at most once a second, so a client
    // resumes from there; it sends no data of the other kinds.
    let response = daemon
        .get("/v1/events?kinds=senior_asked", &daemon.admin)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let traffic = {
        let (url, admin) = (daemon.url("/v1/tasks"), daemon.admin.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            loop {
                let _ = http
                    .post(&url)
                    .bearer_auth(&admin)
                    .json(&json!({"agent": "cat", "prompt": "more"}))
                    .send()
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    };
    let mut text = String::new();
    let progress = loop {
        let chunk = tokio::time::timeout(crate::harness::PATIENCE, body.next())
            .await
            .expect("no progress id in time")
            .expect("the stream ended")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        let id = text
            .lines()
            .find_map(|line| line.strip_prefix("id: ").or(line.strip_prefix("id:")));
        if let Some(id) = id {
            break id.trim().parse::<u64>().unwrap();
        }
    };
    traffic.abort();
    assert!(progress > three_seq, "{progress} {text:?}");
    assert!(!text.contains("data:"), "{text:?}");

    for bad in ["kinds=nope", "kinds=task_created,,output", "kinds="] {
        let (status, body) = parts(
            daemon
                .get(&format!("/v1/events?{bad}"), &daemon.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        if bad == "kinds=" {
            // Empty means absent, as for every query parameter.
            assert_eq!(status, 200, "{bad}: {body}");
        } else {
            assert_eq!(
                (status, &body["code"]),
                (400, &json!("bad_request")),
                "{bad}: {body}"
            );
        }
    }
}
