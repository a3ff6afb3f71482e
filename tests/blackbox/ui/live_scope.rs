//! The live task list follows only what it shows: `/v1/events?tasks=`
//! carries only the named tasks' events (never widening an operator
//! session's part), `tick_ms` adds one coalesced frame of matching new
//! tasks per interval and holds back progress ids while new tasks are
//! uncounted, bad scopes are `400 bad_request`, an operator session's
//! stream ends once the session is deleted; and in the
//! browser, a list filtered to one agent receives nothing while another
//! agent's tasks flow, yet its running row turns to its final status and
//! a new matching task appears, live.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use crate::daemon::{Login, Swarmd};
use crate::harness::{PATIENCE, expect_error, parts};
use crate::ui::Browser;
use crate::ui::stream::Stream;

/// `hold` runs until the file `release-<task id>` appears in the test's
/// directory; `cat` passes at once.
const AGENTS: &str = r#"
[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", "while [ ! -e \"@DIR@/release-$SWARM_TASK_ID\" ]; do sleep 0.05; done; echo released"]
stdin = "none"
env = { PATH = "/usr/bin:/bin" }

[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

async fn create(sw: &Swarmd, bearer: &str, agent: &str, prompt: &str) -> String {
    sw.create_as(bearer, json!({"agent": agent, "prompt": prompt}))
        .await
}

fn release(sw: &Swarmd, task: &str) {
    std::fs::write(sw.dir().join(format!("release-{task}")), "").unwrap();
}

async fn event_seq(sw: &Swarmd) -> u64 {
    let (status, body) = parts(sw.get("/v1/status", &sw.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    body["event_seq"].as_u64().unwrap()
}

#[tokio::test]
async fn the_event_feed_narrows_to_named_tasks_and_ticks_new_ones() {
    let sw = Swarmd::new(AGENTS).start().await;
    let many: Vec<String> = (0..101)
        .map(|i| {
            format!(
                "T-{:032x}",
                0x0190_0000_0000_7000_8000_0000_0000_0000_u128 + i
            )
        })
        .collect();
    for bad in [
        "tasks=nope".to_owned(),
        format!("tasks={},,{}", many[0], many[1]),
        format!("tasks={}", many.join(",")),
        "tick_ms=100".to_owned(),
        "tick_ms=60001".to_owned(),
        "tick_agent=cat".to_owned(),
        "tick_ms=1000&tick_session=S-1".to_owned(),
        // A tick needs a stream: a JSON page has none.
        "tick_ms=1000".to_owned(),
    ] {
        let response = sw
            .get(&format!("/v1/events?{bad}"), &sw.admin)
            .send()
            .await
            .unwrap();
        expect_error(response, 400, "bad_request").await;
    }
    // 100 ids, one repeated, is within the bound.
    let (status, body) = parts(
        sw.get(
            &format!("/v1/events?tasks={},{}", many[..100].join(","), many[0]),
            &sw.admin,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, &body["events"]), (200, &json!([])), "{body}");

    // A stream scoped to one held task and ticking new `cat` tasks: five
    // `cat` tasks run to the end and a `hold` task starts, and the stream
    // carries none of their events, only ticks counting the five; then
    // the held task's own finish.
    let held = create(&sw, &sw.admin, "hold", "held").await;
    let start = event_seq(&sw).await;
    let mut stream = Stream::open(
        &sw,
        &format!("kinds=task_finished&tasks={held}&tick_ms=250&tick_agent=cat"),
        &sw.admin,
        start,
    )
    .await;
    for i in 0..5 {
        let cat = create(&sw, &sw.admin, "cat", &format!("cat {i}")).await;
        sw.finished(&cat).await;
    }
    create(&sw, &sw.admin, "hold", "not followed").await;
    let mut created = 0;
    let mut ticks = 0;
    while created < 5 {
        let frame = stream.next().await;
        assert_eq!(frame.name, "tick", "{frame:?}");
        assert_eq!(frame.id, Some(frame.data["seq"].to_string()), "{frame:?}");
        created += frame.data["created"].as_u64().unwrap();
        ticks += 1;
    }
    assert_eq!(created, 5);
    assert!(ticks <= 5, "{ticks} ticks for five tasks");
    release(&sw, &held);
    let frame = stream.next().await;
    assert_eq!(
        (frame.name.as_str(), &frame.data["event"]["task_id"]),
        ("task_finished", &json!(held)),
        "{frame:?}"
    );
    // Nothing else: no tick for the unfollowed `hold` task, no other event.
    assert!(
        stream
            .next_within(Duration::from_millis(600))
            .await
            .is_none(),
        "{:?}",
        stream.text
    );

    // An operator session naming the admin's task gets none of its
    // events, and its ticks count its own new tasks only.
    let owner: Login = sw.login(json!({"roles": ["main-ai"]})).await;
    let theirs = create(&sw, &sw.admin, "hold", "the admin's").await;
    let start = event_seq(&sw).await;
    let mut mine = Stream::open(
        &sw,
        &format!("tasks={theirs}&tick_ms=250"),
        &owner.token,
        start,
    )
    .await;
    let admins = create(&sw, &sw.admin, "cat", "not the owner's").await;
    sw.finished(&admins).await;
    release(&sw, &theirs);
    sw.finished(&theirs).await;
    let own = create(&sw, &owner.token, "cat", "the owner's").await;
    sw.finished(&own).await;
    let frame = mine.next().await;
    assert_eq!(
        (frame.name.as_str(), &frame.data["created"]),
        ("tick", &json!(1)),
        "{frame:?}"
    );
    assert!(
        mine.next_within(Duration::from_millis(600)).await.is_none(),
        "{:?}",
        mine.text
    );
}

#[tokio::test]
async fn new_tasks_not_yet_ticked_hold_back_the_progress_id() {
    let sw = Swarmd::new(AGENTS).start().await;
    let start = event_seq(&sw).await;
    // A tick a minute away, and a task named that never exists: the
    // stream sends no data while three tasks run.
    let query = "tasks=T-01900000000070008000000000000000&tick_ms=60000";
    let mut stream = Stream::open(&sw, query, &sw.admin, start).await;
    for i in 0..3 {
        let cat = create(&sw, &sw.admin, "cat", &format!("cat {i}")).await;
        sw.finished(&cat).await;
    }
    // Past the progress interval (1 s), a task's events wake the stream:
    // a progress id now would let a resumed stream skip the three new
    // tasks it has not ticked.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let held = create(&sw, &sw.admin, "hold", "a wake").await;
    release(&sw, &held);
    sw.finished(&held).await;
    assert!(
        stream
            .next_within(Duration::from_millis(2500))
            .await
            .is_none(),
        "{:?}",
        stream.text
    );
    assert_eq!(stream.progress, Vec::<String>::new());
    assert!(!stream.text.contains("id:"), "{:?}", stream.text);
    drop(stream);
    // Resumed from the last id it got (its start), it counts them again.
    let query = "tasks=T-01900000000070008000000000000000&tick_ms=250&tick_agent=cat";
    let mut resumed = Stream::open(&sw, query, &sw.admin, start).await;
    let tick = resumed.next().await;
    assert_eq!(
        (tick.name.as_str(), &tick.data["created"]),
        ("tick", &json!(3)),
        "{tick:?}"
    );
    // With nothing counted (`hold` tasks are not), the stream reports how
    // far it read at its next wake a second or more after its last id.
    for _ in 0..20 {
        let held = create(&sw, &sw.admin, "hold", "not counted").await;
        release(&sw, &held);
        sw.finished(&held).await;
        assert!(
            resumed
                .next_within(Duration::from_millis(300))
                .await
                .is_none()
        );
        if !resumed.progress.is_empty() {
            break;
        }
    }
    assert!(!resumed.progress.is_empty(), "no progress id");
}

#[tokio::test]
async fn a_deleted_sessions_event_stream_ends_promptly() {
    let sw = Swarmd::new(AGENTS).start().await;
    let owner: Login = sw.login(json!({"roles": ["main-ai"]})).await;
    // Only ticks: the one task named is none of the session's.
    let query = "tasks=T-01900000000070008000000000000000&tick_ms=250";
    let mut stream = Stream::open(&sw, query, &owner.token, 0).await;
    // The stream is open and live: the session's own new task is ticked.
    let own = create(&sw, &owner.token, "cat", "the owner's").await;
    assert_eq!(stream.next().await.data["created"], json!(1));
    sw.finished(&own).await;
    let (status, body) = parts(
        sw.http
            .delete(sw.url(&format!("/v1/operators/{}", owner.sid)))
            .bearer_auth(&sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let deleted = tokio::time::Instant::now();
    // Idle from here on: nothing but the deletion can end it.
    let end = tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = stream.body.next().await {
            chunk.unwrap();
        }
    })
    .await;
    assert!(end.is_ok(), "the stream outlived its session");
    // The stream checks for its end every 500 ms; 5 s leaves a loaded
    // machine room and is still far short of `PATIENCE`.
    assert!(
        deleted.elapsed() < Duration::from_secs(5),
        "{:?}",
        deleted.elapsed()
    );
    // Its token no longer opens one.
    let response = sw
        .get("/v1/events", &owner.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

/// The page's count of data frames its feed received (`#live`'s `data-frames`).
async fn frames(browser: &Browser) -> u64 {
    browser
        .js("return Number(document.getElementById('live').dataset.frames || 0)")
        .await
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn the_live_list_receives_only_its_rows_events_and_its_new_tasks() {
    let sw = Swarmd::new(AGENTS).start().await;
    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show("#/tasks?agent=hold").await;
    browser
        .until(
            "the empty list",
            "return document.getElementById('task-rows') !== null",
        )
        .await;

    // A held task appears live and shows it runs.
    let held = create(&sw, &sw.admin, "hold", "held").await;
    let row_status = |id: &str| {
        format!(
            "return document.querySelector('#task-rows tr[data-id=\"{id}\"] .status')?.textContent"
        )
    };
    browser
        .until(
            "the held task running",
            &format!("{} === 'running'", row_status(&held)),
        )
        .await;
    // Let the feed settle after its last scope change: its count of frames
    // holds still over a second (the page's tick interval), read every
    // 500 ms.
    let settling = tokio::time::Instant::now();
    let mut before = frames(&browser).await;
    let mut still = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = frames(&browser).await;
        if now == before {
            still += 1;
            if still == 2 {
                break;
            }
        } else {
            still = 0;
            before = now;
        }
        assert!(
            settling.elapsed() < PATIENCE,
            "the feed never settled: {now} frames"
        );
    }

    // 100 tasks of another agent run to the end: the page hears nothing
    // of them (a feed of every task event would bring about 300 frames).
    let mut others = Vec::new();
    for i in 0..100 {
        others.push(create(&sw, &sw.admin, "cat", &format!("other {i}")).await);
    }
    for task in &others {
        sw.finished(task).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = frames(&browser).await;
    assert_eq!(after, before, "the page received other agents' events");
    assert_eq!(browser.rows().await, std::slice::from_ref(&held));
    let title = browser
        .js("return document.getElementById('live').title")
        .await;
    assert!(
        title.as_str().unwrap().contains("of 1 unfinished rows"),
        "{title}"
    );

    // The visible running row turns to its final status live, and a new
    // task of the agent shown appears on top.
    release(&sw, &held);
    browser
        .until(
            "the held task passed",
            &format!("{} === 'pass'", row_status(&held)),
        )
        .await;
    let next = create(&sw, &sw.admin, "hold", "next").await;
    browser
        .until(
            "the new held task",
            &format!(
                "return document.querySelector('#task-rows tr')?.dataset.id === {}",
                json!(next)
            ),
        )
        .await;
    assert_eq!(browser.rows().await, [next.clone(), held.clone()]);
    // Two frames or so (a tick, the new row's status changes), not hundreds.
    let total = frames(&browser).await - before;
    assert!((1..=10).contains(&total), "{total} frames");
    release(&sw, &next);
    browser
        .until(
            "the next task passed",
            &format!("{} === 'pass'", row_status(&next)),
        )
        .await;
    browser.client.clone().close().await.unwrap();
}
