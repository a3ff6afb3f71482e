//! The bad-input matrix: oversized, malformed and deeply nested bodies,
//! wrong media types, unknown agents, ids and routes, and draining. Every
//! answer carries `{error, code}` and the daemon keeps serving.

use bytes::Bytes;
use futures_util::stream;
use serde_json::json;

use super::{Api, expect_error};

const TEN_MIB: usize = 10 * 1024 * 1024;

async fn still_alive(api: &Api) {
    let response = api.http.get(api.url("/healthz")).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn ten_mib_bodies_are_413_declared_or_streamed() {
    let api = Api::start().await;
    let big = format!(
        "{{\"agent\":\"echo\",\"prompt\":\"{}\"}}",
        "x".repeat(TEN_MIB)
    );
    let response = api
        .post("/v1/tasks", &api.admin)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    expect_error(response, 413, "payload_too_large").await;

    // Without a Content-Length the extractor's limit cuts it.
    let chunks: Vec<Result<Bytes, std::io::Error>> = (0..10)
        .map(|_| Ok(Bytes::from(vec![b' '; 1024 * 1024])))
        .collect();
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let response = api
        .post("/v1/worker/submit", cred.handle())
        .body(reqwest::Body::wrap_stream(stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    expect_error(response, 413, "payload_too_large").await;
    still_alive(&api).await;
}

#[tokio::test]
async fn configured_body_limit_applies_to_every_route() {
    let api = Api::start_with(|c| c.limits.max_body_bytes = 1024).await;
    let body = json!({"agent": "echo", "prompt": "y".repeat(2048)});
    let response = api
        .post("/v1/tasks", &api.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_error(response, 413, "payload_too_large").await;
    let response = api
        .post("/v1/operators", &api.admin)
        .body(vec![b' '; 2048])
        .send()
        .await
        .unwrap();
    expect_error(response, 413, "payload_too_large").await;
}

#[tokio::test]
async fn malformed_and_nested_json_is_400() {
    let api = Api::start().await;
    let post = |body: String| {
        api.post("/v1/tasks", &api.admin)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect_error(
        post("{\"agent\": ".into()).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    expect_error(post("[1, 2]".into()).await.unwrap(), 400, "bad_request").await;
    expect_error(
        post("{\"prompt\": \"no agent\"}".into()).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let extra = json!({"agent": "echo", "prompt": "p", "surprise": 1}).to_string();
    expect_error(post(extra).await.unwrap(), 400, "bad_request").await;
    let metadata = json!({"agent": "echo", "prompt": "p", "metadata": [1]}).to_string();
    expect_error(post(metadata).await.unwrap(), 400, "bad_request").await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let nested = format!("{{\"agent\":\"echo\",\"prompt\":\"p\",\"input\":{deep}}}");
    expect_error(post(nested).await.unwrap(), 400, "bad_request").await;

    // The worker routes parse their bodies themselves: the same answers.
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let worker_post = |path: &'static str, body: String| {
        api.post(path, cred.handle())
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect_error(
        worker_post("/v1/worker/result", deep.clone())
            .await
            .unwrap(),
        400,
        "bad_request",
    )
    .await;
    expect_error(
        worker_post("/v1/worker/output", deep.clone())
            .await
            .unwrap(),
        400,
        "bad_request",
    )
    .await;
    expect_error(
        worker_post("/v1/worker/result", "{".into()).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    expect_error(
        worker_post("/v1/worker/output", "{}".into()).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    // `submit` of declared JSON nested past the depth bound is refused too
    // (a body that merely does not parse is stored as text).
    expect_error(
        worker_post("/v1/worker/submit", deep).await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    still_alive(&api).await;
}

#[tokio::test]
async fn media_types_ids_agents_and_routes() {
    let api = Api::start().await;
    let body = json!({"agent": "echo", "prompt": "p"}).to_string();
    let response = api
        .post("/v1/tasks", &api.admin)
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap();
    expect_error(response, 415, "unsupported_media_type").await;

    let unknown = json!({"agent": "no-such-agent", "prompt": "p"});
    let response = api
        .post("/v1/tasks", &api.admin)
        .json(&unknown)
        .send()
        .await
        .unwrap();
    expect_error(response, 404, "not_found").await;

    expect_error(
        api.get("/v1/tasks/T-nope", &api.admin)
            .send()
            .await
            .unwrap(),
        400,
        "bad_request",
    )
    .await;
    let missing = swarmd_engine::ids::TaskId::new();
    let path = format!("/v1/tasks/{missing}");
    expect_error(
        api.get(&path, &api.admin).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    let path = format!("/v1/tasks/{missing}/cancel");
    expect_error(
        api.post(&path, &api.admin).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    expect_error(
        api.get("/v1/tasks?status=sideways", &api.admin)
            .send()
            .await
            .unwrap(),
        400,
        "bad_request",
    )
    .await;
    expect_error(
        api.get("/v1/tasks?limit=-1", &api.admin)
            .send()
            .await
            .unwrap(),
        400,
        "bad_request",
    )
    .await;
    let response = api
        .post("/v1/tasks", &api.admin)
        .header("Idempotency-Key", "")
        .json(&unknown)
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;

    expect_error(
        api.get("/v1/nowhere", &api.admin).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    let response = api.http.delete(api.url("/v1/tasks")).send().await.unwrap();
    expect_error(response, 405, "method_not_allowed").await;
    still_alive(&api).await;
}

#[tokio::test]
async fn draining_refuses_new_tasks_and_readiness() {
    let api = Api::start().await;
    assert_eq!(
        api.http
            .get(api.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    api.engine.start_draining();
    let body = json!({"agent": "echo", "prompt": "p"});
    let response = api
        .post("/v1/tasks", &api.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_error(response, 503, "draining").await;
    expect_error(
        api.http.get(api.url("/readyz")).send().await.unwrap(),
        503,
        "draining",
    )
    .await;
    // Reads go on.
    assert_eq!(
        api.get("/v1/tasks", &api.admin)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    still_alive(&api).await;
}

/// Arbitrary and adversarial `POST /v1/tasks` bodies through the real router:
/// never a 5xx, every refusal a `{error, code}` body, and the daemon keeps
/// serving. Fields are drawn from the body's own names with values of every
/// JSON type, so most cases reach validation rather than the parser.
#[tokio::test]
async fn arbitrary_task_bodies_are_accepted_or_refused_with_a_4xx() {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,40}".prop_map(serde_json::Value::from),
        Just(json!("echo")),
    ];
    let value = leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6).prop_map(|m| json!(m)),
        ]
    });
    let names = prop::sample::select(vec![
        "agent",
        "prompt",
        "system",
        "input",
        "metadata",
        "policy",
        "layers",
        "wait_secs",
        "max_attempts",
        "delegate",
        "parent",
        "",
    ]);
    let body = prop::collection::btree_map(names, value, 0..8).prop_map(|fields| {
        let mut object = serde_json::Map::new();
        for (name, value) in fields {
            object.insert(name.to_owned(), value);
        }
        // Most bodies name a real agent, so the rest of the body is validated.
        object.entry("agent").or_insert(json!("echo"));
        serde_json::Value::Object(object).to_string()
    });
    let text = prop_oneof![3 => body, 1 => "\\PC{0,64}"];

    let api = Api::start().await;
    let mut runner = TestRunner::deterministic();
    for _ in 0..256 {
        let input = text.new_tree(&mut runner).unwrap().current();
        let response = api
            .post("/v1/tasks", &api.admin)
            .header("content-type", "application/json")
            .body(input.clone())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let answer: serde_json::Value = response.json().await.unwrap_or_default();
        assert!(status < 500, "{status} for {input}: {answer}");
        if status >= 400 {
            assert!(
                answer["error"].is_string() && answer["code"].is_string(),
                "{status} for {input}: {answer}"
            );
        }
    }
    still_alive(&api).await;
}

/// Budgets are positive: a zero, negative, huge or mistyped `max_tokens` or
/// `max_cost_usd` is a 400 naming the field, and a valid one is kept.
#[tokio::test]
async fn budget_policy_fields_are_bounded() {
    let api = Api::start().await;
    let post = |policy: serde_json::Value| {
        let body = json!({"agent": "echo", "prompt": "p", "policy": policy});
        api.post("/v1/tasks", &api.admin).json(&body).send()
    };
    for (policy, field) in [
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"max_tokens": -1}), "max_tokens"),
        (json!({"max_tokens": "many"}), "max_tokens"),
        (json!({"max_cost_usd": 0}), "max_cost_usd"),
        (json!({"max_cost_usd": -0.5}), "max_cost_usd"),
        (json!({"max_cost_usd": 1e300}), "max_cost_usd"),
        (json!({"max_cost_usd": "1.0"}), "max_cost_usd"),
    ] {
        let body = expect_error(post(policy.clone()).await.unwrap(), 400, "bad_request").await;
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{policy}: {body}");
    }
    let response = post(json!({"max_tokens": 5000, "max_cost_usd": 0.25}))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let created: serde_json::Value = response.json().await.unwrap();
    let path = format!("/v1/tasks/{}", created["task_id"].as_str().unwrap());
    let task: serde_json::Value = api
        .get(&path, &api.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(task["policy"]["max_tokens"], 5000, "{task}");
    assert_eq!(task["policy"]["max_cost_usd"], 0.25, "{task}");
    still_alive(&api).await;
}
