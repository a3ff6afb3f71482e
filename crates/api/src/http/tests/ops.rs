//! Operations routes: liveness, readiness, metrics and status.

use serde_json::json;

use super::{Api, expect_error, parts};

#[tokio::test]
async fn health_readiness_and_status() {
    let api = Api::start().await;
    let response = api.http.get(api.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "ok");
    let (status, ready) = parts(api.http.get(api.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, ready), (200, json!({"status": "ready"})));

    let task = api.spawn("echo").await;
    api.finished(task).await;
    let (status, body) = parts(api.get("/v1/status", &api.observer()).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert!(body["uptime_secs"].is_u64());
    assert_eq!(body["base_url"], api.state.base_url.as_str());
    assert_eq!(body["store"]["backend"], "sqlite");
    assert_eq!(body["counts"]["tasks_created"], 1);
    assert_eq!(body["counts"]["tasks_finished"]["pass"], 1);
    assert_eq!(body["draining"], false);
    expect_error(
        api.http.get(api.url("/v1/status")).send().await.unwrap(),
        401,
        "unauthorized",
    )
    .await;
}

#[tokio::test]
async fn metrics_lists_the_spec_metrics() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let progress = json!({"type": "progress", "stage": "s"});
    api.post("/v1/worker/output", cred.handle())
        .json(&progress)
        .send()
        .await
        .unwrap();
    api.post("/v1/worker/submit", cred.handle())
        .body("ok")
        .send()
        .await
        .unwrap();
    api.finished(task).await;
    api.get("/v1/tasks", "wh-00000000000000000000000000000000")
        .send()
        .await
        .unwrap();

    let response = api.http.get(api.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    for needle in [
        "swarmd_tasks_created_total 1",
        "swarmd_tasks_finished_total{status=\"pass\"} 1",
        "swarmd_attempts_finished_total{outcome=\"pass\"} 1",
        "swarmd_dispatch_latency_seconds_count 1",
        "swarmd_dispatch_latency_seconds_bucket{le=\"+Inf\"} 1",
        "swarmd_settle_latency_seconds_count 1",
        "swarmd_queue_depth 0",
        "swarmd_attempts_running 0",
        "swarmd_tasks{status=\"running\"} 0",
        "swarmd_sessions_connected 0",
        "swarmd_store_append_latency_seconds_count 2",
        "swarmd_token_verify_failures_total{reason=\"unknown_handle\"} 1",
        "swarmd_http_requests_total{route=\"/v1/worker/output\",status=\"200\"} 1",
        "swarmd_http_requests_total{route=\"/v1/tasks/{id}/wait\",status=\"200\"} 1",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
    }
}
