//! Task routes: spawn (waiting, idempotent per caller), list paging, get,
//! wait, cancel, audit.

use serde_json::json;

use super::{Api, expect_error, parts};

#[tokio::test]
async fn spawn_and_wait_returns_the_finished_task() {
    let api = Api::start().await;
    let body = json!({"agent": "echo", "prompt": "p", "wait_secs": 10, "metadata": {"m": 1}});
    let response = api
        .post("/v1/tasks", &api.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, task) = parts(response).await;
    assert_eq!(status, 201, "{task}");
    assert_eq!(task["status"], "pass", "{task}");
    assert_eq!(task["task_id"], task["id"]);
    assert_eq!(task["result"], json!({"value": "echoed", "ok": true}));
    assert_eq!(task["metadata"], json!({"m": 1}));
    assert_eq!(task["attempts"][0]["outcome"], "pass", "{task}");

    // Without wait_secs: accepted at once.
    let body = json!({"agent": "hang", "prompt": "p"});
    let (status, accepted) = parts(
        api.post("/v1/tasks", &api.admin)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    assert!(accepted["task_id"].as_str().unwrap().starts_with("T-"));
    assert!(
        matches!(accepted["status"].as_str(), Some("queued" | "running")),
        "{accepted}"
    );
    // A short wait that runs out answers with the running task.
    let body = json!({"agent": "hang", "prompt": "p", "wait_secs": 1});
    let (status, waited) = parts(
        api.post("/v1/tasks", &api.admin)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, waited["status"].as_str()),
        (201, Some("running")),
        "{waited}"
    );
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_caller() {
    let api = Api::start().await;
    let (session, sid) = api.session().await;
    let body = json!({"agent": "hang", "prompt": "p"});
    let spawn = |bearer: &str| {
        api.post("/v1/tasks", bearer)
            .header("Idempotency-Key", "job-1")
            .json(&body)
            .send()
    };
    let (_, first) = parts(spawn(&session).await.unwrap()).await;
    let (_, again) = parts(spawn(&session).await.unwrap()).await;
    let (_, admin) = parts(spawn(&api.admin).await.unwrap()).await;
    assert_eq!(first["task_id"], again["task_id"]);
    assert_ne!(first["task_id"], admin["task_id"]);

    // The session's sid owns the task it spawned.
    let path = format!("/v1/tasks/{}", first["task_id"].as_str().unwrap());
    let (_, view) = parts(api.get(&path, &session).send().await.unwrap()).await;
    assert_eq!(view["session"], sid);
    let path = format!("/v1/tasks/{}", admin["task_id"].as_str().unwrap());
    let (_, view) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert!(view.get("session").is_none(), "{view}");
}

#[tokio::test]
async fn list_pages_newest_first_with_filters() {
    let api = Api::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = api.spawn("echo").await;
        api.finished(id).await;
        ids.push(id.to_string());
    }
    let hanging = api.spawn("hang").await.to_string();

    let (status, page) = parts(
        api.get("/v1/tasks?limit=2&agent=echo", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let got: Vec<_> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(got, [json!(ids[2]), json!(ids[1])]);
    let next = page["next"].as_str().unwrap().to_owned();
    assert_eq!(next, ids[1]);
    let path = format!("/v1/tasks?limit=2&agent=echo&after={next}");
    let (_, page) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    let got: Vec<_> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(got, [json!(ids[0])]);
    assert!(page.get("next").is_none(), "{page}");

    let (_, passed) = parts(
        api.get("/v1/tasks?status=pass&agent=", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(passed["tasks"].as_array().unwrap().len(), 3);
    let (_, all) = parts(api.get("/v1/tasks", &api.admin).send().await.unwrap()).await;
    assert_eq!(all["tasks"][0]["id"], hanging.as_str());
}

#[tokio::test]
async fn wait_times_out_with_the_task_and_cancel_is_final() {
    let api = Api::start().await;
    let task = api.spawn("hang").await;
    let path = format!("/v1/tasks/{task}/wait?timeout_secs=1");
    let (status, waited) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(
        (status, waited["status"].as_str()),
        (200, Some("running")),
        "{waited}"
    );

    let cancel = format!("/v1/tasks/{task}/cancel");
    let body = json!({"reason": "enough"});
    let (status, cancelled) = parts(
        api.post(&cancel, &api.admin)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    assert_eq!(cancelled["reason"], "enough");
    // Cancelling again answers the cancelled task; a finished task is gone.
    let (status, _) = parts(api.post(&cancel, &api.admin).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let done = api.spawn("echo").await;
    api.finished(done).await;
    let response = api
        .post(&format!("/v1/tasks/{done}/cancel"), &api.admin)
        .send()
        .await
        .unwrap();
    expect_error(response, 410, "task_terminal").await;

    let path = format!("/v1/tasks/{task}");
    let (_, view) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(view["status"], "cancelled");
    assert_eq!(view["attempts"][0]["attempt"], 1, "{view}");
}

#[tokio::test]
async fn audit_and_event_pages() {
    let api = Api::start().await;
    let task = api.spawn("echo").await;
    api.finished(task).await;
    let observer = api.observer();
    let path = format!("/v1/audit?task_id={task}&limit=10");
    let (status, audit) = parts(api.get(&path, &observer).send().await.unwrap()).await;
    assert_eq!(status, 200, "{audit}");
    assert!(audit["records"].is_array(), "{audit}");

    let (status, page) = parts(
        api.get("/v1/events?limit=2", &observer)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["event"]["kind"], "task_created");
    assert_eq!(page["next_seq"], events[1]["seq"]);
    let path = format!("/v1/events?after_seq={}", page["next_seq"]);
    let (_, rest) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    let kinds: Vec<_> = rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].clone())
        .collect();
    assert!(kinds.contains(&json!("task_finished")), "{kinds:?}");
    let finished = rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"]["kind"] == "task_finished")
        .unwrap();
    assert_eq!(finished["event"]["attempt"], 1, "{finished}");
}

#[tokio::test]
async fn a_worker_spawns_a_sub_task_of_its_own_task() {
    let api = Api::start().await;
    let parent = api.spawn("parent").await;
    let credential = api.credential(&api.sub, parent).await;
    for bearer in [credential.handle(), credential.token()] {
        let response = api
            .post("/v1/tasks", bearer)
            .json(&json!({ "agent": "echo", "prompt": "child", "wait_secs": 5 }))
            .send()
            .await
            .unwrap();
        let (status, body) = parts(response).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["parent"], json!(parent.to_string()));
        assert_eq!(body["depth"], json!(1));
        assert_eq!(body["status"], json!("pass"));
    }
    // The worker's credential reaches nothing but its own kind of work.
    let response = api
        .get(&format!("/v1/tasks/{parent}"), credential.handle())
        .send()
        .await
        .unwrap();
    assert!(matches!(response.status().as_u16(), 401 | 403));
}

#[tokio::test]
async fn a_worker_of_a_leaf_agent_may_not_spawn() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let credential = api.credential(&api.sub, task).await;
    let response = api
        .post("/v1/tasks", credential.handle())
        .json(&json!({ "agent": "echo", "prompt": "child" }))
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;
}
