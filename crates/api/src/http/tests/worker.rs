//! Worker routes with tokens and handles: prompt, output, result, submit,
//! heartbeat, idempotent replays and late writes.

use serde_json::json;

use super::{Api, expect_error, parts};

#[tokio::test]
async fn prompt_with_token_and_with_handle() {
    let api = Api::start().await;
    let task = api
        .spawn_with(json!({"agent": "sub", "prompt": "p1", "system": "s", "input": {"k": 1}}))
        .await;
    let cred = api.credential(&api.sub, task).await;
    for bearer in [cred.token(), cred.handle()] {
        let path = format!("/v1/worker/prompt?task_id={task}");
        let (status, body) = parts(api.get(&path, bearer).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["task_id"], task.to_string());
        assert_eq!(body["attempt"], 1);
        assert_eq!(body["agent"], "sub");
        assert_eq!(body["prompt"], "p1");
        assert_eq!(body["system"], "s");
        assert_eq!(body["input"], json!({"k": 1}));
        assert!(body["deadline"].as_u64().unwrap() > 0);
    }
    // The task is optional: the credential names it.
    let (status, body) = parts(
        api.get("/v1/worker/prompt", cred.handle())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["prompt"].as_str()), (200, Some("p1")));
}

#[tokio::test]
async fn output_then_result_with_idempotent_replay() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;

    let one = json!({"type": "progress", "stage": "start"});
    let response = api
        .post("/v1/worker/output", cred.handle())
        .json(&one)
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!((status, body["seq"].as_u64()), (200, Some(1)), "{body}");
    assert_eq!(body["attempt"], 1);

    let ndjson = "{\"type\":\"partial\",\"chunk\":{\"kind\":\"inline\",\"value\":\"a\"}}\n\
                  {\"type\":\"progress\",\"stage\":\"mid\",\"note\":\"half\"}\n";
    let response = api
        .post("/v1/worker/output", cred.token())
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!((status, body["seq"].as_u64()), (200, Some(3)), "{body}");

    let final_event =
        json!({"type": "final", "content": {"kind": "inline", "value": 1}, "ok": true});
    let response = api
        .post("/v1/worker/output", cred.handle())
        .json(&final_event)
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;

    let result = json!({"task_id": task.to_string(), "value": {"answer": 42}});
    let post = |body: &serde_json::Value, key: Option<&str>| {
        let mut request = api.post("/v1/worker/result", cred.handle()).json(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let (status, first) = parts(post(&result, Some("k1")).await.unwrap()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first,
        json!({"task_id": task.to_string(), "attempt": 1, "accepted": true})
    );
    // Same key and body: the first answer again.
    let (status, replay) = parts(post(&result, Some("k1")).await.unwrap()).await;
    assert_eq!((status, &replay), (200, &first));
    // Same key, other body, or no key: already final (docs/tasks.md, Late writes).
    let other = json!({"value": "other"});
    expect_error(
        post(&other, Some("k1")).await.unwrap(),
        409,
        "already_final",
    )
    .await;
    expect_error(post(&result, None).await.unwrap(), 409, "already_final").await;

    let done = api.finished(task).await;
    assert_eq!(done["status"], "pass", "{done}");
    assert_eq!(done["result"], json!({"value": {"answer": 42}, "ok": true}));
    // The replay also works once the task is terminal.
    let (status, late_replay) = parts(post(&result, Some("k1")).await.unwrap()).await;
    assert_eq!((status, late_replay), (200, first));
}

#[tokio::test]
async fn submit_stores_text_or_declared_json() {
    let api = Api::start().await;
    let text_task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, text_task).await;
    let response = api
        .post("/v1/worker/submit", cred.handle())
        .header("content-type", "text/plain")
        .body("the answer\n\n  ")
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!((status, &body["accepted"]), (200, &json!(true)), "{body}");
    let done = api.finished(text_task).await;
    assert_eq!(done["result"], json!({"value": "the answer", "ok": true}));

    let json_task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, json_task).await;
    let path = format!("/v1/worker/submit?ok=false&task_id={json_task}");
    let response = api
        .post(&path, cred.token())
        .header("content-type", "application/json")
        .body("{\"why\": \"cannot\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let done = api.finished(json_task).await;
    assert_eq!(done["status"], "blocked");
    assert_eq!(
        done["result"],
        json!({"value": {"why": "cannot"}, "ok": false})
    );
}

#[tokio::test]
async fn submit_replay_must_repeat_ok_too() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let submit = |query: &'static str| {
        api.post(&format!("/v1/worker/submit{query}"), cred.handle())
            .header("Idempotency-Key", "same")
            .body("done")
            .send()
    };
    assert_eq!(submit("").await.unwrap().status(), 200);
    assert_eq!(submit("?ok=true").await.unwrap().status(), 200);
    expect_error(submit("?ok=false").await.unwrap(), 409, "already_final").await;
    expect_error(submit("?ok=maybe").await.unwrap(), 400, "bad_request").await;
}

#[tokio::test]
async fn heartbeat_empty_or_with_task() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let other = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let (status, body) = parts(
        api.post("/v1/worker/heartbeat", cred.handle())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["deadline"].as_u64().unwrap() > 0);
    assert!(body["handle_expires"].as_u64().unwrap() > 0);
    // A fresh token is only minted when a third of the TTL is left.
    assert!(body.get("token").is_none(), "{body}");

    let mine = json!({"task_id": task.to_string()});
    let response = api
        .post("/v1/worker/heartbeat", cred.token())
        .json(&mine)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let theirs = json!({"task_id": other.to_string()});
    let response = api
        .post("/v1/worker/heartbeat", cred.handle())
        .json(&theirs)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "task_mismatch").await;
    let response = api
        .post(
            &format!("/v1/worker/heartbeat?task_id={other}"),
            cred.handle(),
        )
        .json(&mine)
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;
}

#[tokio::test]
async fn late_writes_after_cancel_are_gone() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let response = api
        .post(&format!("/v1/tasks/{task}/cancel"), &api.admin)
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );

    let result = json!({"value": "too late"});
    let response = api
        .post("/v1/worker/result", cred.handle())
        .json(&result)
        .send()
        .await
        .unwrap();
    expect_error(response, 410, "task_terminal").await;
    let progress = json!({"type": "progress", "stage": "late"});
    let response = api
        .post("/v1/worker/output", cred.token())
        .json(&progress)
        .send()
        .await
        .unwrap();
    expect_error(response, 410, "task_terminal").await;
    let response = api
        .post("/v1/worker/submit", cred.handle())
        .body("late")
        .send()
        .await
        .unwrap();
    expect_error(response, 410, "task_terminal").await;

    let done = api.finished(task).await;
    assert_eq!(done["status"], "cancelled");
    assert!(done.get("result").is_none(), "{done}");
}

#[tokio::test]
async fn superseded_attempt_cannot_write() {
    let api = Api::start().await;
    let policy = json!({"max_attempts": 2, "retry_backoff_ms": 0});
    let task = api
        .spawn_with(json!({"agent": "flaky", "prompt": "p", "policy": policy}))
        .await;
    let old = api.credential_for(&api.flaky, task, 1).await;
    let new = api.credential_for(&api.flaky, task, 2).await;

    let result = json!({"value": "stale"});
    let response = api
        .post("/v1/worker/result", old.handle())
        .json(&result)
        .send()
        .await
        .unwrap();
    expect_error(response, 409, "attempt_superseded").await;
    let progress = json!({"type": "progress", "stage": "stale"});
    let response = api
        .post("/v1/worker/output", old.token())
        .json(&progress)
        .send()
        .await
        .unwrap();
    expect_error(response, 409, "attempt_superseded").await;

    let response = api
        .post("/v1/worker/submit", new.handle())
        .body("fresh")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let done = api.finished(task).await;
    assert_eq!(done["status"], "pass");
    assert_eq!(done["attempt"], 2);
    assert_eq!(done["result"]["value"], "fresh");
}
