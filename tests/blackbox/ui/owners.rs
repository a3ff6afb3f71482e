//! An operator session signs in to the dashboard with its own token: it
//! sees its session's tasks and no other session's, and cancels its own
//! from the UI (the process is gone); its event stream carries its own
//! tasks' events only. An observer of the same task gets no cancel button,
//! and a cancel forged from its page is `403 forbidden`.

use serde_json::{Value, json};

use crate::daemon::{Login, Swarmd, eventually, process_gone, read_pid};
use crate::harness::parts;
use crate::ui::Browser;
use crate::ui::dashboard::{AGENTS, observer_token};

/// A `ticker` task created with the session's token: the session owns it.
async fn create_as(sw: &Swarmd, login: &Login, prompt: &str) -> String {
    sw.create_as(&login.token, json!({"agent": "ticker", "prompt": prompt}))
        .await
}

#[tokio::test]
async fn an_owner_sees_and_cancels_its_own_tasks_and_an_observer_cannot_cancel() {
    let sw = Swarmd::new(AGENTS).start().await;
    let owner = sw.login(json!({"roles": ["main-ai"]})).await;
    let other = sw.login(json!({"roles": ["senior"]})).await;
    let theirs = create_as(&sw, &other, "theirs").await;
    let mine = create_as(&sw, &owner, "mine").await;
    let pid = read_pid(&sw.dir().join(format!("{mine}.pid"))).await;

    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&owner.token).await;
    assert_eq!(browser.text("#who").await, format!("session {}", owner.sid));

    // The list is the session's: its task, not the other session's, even
    // when the URL asks for the other session; and the session filter is
    // not offered.
    browser
        .show(&format!("#/tasks?session={}", other.sid))
        .await;
    browser
        .until(
            "the owner's row",
            &format!("return document.querySelector('#task-rows tr[data-id=\"{mine}\"]') !== null"),
        )
        .await;
    assert_eq!(browser.rows().await, std::slice::from_ref(&mine));
    assert_eq!(
        browser
            .js("return document.getElementById('filter-session')")
            .await,
        Value::Null
    );
    // A task the other session creates now does not arrive live either,
    // while one of the owner's does.
    let theirs_later = create_as(&sw, &other, "theirs later").await;
    let mine_later = create_as(&sw, &owner, "mine later").await;
    browser
        .until(
            "the owner's new row",
            &format!(
                "return document.querySelector('#task-rows tr[data-id=\"{mine_later}\"]') !== null"
            ),
        )
        .await;
    let shown = browser.rows().await;
    assert!(
        !shown.contains(&theirs) && !shown.contains(&theirs_later),
        "{shown:?}"
    );

    // The sessions view shows the owner's own session only.
    browser.show("#/sessions").await;
    browser
        .until(
            "the owner's session row",
            "return document.querySelectorAll('#session-rows tr').length === 1",
        )
        .await;
    assert_eq!(
        browser
            .js("return document.querySelector('#session-rows tr').dataset.sid")
            .await,
        json!(owner.sid)
    );

    // The owner cancels its running task from the UI: its process is gone.
    browser.show(&format!("#/task/{mine}")).await;
    browser
        .until(
            "live progress",
            "return document.querySelectorAll('#output .progress li').length >= 2",
        )
        .await;
    browser.js("window.confirm = () => true; return true").await;
    browser.click("#cancel").await;
    browser
        .until(
            "the cancelled status",
            "return document.getElementById('task-status')?.textContent === 'cancelled'",
        )
        .await;
    assert_eq!(sw.finished(&mine).await["status"], "cancelled");
    eventually("the owner's process to be gone", || process_gone(pid)).await;

    // The owner's event log holds its own tasks' events and nothing else.
    let (status, page) = parts(
        sw.get("/v1/events?limit=1000", &owner.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    let about = |id: &str| events.iter().any(|e| e["event"]["task_id"] == id);
    assert!(about(&mine) && about(&mine_later), "{page}");
    assert!(!about(&theirs) && !about(&theirs_later), "{page}");
    assert!(
        events.iter().all(|e| e["session"] == owner.sid.as_str()),
        "{page}"
    );

    // An observer reads the other session's running task, has no cancel
    // button, and a cancel forged from its page is refused.
    let observer = observer_token(&sw).await;
    browser.sign_out().await;
    browser.sign_in(&observer).await;
    browser.show(&format!("#/task/{theirs}")).await;
    browser
        .until(
            "the observer's live progress",
            "return document.querySelectorAll('#output .progress li').length >= 2",
        )
        .await;
    assert_eq!(
        browser.js("return document.getElementById('cancel')").await,
        Value::Null
    );
    let forged = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch(`/v1/tasks/${arguments[0]}/cancel`, {method: 'POST',
               headers: {Authorization: `Bearer ${sessionStorage.getItem('swarmd.token')}`}})
               .then(async (r) => done([r.status, await r.json()]));",
            vec![json!(theirs)],
        )
        .await
        .unwrap();
    assert_eq!(forged[0], 403, "{forged}");
    assert_eq!(forged[1]["code"], "forbidden", "{forged}");
    assert_eq!(sw.task(&theirs).await["status"], "running");

    for task in [&theirs, &theirs_later, &mine_later] {
        let (status, body) = parts(
            sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    browser.client.clone().close().await.unwrap();
}
