//! Token attacks over HTTP: mutated tokens and handles, another task's
//! credential, no credential, an oversized header, a read-only token on a
//! write. Each is refused with the uniform body, counted, and changes nothing.

use serde_json::{Value, json};

use super::{Api, expect_error, parts};

/// Flips one character in the middle of `text` (keeping its alphabet).
fn mutate(text: &str, at: usize) -> String {
    let mut bytes = text.as_bytes().to_vec();
    bytes[at] = match bytes[at] {
        b'a' => b'b',
        b'0' => b'1',
        b'A' => b'B',
        _ => b'a',
    };
    String::from_utf8(bytes).unwrap()
}

async fn output_of(api: &Api, task: &str) -> Value {
    let path = format!("/v1/tasks/{task}/output");
    let (status, body) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    body["records"].clone()
}

#[tokio::test]
async fn forged_and_misused_credentials_change_nothing() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let other = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let result = json!({"value": "forged"});

    // A flipped character anywhere in the token (payload or tag) or handle.
    let token = cred.token();
    for at in [token.len() / 2, token.len() - 3] {
        let forged = mutate(token, at);
        let response = api
            .post("/v1/worker/result", &forged)
            .json(&result)
            .send()
            .await
            .unwrap();
        let body = expect_error(response, 401, "unauthorized").await;
        assert!(
            !body.to_string().contains(&forged[..20]),
            "the body never echoes the token"
        );
    }
    let forged_handle = mutate(cred.handle(), cred.handle().len() - 1);
    let response = api
        .post("/v1/worker/submit", &forged_handle)
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let response = api
        .get("/v1/worker/prompt", "wh-nothex")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;

    // A valid credential naming another task.
    let path = format!("/v1/worker/prompt?task_id={other}");
    expect_error(
        api.get(&path, cred.handle()).send().await.unwrap(),
        403,
        "task_mismatch",
    )
    .await;
    let wrong = json!({"task_id": other.to_string(), "value": "x"});
    let response = api
        .post("/v1/worker/result", cred.token())
        .json(&wrong)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "task_mismatch").await;

    // No credential, a non-bearer scheme, and a 3 KB header.
    let response = api
        .http
        .post(api.url("/v1/worker/result"))
        .json(&result)
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let response = api
        .http
        .post(api.url("/v1/worker/submit"))
        .header("authorization", format!("Basic {}", cred.handle()))
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let huge = format!("{}{}", cred.token(), "A".repeat(3 * 1024));
    let response = api
        .post("/v1/worker/result", &huge)
        .json(&result)
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "unauthorized").await;
    let response = api.get("/v1/tasks", &huge).send().await.unwrap();
    expect_error(response, 401, "unauthorized").await;

    // Nothing was written: the task still runs with no output.
    assert_eq!(output_of(&api, &task.to_string()).await, json!([]));
    assert_eq!(output_of(&api, &other.to_string()).await, json!([]));
    let path = format!("/v1/tasks/{task}");
    let (_, view) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(view["status"], "running");

    let metrics = api.metrics().await;
    for reason in [
        "bad_signature",
        "task_mismatch",
        "too_long",
        "missing",
        "malformed",
    ] {
        let line = format!("swarmd_token_verify_failures_total{{reason=\"{reason}\"}}");
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }

    // The real credential still works afterwards.
    let response = api
        .post("/v1/worker/result", cred.handle())
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn read_only_and_worker_credentials_stay_in_their_lane() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let observer = api.observer();

    // An observer reads, but never writes.
    let path = format!("/v1/tasks/{task}");
    assert_eq!(
        api.get(&path, &observer).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        api.get("/v1/tasks", &observer)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let spawn = json!({"agent": "echo", "prompt": "p"});
    let response = api
        .post("/v1/tasks", &observer)
        .json(&spawn)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;
    let response = api
        .post(&format!("/v1/tasks/{task}/cancel"), &observer)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;
    let response = api
        .post("/v1/worker/result", &observer)
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;

    // A correctly signed admin claim is not the admin: that is the `sws-`
    // secret, and swarmd never mints an admin CapToken.
    let now = api.engine.clock().now_secs();
    let admin_claims = swarmd_engine::auth::Claims {
        sub: "admin".into(),
        role: swarmd_engine::gate::Role::Admin,
        verbs: vec![swarmd_engine::gate::Verb::SpawnTask],
        task: None,
        attempt: None,
        sid: None,
        iat: now,
        exp: now + 600,
        jti: swarmd_engine::auth::Claims::random_jti(),
    };
    let forged = api.engine.tokens().mint(&admin_claims).unwrap();
    let response = api
        .post("/v1/tasks", forged.expose())
        .json(&spawn)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;

    // A worker credential is not a task-API credential.
    let response = api
        .post("/v1/tasks", cred.token())
        .json(&spawn)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "forbidden").await;
    // A live handle is a worker's credential, refused here as its token is.
    let response = api.get("/v1/tasks", cred.handle()).send().await.unwrap();
    expect_error(response, 403, "forbidden").await;

    // An operator session reads only its own part of the event log: not
    // the events of a task the admin created.
    let (session, sid) = api.session().await;
    let (status, page) = parts(api.get("/v1/events", &session).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert!(
        events.iter().all(|e| e["session"] == sid.as_str()),
        "{page}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["event"]["task_id"] == task.to_string()),
        "{page}"
    );
    assert!(page["next_seq"].as_u64().unwrap() > 0, "{page}");
    // A senior token reads tasks but not the event log.
    let senior = api
        .engine
        .tokens()
        .mint_role(swarmd_engine::gate::Role::Senior, 600, None)
        .unwrap();
    expect_error(
        api.get("/v1/events", senior.token.expose())
            .send()
            .await
            .unwrap(),
        403,
        "forbidden",
    )
    .await;
    assert_eq!(
        api.get("/v1/events", &observer)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let path = format!("/v1/tasks/{task}");
    let (_, view) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(view["status"], "running", "{view}");
    let (_, list) = parts(api.get("/v1/tasks", &api.admin).send().await.unwrap()).await;
    assert_eq!(
        list["tasks"].as_array().unwrap().len(),
        1,
        "no task was created: {list}"
    );
}
