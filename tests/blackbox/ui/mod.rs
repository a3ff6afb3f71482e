//! The dashboard (docs/dashboard.md) in a real browser: Debian's headless
//! Chromium driven over WebDriver (chromedriver, through `fantoccini`)
//! against the real daemon on loopback. `scripts/browser-env.sh` installs
//! Chromium and chromedriver when they are missing; a test that cannot get
//! them fails saying why. `serving` checks the HTTP side (embedded assets,
//! ETag, the CSP) without a browser; `dashboard` drives the pages.

mod branches;
mod counts;
mod dashboard;
mod diffs;
mod list_filters;
mod live_scope;
mod new_log;
mod owners;
mod reload;
mod runs;
mod screenshots;
mod serving;
mod signed_out;
mod spilled;
mod stream;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::harness::PATIENCE;

/// chromedriver's path, installed once per test run.
fn chromedriver() -> PathBuf {
    static DRIVER: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::installed(&DRIVER, "scripts/browser-env.sh", "headless Chromium")
}

/// A headless Chromium session. chromedriver runs in a process group of
/// its own, which Chromium joins; the whole group is killed when this is
/// dropped, so a failing test leaves no browser behind. Both write their
/// temporary files (the profile chromedriver makes, Chromium's singleton
/// socket) under `scratch`, which goes with the session.
pub(crate) struct Browser {
    pub client: Client,
    _driver: Child,
    group: i32,
    _scratch: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.group), Signal::SIGKILL);
    }
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Browser")
    }
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let scratch = tempfile::tempdir().expect("a scratch directory for the browser");
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .env("TMPDIR", scratch.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver does not start");
        let group = i32::try_from(driver.id().expect("chromedriver's pid")).unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=1280,900"]}),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("no WebDriver session from chromedriver: {error}"),
            }
        };
        Browser {
            client,
            _driver: driver,
            group,
            _scratch: scratch,
        }
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub(crate) async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until `script` (a function body) returns something truthy,
    /// and returns it; fails after `PATIENCE` with `what` and the last value.
    pub(crate) async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            // A script run while the page navigates fails: poll again.
            let value = self
                .client
                .execute(script, Vec::new())
                .await
                .unwrap_or(Value::Null);
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last value {value}; page:\n{}",
                self.js("return document.body.innerText").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The text (`textContent`) of the element matching `css`, once there.
    /// The ids of the task list's rows, in page order.
    pub(crate) async fn rows(&self) -> Vec<String> {
        let value = self
            .js("return [...document.querySelectorAll('#task-rows tr')].map((tr) => tr.dataset.id)")
            .await;
        serde_json::from_value(value).unwrap()
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e && [e.textContent]",
            json!(css)
        );
        let found = self.until(&format!("an element {css}"), &script).await;
        found[0].as_str().unwrap().to_owned()
    }

    /// A screenshot of the page, checked to be a PNG of more than a blank
    /// page; with `SWARMD_UI_SCREENSHOTS=<dir>` also written there as
    /// `<name>.png` (`scripts/ui-screenshots.sh` writes `docs/img/`).
    pub(crate) async fn capture(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}: not a PNG");
        assert!(
            png.len() > 10_000,
            "{name}: {} bytes is a blank page",
            png.len()
        );
        if let Ok(dir) = std::env::var("SWARMD_UI_SCREENSHOTS") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
        }
    }

    /// Clicks the element matching `css`, once there. A page that redraws
    /// (a run's page does at every change of the run) can replace the
    /// element between finding and clicking it: it is found again.
    pub(crate) async fn click(&self, css: &str) {
        for _ in 0..10 {
            let element = self
                .client
                .wait()
                .at_most(PATIENCE)
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no element {css}: {e}"));
            match element.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("clicking {css}: {e}"),
            }
        }
        panic!("{css} was replaced at every click");
    }

    /// Signs out and waits for the sign-in form with the token forgotten
    /// (signing out reloads the page; the old page never shows the form).
    pub(crate) async fn sign_out(&self) {
        self.click("#signout").await;
        self.until(
            "the sign-in form after signing out",
            "return !document.getElementById('signin').hidden && sessionStorage.getItem('swarmd.token') === null",
        )
        .await;
    }

    /// Signs in on the sign-in form and waits until the feed is live.
    pub(crate) async fn sign_in(&self, token: &str) {
        let input = self
            .client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Id("token"))
            .await
            .unwrap();
        input.send_keys(token).await.unwrap();
        self.click("#signin-form button").await;
        self.until(
            "the live feed",
            "return document.getElementById('live').dataset.state === 'live'",
        )
        .await;
    }

    /// Records, from now until the page reloads, every `fetch` the page
    /// makes (`window.__requests`: `{url, auth, at}`, `auth` the
    /// `Authorization` header or null, `at` from `performance.now()`) and
    /// every download it starts (`window.__saved`: `{name, blob}`), which
    /// is kept rather than written to disk.
    pub(crate) async fn record(&self) {
        self.js(
            "if (!window.__requests) {
               window.__requests = [];
               window.__saved = [];
               const realFetch = window.fetch;
               window.fetch = function (input, init) {
                 const headers = new Headers((init && init.headers) || {});
                 window.__requests.push({ url: String(input), auth: headers.get('Authorization'),
                   at: performance.now() });
                 return realFetch.apply(this, arguments);
               };
               const blobs = new Map();
               const createObjectURL = URL.createObjectURL;
               URL.createObjectURL = function (object) {
                 const url = createObjectURL.call(URL, object);
                 blobs.set(url, object);
                 return url;
               };
               HTMLAnchorElement.prototype.click = function () {
                 if (!this.hasAttribute('download')) return HTMLElement.prototype.click.call(this);
                 window.__saved.push({ name: this.getAttribute('download'), blob: blobs.get(this.href) });
               };
             }
             return true",
        )
        .await;
    }

    /// The downloads recorded since `record`, as `[name, text]`, once
    /// there are at least `n`.
    pub(crate) async fn saved(&self, n: usize) -> Vec<(String, String)> {
        self.until(
            &format!("{n} downloads"),
            &format!("return window.__saved.length >= {n}"),
        )
        .await;
        let saved = self
            .js("return Promise.all(window.__saved.map(async (s) => [s.name, s.blob ? await s.blob.text() : null]))")
            .await;
        serde_json::from_value(saved).unwrap()
    }

    /// Moves to a view without reloading the page.
    pub(crate) async fn show(&self, hash: &str) {
        self.js(&format!("location.hash = {}; return true", json!(hash)))
            .await;
    }
}
