//! The task list's filters the dashboard puts in its URL, over HTTP:
//! session, parent, text in the prompt, a creation-time range, each
//! combined with the cursor, and their bounds.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::harness::parts;

const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

async fn list(sw: &Swarmd, query: &str) -> (u16, Value) {
    parts(
        sw.get(&format!("/v1/tasks?{query}"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn ids(page: &Value) -> Vec<&str> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_list_filters_by_session_prompt_text_and_time() {
    let sw = Swarmd::new(AGENTS).start().await;
    let main_ai = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut mine = Vec::new();
    for prompt in ["Fix the FLAKY test", "write docs", "fix the build"] {
        let (status, body) = parts(
            sw.post("/v1/tasks", &main_ai.token)
                .json(&json!({"agent": "cat", "prompt": prompt}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        mine.push(body["task_id"].as_str().unwrap().to_owned());
    }
    let (_, admin_task) = sw
        .create(json!({"agent": "cat", "prompt": "fix it all"}))
        .await;
    let admin_task = admin_task["task_id"].as_str().unwrap().to_owned();

    let (status, page) = list(&sw, &format!("session={}", main_ai.sid)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), [&mine[2], &mine[1], &mine[0]]);

    // Case-blind for ASCII, combined with the session and paged.
    let (_, page) = list(&sw, "q=FIX").await;
    assert_eq!(ids(&page), [&admin_task, &mine[2], &mine[0]]);
    let (_, page) = list(&sw, &format!("q=fix&session={}&limit=1", main_ai.sid)).await;
    assert_eq!(ids(&page), [&mine[2]]);
    let next = page["next"].as_str().unwrap();
    let (_, page) = list(
        &sw,
        &format!("q=fix&session={}&limit=1&after={next}", main_ai.sid),
    )
    .await;
    assert_eq!(ids(&page), [&mine[0]]);

    // A time range from the tasks' own creation times. The range reads a
    // task id's time (a UUIDv7 made at creation), which may be a
    // millisecond before the `created_ms` read just after it.
    let created = |id: &str| u64::from_str_radix(&id[2..14], 16).unwrap();
    let (first, last) = (created(&mine[0]), created(&admin_task));
    let (_, page) = list(&sw, &format!("since_ms={first}&until_ms={}", last)).await;
    let listed = ids(&page);
    assert!(listed.contains(&mine[0].as_str()), "{page}");
    assert!(
        !listed.contains(&admin_task.as_str()) || first == last,
        "{page}"
    );
    let (_, page) = list(&sw, &format!("since_ms={}", last + 60_000)).await;
    assert!(ids(&page).is_empty(), "{page}");
    let (_, page) = list(&sw, &format!("until_ms={first}")).await;
    assert!(ids(&page).is_empty(), "{page}");

    // Sub-tasks of a task that has none.
    let (_, page) = list(&sw, &format!("parent={admin_task}")).await;
    assert!(ids(&page).is_empty(), "{page}");

    let long = "x".repeat(257);
    for bad in [
        format!("q={long}"),
        "since_ms=281474976710656".to_owned(),
        "session=T-0".to_owned(),
        "parent=nope".to_owned(),
        "until_ms=-1".to_owned(),
    ] {
        let (status, body) = list(&sw, &bad).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!("bad_request")),
            "{bad}: {body}"
        );
    }
    let (status, _) = list(&sw, &format!("q={}", "x".repeat(256))).await;
    assert_eq!(status, 200);
}
