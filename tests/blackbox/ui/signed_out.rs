//! A token the daemon stops accepting, in headless Chromium against the
//! real daemon: an observer token minted for a few seconds expires under
//! an open overview, and the page is signed out, not half so: the view is
//! stopped and emptied (no read of it goes on, none with `Bearer null`),
//! the header names nobody and offers no Sign out, the form says why; a
//! new sign-in on the same page works. Then the addresses that name no
//! view: `#/task/garbage` and `#/nonsense` say what was asked, and
//! `#/tasks?since=garbage` says the time is none.

use std::time::Duration;

use serde_json::json;

use crate::daemon::Swarmd;
use crate::ui::Browser;

const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

/// An observer token that expires after `ttl` seconds.
async fn short_observer_token(sw: &Swarmd, ttl: u32) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["token", "mint", "--role", "observer", "--ttl"])
        .arg(ttl.to_string())
        .arg("--config")
        .arg(sw.dir().join("swarmd.toml"))
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_refused_token_leaves_a_signed_out_page_that_reads_nothing() {
    let sw = Swarmd::new(AGENTS).start().await;
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    let token = short_observer_token(&sw, 4).await;
    browser.sign_in(&token).await;
    browser.record().await;
    assert_eq!(browser.text("#who").await, "observer");
    // The overview reads the daemon every 5 s: once the token has expired,
    // a read is refused and the page signs out.
    browser
        .until(
            "the overview",
            "return document.getElementById('ov-running') !== null",
        )
        .await;
    let out_at = browser
        .until(
            "the sign-in form after the token expired",
            "return !document.getElementById('signin').hidden && performance.now()",
        )
        .await
        .as_f64()
        .unwrap();
    // Longer than the overview's 5 s between reads and the feed's retries.
    tokio::time::sleep(Duration::from_millis(6500)).await;
    let requests = browser.js("return window.__requests").await;
    let requests = requests.as_array().unwrap();
    assert!(!requests.is_empty(), "the page read nothing at all");
    for request in requests {
        assert_eq!(
            request["auth"],
            json!(format!("Bearer {token}")),
            "a request without the token: {request}"
        );
        assert!(
            request["at"].as_f64().unwrap() <= out_at,
            "a request after the sign-out: {request}"
        );
    }
    let page = browser
        .js("return {
               who: document.getElementById('who').textContent,
               signout: document.getElementById('signout').hidden,
               nav: document.getElementById('nav').hidden,
               live: document.getElementById('live').dataset.state,
               view: document.getElementById('view').childNodes.length,
               error: document.getElementById('signin-error').textContent,
               token: sessionStorage.getItem('swarmd.token'),
             }")
        .await;
    assert_eq!(
        page,
        json!({"who": "", "signout": true, "nav": true, "live": "signedout", "view": 0,
               "error": "The daemon refused the token; sign in again.", "token": null})
    );

    // Signing in again on the same page works.
    browser.sign_in(&sw.admin).await;
    assert_eq!(browser.text("#who").await, "admin");
    browser
        .until(
            "the overview again",
            "return document.getElementById('ov-running') !== null",
        )
        .await;

    // Addresses that name no view say so, naming what was asked.
    browser.show("#/task/garbage").await;
    let said = browser
        .until(
            "the unknown task",
            "const e = document.getElementById('not-found'); return e && e.textContent",
        )
        .await;
    assert!(said.as_str().unwrap().contains("garbage"), "{said}");
    assert_eq!(
        browser
            .js("return document.getElementById('ov-running')")
            .await,
        serde_json::Value::Null,
        "not the overview"
    );
    browser.show("#/nonsense").await;
    let said = browser
        .until(
            "the unknown view",
            "const e = document.getElementById('not-found');
             return e && e.textContent.includes('#/nonsense') && e.textContent",
        )
        .await;
    assert_eq!(said, json!("No view #/nonsense."));
    // A time that is none is refused as the other bad filters are.
    browser.show("#/tasks?since=garbage").await;
    let said = browser
        .until(
            "the refused time",
            "const e = document.getElementById('tasks-error'); return e && e.textContent",
        )
        .await;
    assert!(
        said.as_str()
            .is_some_and(|s| s.contains("since") && s.contains("garbage")),
        "{said}"
    );
    browser.client.clone().close().await.unwrap();
}
