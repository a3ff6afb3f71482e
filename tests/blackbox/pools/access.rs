//! A worker pool's token can claim its own agents' attempts and do nothing else, and the pool
//! routes bound what a pool controls (docs/security.md, Roles and the gate).

use serde_json::{Value, json};

use super::{AGENTS, create, mint};
use crate::daemon::Swarmd;
use crate::harness::parts;

#[tokio::test]
async fn a_pool_token_can_do_nothing_else() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let claim = |agent: &str, max: u32, wait_ms: u64| json!({"pool": "p", "agent": agent, "max": max, "wait_ms": wait_ms});
    // Its own agent, nothing queued: an empty answer after the wait.
    let (status, body) = parts(
        sw.post("/v1/pool/claim", &token)
            .json(&claim("remote", 1, 10))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &body["attempts"]), (200, &json!([])), "{body}");

    // Another remote agent's attempts, the task API, admin routes, worker routes.
    let other = create(&sw, json!({"agent": "other", "prompt": "x"})).await;
    let refused = [
        sw.post("/v1/pool/claim", &token)
            .json(&claim("other", 1, 0)),
        sw.post("/v1/tasks", &token)
            .json(&json!({"agent": "remote", "prompt": "x"})),
        sw.get("/v1/tasks", &token),
        sw.get(&format!("/v1/tasks/{other}"), &token),
        sw.post(&format!("/v1/tasks/{other}/cancel"), &token),
        sw.get("/v1/agents", &token),
        sw.post("/v1/operators", &token).json(&json!({"roles": []})),
        sw.get("/v1/worker/prompt", &token),
        sw.post("/v1/worker/result", &token)
            .json(&json!({"value": 1})),
    ];
    for request in refused {
        let (status, body) = parts(request.send().await.unwrap()).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["code"], "forbidden", "{body}");
    }
    // The admin cannot claim either: the route is the pool role's alone.
    let (status, _) = parts(
        sw.post("/v1/pool/claim", &sw.admin)
            .json(&claim("remote", 1, 0))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);

    // Bad input: a clear 400 with its code, never a hang or a panic.
    for bad in [
        claim("remote", 0, 0),
        claim("remote", 65, 0),
        claim("remote", 1, 30_001),
        json!({"pool": "a b", "agent": "remote", "max": 1}),
        json!({"pool": "p", "agent": "remote", "max": 1, "extra": true}),
    ] {
        let (status, body) = parts(
            sw.post("/v1/pool/claim", &token)
                .json(&bad)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("bad_request")),
            "{bad}: {body}"
        );
    }
    let too_many: Vec<Value> = (0..1025)
        .map(|n| json!({"task_id": other, "attempt": n}))
        .collect();
    let (status, body) = parts(
        sw.post("/v1/pool/heartbeat", &token)
            .json(&json!({"pool": "p", "held": too_many}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(!sw.log().contains(&token), "the pool token reached the log");
}
