//! What changed, in headless Chromium against the real daemon: a process
//! agent edits and commits in a real git worktree, and its task page shows
//! the `worktree` artifact as a diff (files with their counts, hunks,
//! added, removed and context lines, branch, base and head as fields; a
//! hostile line and a terminal escape from the worker stay text and
//! markers), a report spilled to a blob shown the same way, the raw
//! policy and audit JSON folded shut; the task list has
//! duration, tokens, cost and failure reason columns; the page says "not
//! signed in" before sign-in, a sign-in reaches a second tab of the same
//! origin and a sign-out ends both; and the overview draws its charts with
//! axes and times. With `SWARMD_UI_SCREENSHOTS=<dir>` the diff, the list
//! and the charts are written there.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::ui::Browser;
use crate::worktrees::{git, make_repo, recorded_artifact};

/// `coder` rewrites `notes.txt` (`first` becomes `second`, `third` is
/// added) and adds `src/new.rs` with a line of markup and a terminal
/// escape, commits, reports usage and passes; `bigcoder` commits a
/// 1 000-line file, a report over the inline limit below (so it is stored
/// as a blob); `broken` fails at once with a message on stderr.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
printf 'second\\nthird\\n' > notes.txt
mkdir -p src
printf 'fn main() {}\\n// <img src=x onerror="window.__pwned = 1">\\n// \\033[31mred\\n' > src/new.rs
git add -A
git -c user.name=w -c user.email=w@w commit -qm "the worker's change"
printf '%s\n' '{"type":"progress","stage":"usage","note":"{\\\"cli\\\":\\\"claude\\\",\\\"input_tokens\\\":1200,\\\"output_tokens\\\":340,\\\"turns\\\":3,\\\"cost_usd\\\":0.0123}"}'
printf '{"type":"final","ok":true,"content":{"kind":"inline","value":"done"}}\n'
"""]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.bigcoder]
kind = "process"
program = "/bin/sh"
args = ["-c", "seq 1 1000 > big.txt && git add -A && git -c user.name=w -c user.email=w@w commit -qm big"]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.broken]
kind = "process"
program = "/bin/sh"
args = ["-c", "echo 'no Cargo.toml here' >&2; exit 3"]
stdin = "none"
stream = "ndjson"
"#;

/// Output values over 4 KiB are spilled to blobs.
const LIMITS: &str = "
[limits]
inline_max_bytes = 4096
";

/// `echo` prints its prompt.
const ECHO: &str = r#"
[agents.echo]
kind = "process"
program = "/bin/cat"
"#;

async fn run(sw: &Swarmd, agent: &str, prompt: &str) -> Value {
    let (status, body) = sw
        .create(json!({"agent": agent, "prompt": prompt, "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap().to_owned();
    sw.finished(&id).await
}

/// Waits for the task's `worktree` artifact and checks it was spilled: a
/// `file_ref`, not an inline value.
async fn recorded_artifact_ref(sw: &Swarmd, task: &str) {
    for _ in 0..200 {
        let spilled = sw.output(task).await.iter().any(|r| {
            r["event"]["name"] == "worktree" && r["event"]["content"]["kind"] == "file_ref"
        });
        if spilled {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no spilled worktree artifact: {:#?}", sw.output(task).await);
}

#[tokio::test]
async fn a_worktree_diff_renders_as_files_and_hunks_and_the_list_has_its_costs() {
    let sw =
        Swarmd::new(&format!("{AGENTS}{ECHO}{LIMITS}")).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    let sw = sw.start().await;
    let coded = run(&sw, "coder", "Rewrite the notes and add src/new.rs").await;
    assert_eq!(coded["status"], "pass", "{coded}\n{}", sw.log());
    let broken = run(&sw, "broken", "Build the crate").await;
    assert_ne!(broken["status"], "pass", "{broken}");
    let reason = broken["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason in {broken}"));
    let coder = coded["id"].as_str().unwrap().to_owned();
    let report = recorded_artifact(&sw, &coder).await;
    let branch = report["branch"].as_str().unwrap().to_owned();
    let head = git(&repo, &["rev-parse", &branch]);
    assert_eq!(report["head"], head.as_str(), "{report}");
    let base = git(&repo, &["rev-parse", "main"]);

    let browser = Browser::start().await;
    browser.client.set_window_size(1280, 1000).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show(&format!("#/task/{coder}")).await;
    browser
        .until(
            "the diff's two files",
            "return document.querySelectorAll('#output .diff .diff-file').length === 2",
        )
        .await;
    // Branch, base and head are fields, not JSON.
    assert_eq!(browser.text("#output .diff .diff-branch").await, branch);
    assert_eq!(browser.text("#output .diff .diff-base").await, base);
    assert_eq!(browser.text("#output .diff .diff-head").await, head);
    // Each file with its own counts, each hunk with its header and lines.
    let files = browser
        .js(
            "return [...document.querySelectorAll('#output .diff-file')].map((f) => [
               f.querySelector('.diff-path').textContent,
               f.querySelector('.diff-added').textContent,
               f.querySelector('.diff-removed').textContent,
               f.querySelectorAll('.hunk').length])",
        )
        .await;
    assert_eq!(
        files,
        json!([["notes.txt", "+2", "−1", 1], ["src/new.rs", "+3", "−0", 1]])
    );
    let notes = browser
        .js("return [...document.querySelectorAll('#output .diff-file')[0].querySelectorAll('.hunk .line')]
               .map((l) => [l.dataset.kind, l.textContent])")
        .await;
    assert_eq!(
        notes,
        json!([["del", "-first"], ["add", "+second"], ["add", "+third"]])
    );
    assert!(
        browser
            .text("#output .diff-file .hunk-header")
            .await
            .starts_with("@@ -1 +1,2 @@"),
    );
    // The worker's markup is text and ran nothing; its escape is a marker.
    let hostile = browser
        .js(
            "return [...document.querySelectorAll('#output .diff .line')].map((l) => l.textContent)
               .find((t) => t.includes('onerror'))",
        )
        .await;
    assert_eq!(
        hostile,
        json!(r#"+// <img src=x onerror="window.__pwned = 1">"#)
    );
    assert_eq!(
        browser
            .js("return [document.querySelectorAll('#output .diff img').length, window.__pwned ?? null,
                    document.querySelector('#output .diff .line .ctl')?.title]")
            .await,
        json!([0, null, "U+001B"])
    );
    // The raw JSON is folded shut: policy and audit.
    let folded = browser
        .until(
            "the folded policy and audit",
            "const d = [...document.querySelectorAll('details.raw')];
             return d.length >= 2 && d.map((e) => [e.querySelector('summary').textContent, e.open])",
        )
        .await;
    let folded: Vec<(String, bool)> = serde_json::from_value(folded).unwrap();
    for name in ["Policy", "Audit"] {
        assert!(
            folded.iter().any(|(s, open)| s.starts_with(name) && !open),
            "{name} not folded shut: {folded:?}"
        );
    }
    browser.capture("dashboard-diff").await;

    // A report spilled to a blob is read back and shown as a diff too.
    let big = run(&sw, "bigcoder", "Write a big file").await;
    assert_eq!(big["status"], "pass", "{big}");
    let big = big["id"].as_str().unwrap().to_owned();
    recorded_artifact_ref(&sw, &big).await;
    browser.show(&format!("#/task/{big}")).await;
    let spilled = browser
        .until(
            "the spilled diff",
            "const f = document.querySelector('#output .diff-file');
             return f && [f.querySelector('.diff-path').textContent,
                          f.querySelector('.diff-added').textContent,
                          f.querySelectorAll('.line[data-kind=add]').length]",
        )
        .await;
    assert_eq!(spilled, json!(["big.txt", "+1000", 1000]));

    // The list: duration, tokens, cost and the failure's reason.
    run(&sw, "echo", "Say hello").await;
    browser.show("#/tasks").await;
    browser
        .until(
            "four rows",
            "return document.querySelectorAll('#task-rows tr').length === 4",
        )
        .await;
    let heads = browser
        .js("return [...document.querySelectorAll('table.tasks th')].map((t) => t.textContent)")
        .await;
    for column in ["duration", "tokens", "cost", "reason"] {
        assert!(
            heads.as_array().unwrap().contains(&json!(column)),
            "{heads}"
        );
    }
    let cells = |id: &str| {
        format!(
            "const r = document.querySelector('#task-rows tr[data-id={id}]');
             return ['duration', 'tokens', 'cost', 'reason'].map((c) => r.querySelector('td.' + c).textContent)"
        )
    };
    let coded_cells: Vec<String> =
        serde_json::from_value(browser.js(&cells(&coder)).await).unwrap();
    assert!(
        coded_cells[0].ends_with(" ms") || coded_cells[0].ends_with(" s"),
        "{coded_cells:?}"
    );
    assert_eq!(&coded_cells[1..], ["1540", "$0.0123", ""]);
    let broken_cells: Vec<String> =
        serde_json::from_value(browser.js(&cells(broken["id"].as_str().unwrap())).await).unwrap();
    assert_eq!(&broken_cells[1..], ["", "", reason]);
    browser.capture("dashboard-tasks-columns").await;
    browser.client.clone().close().await.unwrap();
}

#[tokio::test]
async fn a_sign_in_reaches_a_second_tab_and_the_overview_charts_have_axes() {
    let sw = Swarmd::new(ECHO).start().await;
    for prompt in ["one", "two", "three"] {
        run(&sw, "echo", prompt).await;
    }
    let browser = Browser::start().await;
    browser.client.set_window_size(1280, 1000).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    // Before sign-in the badge says so; it is not "offline".
    browser
        .until(
            "the sign-in form",
            "return !document.getElementById('signin').hidden",
        )
        .await;
    assert_eq!(browser.text("#live").await, "not signed in");
    browser.sign_in(&sw.admin).await;
    let first = browser.client.window().await.unwrap();

    // A second tab of the same origin is signed in without the form.
    let second = browser.client.new_window(true).await.unwrap().handle;
    browser
        .client
        .switch_to_window(second.clone())
        .await
        .unwrap();
    browser.client.goto(&sw.url("/ui#/tasks")).await.unwrap();
    browser
        .until(
            "the second tab signed in",
            "return document.getElementById('live').dataset.state === 'live'
                && document.getElementById('signin').hidden
                && document.querySelectorAll('#task-rows tr').length === 3",
        )
        .await;
    assert_eq!(browser.text("#who").await, "admin");

    // Signing out in one tab signs every tab out.
    browser.sign_out().await;
    browser.client.switch_to_window(first).await.unwrap();
    browser
        .until(
            "the first tab signed out",
            "return !document.getElementById('signin').hidden
                && sessionStorage.getItem('swarmd.token') === null",
        )
        .await;
    assert_eq!(browser.text("#live").await, "not signed in");

    // A tab opened with no signed-in tab left asks for the token.
    browser.client.switch_to_window(second).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser
        .until(
            "the sign-in form in the second tab",
            "return !document.getElementById('signin').hidden",
        )
        .await;
    browser.sign_in(&sw.admin).await;

    // The overview's charts: axes, tick labels with times, a series (for
    // the documentation's screenshot, of three samples).
    let samples = if std::env::var_os("SWARMD_UI_SCREENSHOTS").is_some() {
        3
    } else {
        1
    };
    browser
        .until(
            "the throughput chart with its samples",
            &format!(
                "const c = document.querySelector('#ov-throughput');
                 return c && c.querySelectorAll('.series.finished circle').length >= {samples}"
            ),
        )
        .await;
    let chart = browser
        .js("const c = document.querySelector('#ov-throughput');
             return {axes: c.querySelectorAll('.axis').length,
                     times: [...c.querySelectorAll('.x-tick text')].map((t) => t.textContent),
                     ys: [...c.querySelectorAll('.y-tick text')].map((t) => t.textContent)}")
        .await;
    assert_eq!(chart["axes"], 2, "{chart}");
    let times = chart["times"].as_array().unwrap();
    assert!(times.len() >= 2, "{chart}");
    for time in times {
        let time = time.as_str().unwrap();
        assert!(
            time.len() == 5 && time.as_bytes()[2] == b':',
            "{time} is not HH:MM in {chart}"
        );
    }
    assert!(chart["ys"].as_array().unwrap().len() >= 2, "{chart}");
    assert!(
        browser
            .js("return document.querySelector('#ov-latency .axis') !== null")
            .await
            == json!(true)
    );
    browser.capture("dashboard-charts").await;
    browser.client.clone().close().await.unwrap();
}
