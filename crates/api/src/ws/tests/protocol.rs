//! Protocol edges over a real socket: garbage and binary frames, the frame
//! size limit, socket replacement and deletion, and handshake auth.

use serde_json::json;
use tokio_tungstenite::tungstenite::{self, Message};

use super::support::{Server, eventually};
use crate::ws::{CLOSE_REPLACED, CLOSE_SESSION_ENDED, MAX_FRAME_BYTES};

#[tokio::test]
async fn garbage_frames_get_errors_and_the_connection_stays_up() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let mut client = server.connect(&login).await;
    let cases = [
        ("not json at all", None, "not a JSON object"),
        (
            r#"{"type":"launch","req_id":"g-1"}"#,
            Some("g-1"),
            "unknown frame type `launch`",
        ),
        (
            r#"{"type":"spawn_task","req_id":"g-2"}"#,
            Some("g-2"),
            "malformed `spawn_task` frame",
        ),
        (
            r#"{"req_id":"g-3"}"#,
            Some("g-3"),
            "the frame has no `type`",
        ),
        (
            r#"{"type":"answer","req_id":"g-4","value":1}"#,
            Some("g-4"),
            "no pending request `g-4`",
        ),
    ];
    // An ack for a spawn that is no longer pending (its attempt ended) is
    // ignored: the next frame the client sees answers the first case.
    client
        .send_text(r#"{"type":"spawn_ack","req_id":"long-gone"}"#)
        .await;
    for (text, req_id, message) in cases {
        client.send_text(text).await;
        let error = client.recv().await;
        assert_eq!(error["type"], "error", "{text}");
        assert_eq!(
            error.get("req_id").and_then(|r| r.as_str()),
            req_id,
            "{text}"
        );
        assert!(
            error["error"].as_str().unwrap().contains(message),
            "{text}: {error}"
        );
    }
    client.send_message(Message::binary(vec![1, 2, 3])).await;
    let error = client.recv().await;
    assert_eq!(error["code"], "bad_request");
    assert!(error["error"].as_str().unwrap().contains("binary frames"));
    client
        .send(json!({"type": "spawn_task", "req_id": "ok-1", "agent": "nope", "prompt": "p"}))
        .await;
    let refused = client.recv().await;
    assert_eq!(
        (refused["req_id"].clone(), refused["code"].clone()),
        (json!("ok-1"), json!("not_found"))
    );
    client
        .send(json!({"type": "spawn_task", "req_id": "ok-2", "agent": "echo", "prompt": "p"}))
        .await;
    assert_eq!(
        client.recv().await["type"],
        "task_accepted",
        "still serving"
    );
}

#[tokio::test]
async fn an_oversized_frame_closes_with_policy_violation() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let mut client = server.connect(&login).await;
    let big = format!(
        r#"{{"type":"answer","req_id":"r","value":"{}"}}"#,
        "x".repeat(MAX_FRAME_BYTES)
    );
    client.send_text(&big).await;
    let close = client.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    let session = server.harness.registry.get(&login.sid).unwrap();
    eventually("detach", || !session.connected()).await;
}

#[tokio::test]
async fn a_new_socket_replaces_the_old_and_delete_closes_it() {
    let server = Server::start().await;
    let login = server.login(json!({"roles": ["main-ai"]})).await;
    let mut first = server.connect(&login).await;
    let session = server.harness.registry.get(&login.sid).unwrap();
    eventually("attach", || session.connected()).await;
    let mut second = server.connect(&login).await;
    let close = first.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), CLOSE_REPLACED);
    second
        .send(json!({"type": "spawn_task", "req_id": "r-1", "agent": "echo", "prompt": "p"}))
        .await;
    assert_eq!(second.recv().await["type"], "task_accepted");
    assert!(session.connected());

    let response = server
        .http
        .delete(server.url(&format!("/v1/operators/{}", login.sid)))
        .bearer_auth(&login.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let close = second.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), CLOSE_SESSION_ENDED);
    assert_eq!(close.reason.as_str(), "session deleted");
}

/// The HTTP status of a refused handshake.
fn refused(result: Result<super::support::Client, tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("the handshake succeeded"),
    }
}

#[tokio::test]
async fn only_the_sessions_own_token_opens_its_socket() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let other = server.login(json!({})).await;
    let admin = server.harness.admin_token.clone();
    assert_eq!(refused(server.dial(login.sid, None, None).await), 401);
    assert_eq!(
        refused(server.dial(login.sid, Some("sws-nonsense"), None).await),
        401
    );
    assert_eq!(
        refused(server.dial(login.sid, Some(&admin), None).await),
        403
    );
    assert_eq!(
        refused(server.dial(login.sid, Some(&other.token), None).await),
        403
    );
    let unknown = swarmd_engine::ids::SessionId::new();
    assert_eq!(
        refused(server.dial(unknown, Some(&login.token), None).await),
        404
    );
    let mut client = server
        .dial(login.sid, None, Some(&login.token))
        .await
        .unwrap();
    client
        .send(json!({"type": "spawn_task", "req_id": "q-1", "agent": "echo", "prompt": "p"}))
        .await;
    assert_eq!(
        client.recv().await["type"],
        "task_accepted",
        "?token= works for browsers"
    );

    let plain = server
        .http
        .get(server.url(&format!("/v1/operators/{}/ws", login.sid)))
        .bearer_auth(&login.token)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 400, "a request that is not an upgrade");
    let bad = server
        .http
        .get(server.url("/v1/operators/S-nope/ws"))
        .bearer_auth(&login.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn draining_closes_every_socket_with_going_away() {
    let server = Server::start().await;
    let login = server.login(json!({})).await;
    let mut client = server.connect(&login).await;
    let registry = &server.harness.registry;
    eventually("attach", || registry.connected() == 1).await;
    registry.close_sockets();
    let close = client.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1001);
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        registry.wait_sockets(std::time::Duration::from_secs(5)),
    )
    .await;
    assert!(waited.is_ok());
    assert_eq!(registry.connected(), 0);
    assert!(
        registry.get(&login.sid).is_some(),
        "the session outlives the drain"
    );
}
