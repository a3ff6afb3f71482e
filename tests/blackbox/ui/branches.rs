//! The Branches view in headless Chromium against the real daemon and real
//! git: it lists a coding task's readable branch (task link, status, ahead,
//! merged, short head, age); "Apply to…" fast-forwards the user's own
//! branch to the task's head while the checked-out `main` stays where it
//! was, refuses `main` itself (checked out) with the API's message, and
//! shows a conflicting apply's file; "Prune" previews what it would delete
//! (deleting nothing) and deletes on confirm; an operator session sees
//! its own task's branch alone, with the buttons; an observer sees the
//! list and no button. A merge task's page shows the merged branch's diff,
//! saying so when the merge stopped at a conflict.
//! With `SWARMD_UI_SCREENSHOTS=<dir>` the view is written
//! there as `dashboard-branches.png`.

use serde_json::{Value, json};

use crate::daily::branches::{added, daemon, merge_daemon, merged_two, passed, passed_of};
use crate::ui::Browser;
use crate::ui::dashboard::observer_token;
use crate::worktrees::git;

/// A script selecting the row of branch `name`.
fn row(name: &str) -> String {
    format!(
        "document.querySelector('#branch-rows tr[data-branch=\"{}\"]')",
        name.replace('"', "")
    )
}

/// Opens "Apply to…" on branch `name`, fills it and submits it.
async fn apply(browser: &Browser, name: &str, into: &str, mode: &str) {
    browser
        .js(&format!(
            "{}.querySelector('button.apply').click(); return true",
            row(name)
        ))
        .await;
    browser
        .until(
            "the apply form",
            "const f = document.getElementById('apply-form'); return f && !f.hidden",
        )
        .await;
    browser
        .js(&format!(
            "document.getElementById('apply-into').value = {};
             document.getElementById('apply-mode').value = {};
             document.getElementById('apply-checked-out').checked = false;
             return true",
            json!(into),
            json!(mode)
        ))
        .await;
    browser.click("#apply-submit").await;
}

/// The apply form's answer once there: `[result, error, conflicting files]`.
async fn answer(browser: &Browser) -> Value {
    browser
        .until(
            "the apply answer",
            "const r = document.getElementById('apply-result').textContent;
             const e = document.getElementById('apply-error').textContent;
             return (r || e) && [r, e,
               [...document.querySelectorAll('#apply-conflicts li')].map((l) => l.textContent)]",
        )
        .await
}

#[tokio::test]
async fn the_branches_view_lists_applies_and_prunes_a_tasks_branch() {
    let (sw, repo) = daemon().await;
    let task = passed(&sw, "Fix the login bug\nAnd say why.").await;
    let clash = passed(&sw, "clash with main").await;
    let name = format!("swarmd/t-{}-fix-the-login-bug/1", &task[task.len() - 8..]);
    let clash_name = format!("swarmd/t-{}-clash-with-main/1", &clash[clash.len() - 8..]);
    let head = git(&repo, &["rev-parse", &name]);
    let main = git(&repo, &["rev-parse", "main"]);
    // The user's own branch, not checked out, at main.
    git(&repo, &["branch", "feature/login", "main"]);

    let browser = Browser::start().await;
    browser.client.set_window_size(1280, 800).await.unwrap();
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.click("#nav a[data-view=branches]").await;
    browser
        .until(
            "the two branches",
            "return document.querySelectorAll('#branch-rows tr').length === 2",
        )
        .await;
    let cells = browser
        .js(&format!(
            "const r = {};
             return ['name', 'status', 'ahead', 'merged', 'head', 'age']
               .map((c) => r.querySelector('td.' + c).textContent)
               .concat([r.querySelector('td.task a').getAttribute('href')])",
            row(&name)
        ))
        .await;
    let cells: Vec<String> = serde_json::from_value(cells).unwrap();
    assert_eq!(
        cells[..5],
        [
            name.clone(),
            "pass".into(),
            "1".into(),
            "no".into(),
            head[..10].to_owned()
        ],
        "{cells:?}"
    );
    assert!(cells[5].ends_with(" ago"), "{cells:?}");
    assert_eq!(cells[6], format!("#/task/{task}"));

    // Fast-forward only into the user's branch: it moves to the task's
    // head; the checked-out main does not move.
    apply(&browser, &name, "feature/login", "ff").await;
    let done = answer(&browser).await;
    assert_eq!(done[1], "", "{done}");
    let result = done[0].as_str().unwrap();
    assert!(
        result.contains("fast-forwarded feature/login") && result.contains(&head[..10]),
        "{result}"
    );
    assert_eq!(git(&repo, &["rev-parse", "feature/login"]), head);
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
    assert_eq!(git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]), "main");
    browser.capture("dashboard-branches").await;

    // The checked-out main is refused unless asked: the API's message.
    apply(&browser, &name, "main", "auto").await;
    let refused = answer(&browser).await;
    assert_eq!(refused[0], "", "{refused}");
    assert!(
        refused[1].as_str().unwrap().contains("checked out"),
        "{refused}"
    );
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);

    // A conflicting apply names the file and changes nothing.
    apply(&browser, &clash_name, "feature/login", "auto").await;
    let conflict = answer(&browser).await;
    assert_eq!(conflict[2], json!(["notes.txt"]), "{conflict}");
    assert_eq!(git(&repo, &["rev-parse", "feature/login"]), head);

    // Merged by hand: the prune preview lists it and deletes nothing; the
    // confirm deletes it.
    git(&repo, &["merge", "--ff-only", "-q", &name]);
    browser.click("#prune").await;
    browser.click("#prune-preview").await;
    let listed = browser
        .until(
            "the prune preview",
            "const l = [...document.querySelectorAll('#prune-list li')];
             return l.length && l.map((li) => li.dataset.branch)",
        )
        .await;
    assert_eq!(listed, json!([name]));
    assert_eq!(git(&repo, &["rev-parse", &name]), head, "a preview deleted");
    browser.click("#prune-confirm").await;
    browser
        .until(
            "one branch left",
            "return document.querySelectorAll('#branch-rows tr').length === 1
                && document.getElementById('prune-result').textContent !== ''",
        )
        .await;
    assert_eq!(git(&repo, &["branch", "--list", &name]), "");

    // An operator session sees its own task's branch alone, and may act.
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let own = sw
        .create_as(
            &owner.token,
            json!({"agent": "coder", "prompt": "Session work", "policy": {"max_attempts": 1}}),
        )
        .await;
    assert_eq!(sw.finished(&own).await["status"], "pass");
    browser.sign_out().await;
    browser.sign_in(&owner.token).await;
    browser.show("#/branches?agent=coder").await;
    let shown = browser
        .until(
            "the session's branch",
            "const r = [...document.querySelectorAll('#branch-rows tr')];
             return r.length && document.getElementById('branch-agent').value === 'coder'
               && r.map((tr) => [tr.dataset.task, tr.querySelector('button.apply') !== null])",
        )
        .await;
    assert_eq!(shown, json!([[own, true]]));
    assert_eq!(
        browser
            .js("return document.getElementById('prune') !== null")
            .await,
        json!(true)
    );

    // An observer sees the list and no button.
    browser.sign_out().await;
    browser.sign_in(&observer_token(&sw).await).await;
    browser.show("#/branches").await;
    browser
        .until(
            "the observer's list",
            &format!("return {} !== null", row(&clash_name)),
        )
        .await;
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#view button.apply, #prune, #apply-form, #prune-form').length")
            .await,
        json!(0)
    );
    browser.client.clone().close().await.unwrap();
}

#[tokio::test]
async fn a_merge_tasks_page_shows_the_merged_diff() {
    let (sw, repo) = merge_daemon().await;
    let (_, _, merge, record) = merged_two(&sw, &repo).await;
    let branch = record["value"]["branch"].as_str().unwrap().to_owned();

    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show(&format!("#/task/{merge}")).await;
    browser
        .until(
            "the merge's diff",
            "return document.querySelectorAll('#output .diff .diff-file').length === 2",
        )
        .await;
    let paths = browser
        .js("return [...document.querySelectorAll('#output .diff-path')].map((p) => p.textContent)")
        .await;
    assert_eq!(paths, json!(["alpha.txt", "beta.txt"]));
    assert_eq!(browser.text("#output .diff .diff-branch").await, branch);
    assert_eq!(
        browser.text("#output .diff .diff-head").await,
        git(&repo, &["rev-parse", &branch])
    );
    assert_eq!(browser.text("#output li.worktree > .name").await, "merge");

    // A merge stopped at a conflict says its diff is the part before it.
    let one = added(&sw, &repo, "clash one side").await;
    let two = added(&sw, &repo, "clash other side").await;
    let (stopped, _) = passed_of(
        &sw,
        "merge",
        json!({"prompt": "merge clash", "input": {"branches": [one, two]}}),
    )
    .await;
    browser.show(&format!("#/task/{stopped}")).await;
    let label = browser
        .until(
            "the stopped merge's diff",
            "const n = document.querySelector('#output li.worktree > .name');
             return n && n.textContent.startsWith('merge (') && n.textContent",
        )
        .await;
    assert_eq!(
        label,
        json!(format!(
            "merge (stopped at a conflict with {two}: the branches before it)"
        ))
    );
    browser.client.clone().close().await.unwrap();
}
