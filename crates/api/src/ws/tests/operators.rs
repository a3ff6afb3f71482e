//! The operator session routes over HTTP: login and its auth, list,
//! get and delete with their status codes.

use serde_json::{Value, json};

use super::support::{Server, eventually};

async fn body(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn login_needs_the_admin_and_role_names_are_exclusive() {
    let server = Server::start().await;
    let url = server.url("/v1/operators");
    let (status, created) = body(
        server
            .http
            .post(&url)
            .bearer_auth(&server.harness.admin_token)
            .json(
                &json!({"roles": ["main-ai"], "kind": "composite", "desc": "planner",
                          "capability_manifest": {"tools": ["Read"]}}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(created["roles"], json!(["main-ai"]));
    assert!(created["sid"].as_str().unwrap().starts_with("S-"));
    assert!(created["token"].as_str().unwrap().starts_with("sws-"));

    let (status, taken) = body(
        server
            .http
            .post(&url)
            .bearer_auth(&server.harness.admin_token)
            .json(&json!({"roles": ["main-ai"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, taken["code"].clone()), (409, json!("role_taken")));

    let token = created["token"].as_str().unwrap();
    let cases: [(Option<&str>, &str, u16); 4] = [
        (None, "{}", 401),
        (Some("sws-0000"), "{}", 401),
        (Some(token), "{}", 403),
        (
            Some(&server.harness.admin_token),
            r#"{"kind": "boss"}"#,
            400,
        ),
    ];
    for (bearer, request, expected) in cases {
        let mut call = server.http.post(&url).body(request);
        if let Some(bearer) = bearer {
            call = call.bearer_auth(bearer);
        }
        let (status, error) = body(call.send().await.unwrap()).await;
        assert_eq!(status, expected, "{bearer:?} {request}: {error}");
        assert!(error["code"].is_string() && error["error"].is_string());
    }
    // No body at all is a login with every default.
    let response = server
        .http
        .post(&url)
        .bearer_auth(&server.harness.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

#[tokio::test]
async fn loopback_login_needs_no_credential_only_when_enabled() {
    let closed = Server::start().await;
    let response = closed
        .http
        .post(closed.url("/v1/operators"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    let open = Server::start_with(|config| config.auth.loopback_login = true).await;
    let (status, created) = body(
        open.http
            .post(open.url("/v1/operators"))
            .json(&json!({"roles": ["main-ai"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    // A credential that is there must still be the admin's.
    let response = open
        .http
        .post(open.url("/v1/operators"))
        .bearer_auth(created["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn list_get_and_delete_follow_who_is_asking() {
    let server = Server::start().await;
    let admin = server.harness.admin_token.clone();
    let mine = server
        .login(json!({"roles": ["main-ai"], "description": "me"}))
        .await;
    let theirs = server.login(json!({"roles": ["senior"]})).await;
    let _socket = server.connect(&mine).await;
    let session = server.harness.registry.get(&mine.sid).unwrap();
    eventually("attach", || session.connected()).await;

    let list_url = server.url("/v1/operators");
    let (status, list) = body(
        server
            .http
            .get(&list_url)
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let entries = list.as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let me = entries
        .iter()
        .find(|e| e["sid"] == mine.sid.to_string())
        .unwrap();
    assert_eq!(me["connected"], true);
    assert_eq!(me["kind"], "main_ai");
    assert_eq!(me["roles"], json!(["main-ai"]));
    assert!(me["last_seen"].as_u64().unwrap() > 0);
    let response = server
        .http
        .get(&list_url)
        .bearer_auth(&mine.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403, "listing is for the admin");

    let one = |sid: &str| server.url(&format!("/v1/operators/{sid}"));
    let mine_url = one(&mine.sid.to_string());
    let (status, shown) = body(
        server
            .http
            .get(&mine_url)
            .bearer_auth(&mine.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, shown["description"].clone()), (200, json!("me")));
    let response = server
        .http
        .get(&mine_url)
        .bearer_auth(&theirs.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let response = server
        .http
        .get(&mine_url)
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = server
        .http
        .get(one("S-bad"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let unknown = swarmd_engine::ids::SessionId::new().to_string();
    let (status, missing) = body(
        server
            .http
            .get(one(&unknown))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, missing["code"].clone()), (404, json!("not_found")));

    let response = server
        .http
        .delete(&mine_url)
        .bearer_auth(&theirs.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let theirs_url = one(&theirs.sid.to_string());
    let response = server
        .http
        .delete(&theirs_url)
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let response = server
        .http
        .get(&theirs_url)
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // Its role is free again.
    server.login(json!({"roles": ["senior"]})).await;
    let response = server
        .http
        .delete(&mine_url)
        .bearer_auth(&mine.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204, "a session may delete itself");
    eventually("its socket closed", || !session.connected()).await;
}
