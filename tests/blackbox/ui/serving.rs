//! The dashboard's assets over plain HTTP: served from the binary under
//! `/ui/` with the strict CSP, nosniff and no framing, revalidated by ETag,
//! compressed when asked, and no data without a token.

use crate::harness::Daemon;

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
