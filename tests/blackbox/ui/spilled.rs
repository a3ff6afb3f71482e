//! Values over `limits.inline_max_bytes`, stored as blobs, in headless
//! Chromium against the real daemon: an artifact's download reads its
//! blob (`GET /v1/blobs/{sha256}` with the page's token) and saves the
//! artifact itself under its name, not a placeholder; the partial, the
//! Final and the task's Result each offer **download (N bytes)** and
//! **show**, which puts the value in as text.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::ui::Browser;

/// `big` prints a partial, an artifact `report.txt` and a Final, each
/// holding `1 2 3 … 1200 ` (4 893 bytes), over the limit below.
const AGENTS: &str = r#"
[agents.big]
kind = "process"
program = "/bin/sh"
args = ["-c", """
v=$(seq 1 1200 | tr '\\n' ' ')
printf '{"type":"partial","chunk":{"kind":"inline","value":"%s"}}\\n' "$v"
printf '{"type":"artifact","name":"report.txt","content":{"kind":"inline","value":"%s"}}\\n' "$v"
printf '{"type":"final","ok":true,"content":{"kind":"inline","value":{"report":"%s"}}}\\n' "$v"
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }

[limits]
inline_max_bytes = 4096
"#;

/// What `big` prints in each value.
fn numbers() -> String {
    (1..=1200).map(|i| format!("{i} ")).collect()
}

/// The blob's bytes as the admin reads them.
async fn blob(sw: &Swarmd, sha256: &str) -> String {
    let answer = sw
        .get(&format!("/v1/blobs/{sha256}"), &sw.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

#[tokio::test]
async fn values_stored_as_blobs_are_downloaded_and_shown_whole() {
    let sw = Swarmd::new(AGENTS).start().await;
    let id = sw
        .create_as(&sw.admin, json!({"agent": "big", "prompt": "print"}))
        .await;
    let done = sw.finished(&id).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    let expected = numbers();
    assert_eq!(expected.len(), 4893);

    // Each value is stored as a blob: the artifact, the Final, the result.
    let output = sw.output(&id).await;
    let event = |kind: &str| -> Value {
        output
            .iter()
            .find(|r| r["event"]["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {output:#?}"))["event"]
            .clone()
    };
    let artifact = event("artifact")["content"].clone();
    assert_eq!(artifact["kind"], "file_ref", "{artifact}");
    let artifact_sha = artifact["sha256"].as_str().unwrap().to_owned();
    assert_eq!(
        serde_json::from_str::<Value>(&blob(&sw, &artifact_sha).await).unwrap(),
        json!(expected)
    );
    let result = done["result"]["value"].clone();
    assert_eq!(result["kind"], "file_ref", "{done}");
    let result_sha = result["sha256"].as_str().unwrap().to_owned();
    let result_bytes = blob(&sw, &result_sha).await;
    assert_eq!(
        serde_json::from_str::<Value>(&result_bytes).unwrap(),
        json!({"report": expected})
    );
    assert_eq!(event("partial")["chunk"]["kind"], "file_ref");
    let partial_seq = output
        .iter()
        .find(|r| r["event"]["type"] == "partial")
        .map(|r| r["seq"].clone())
        .unwrap();
    assert_eq!(event("final")["content"]["kind"], "file_ref");

    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.record().await;
    browser.show(&format!("#/task/{id}")).await;

    // The artifact's download saves the artifact, read from its blob with
    // the page's token.
    let item = "#output .artifacts li";
    assert_eq!(browser.text(&format!("{item} .name")).await, "report.txt");
    assert_eq!(
        browser.text(&format!("{item} .blob-download")).await,
        format!("download ({} bytes)", expected.len() + 2)
    );
    browser.click(&format!("{item} .blob-download")).await;
    let saved = browser.saved(1).await;
    assert_eq!(saved[0].0, "report.txt");
    assert_eq!(saved[0].1.len(), expected.len(), "{}", &saved[0].1);
    assert_eq!(saved[0].1, expected);
    let fetched = browser
        .js(&format!(
            "return window.__requests.filter((r) => r.url.endsWith('/v1/blobs/{artifact_sha}')).map((r) => r.auth)"
        ))
        .await;
    assert_eq!(fetched, json!([format!("Bearer {}", sw.admin)]));

    // The Result: its value is shown as text on asking, and downloaded as
    // its JSON.
    assert_eq!(
        browser.text("#task-result .blob-download").await,
        format!("download ({} bytes)", result_bytes.len())
    );
    browser.click("#task-result .blob-show").await;
    let shown = browser
        .until(
            "the result shown",
            "const p = document.querySelector('#task-result .blob-value');
             return p && !p.hidden && p.textContent",
        )
        .await;
    let shown: Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    assert_eq!(shown, json!({"report": expected}));
    browser.click("#task-result .blob-download").await;
    let saved = browser.saved(2).await;
    assert_eq!(
        saved[1],
        (format!("{id}-result.json"), result_bytes.clone())
    );

    // The Final and the partial too.
    browser.click("#output .final .blob-show").await;
    let shown = browser
        .until(
            "the Final shown",
            "const p = document.querySelector('#output .final .blob-value');
             return p && !p.hidden && p.textContent",
        )
        .await;
    let shown: Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    assert_eq!(shown, json!({"report": expected}));
    browser.click("#output .partial .blob-show").await;
    let shown = browser
        .until(
            "the partial shown",
            "const p = document.querySelector('#output .partial .blob-value');
             return p && !p.hidden && p.textContent",
        )
        .await;
    assert_eq!(shown, json!(expected));
    browser.click("#output .partial .blob-download").await;
    let saved = browser.saved(3).await;
    assert_eq!(saved[2].0, format!("{id}-partial-1-{partial_seq}.txt"));
    assert_eq!(saved[2].1, expected);
    // No placeholder is left on the page.
    let page = browser
        .js("return document.getElementById('view').textContent")
        .await;
    assert!(
        !page.as_str().unwrap().contains("(stored as a blob:"),
        "a placeholder is left: {page}"
    );
    browser.client.clone().close().await.unwrap();
}
