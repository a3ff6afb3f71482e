//! Floods of writes against the real binary: credential-less loopback
//! logins (each of which would persist a session) are limited per peer
//! address, and every write a credential makes — HTTP or WebSocket frame —
//! is limited per credential, with `429 rate_limited` and `Retry-After`,
//! counted; other credentials and other peers go on being served.

use std::time::Duration;

use serde_json::json;

use crate::daemon::Swarmd;
use crate::harness::{expect_error, parts};

const AGENTS: &str = r#"
[agents.cat]
kind = "process"
program = "/bin/cat"
"#;

#[tokio::test]
async fn a_loopback_login_flood_is_limited_per_peer() {
    let sw = Swarmd::new(&format!(
        "[auth]\nloopback_login = true\n[limits]\nlogin_rate_per_min = 5\n{AGENTS}"
    ))
    .start()
    .await;
    let mut accepted = 0;
    let mut limited = 0;
    for _ in 0..40 {
        let response = sw
            .http
            .post(sw.url("/v1/operators"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            201 => accepted += 1,
            429 => {
                let retry: u64 = response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=60).contains(&retry), "{retry}");
                expect_error(response, 429, "rate_limited").await;
                limited += 1;
            }
            other => panic!("login answered {other}"),
        }
    }
    assert_eq!((accepted, limited), (5, 35));
    let (_, list) = parts(sw.get("/v1/operators", &sw.admin).send().await.unwrap()).await;
    assert_eq!(
        list.as_array().unwrap().len(),
        5,
        "only admitted logins persist"
    );

    // Another loopback peer has its own share.
    let other = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .unwrap();
    let response = other
        .post(sw.url("/v1/operators"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let scrape = sw.metrics().await;
    assert!(
        scrape.contains("swarmd_rate_limited_total{limit=\"login\"} 35"),
        "{scrape}"
    );
}

#[tokio::test]
async fn writes_past_a_credentials_rate_get_429_with_retry_after() {
    let sw = Swarmd::new(&format!(
        "[limits]\nwrite_rate_per_sec = 2\nwrite_burst = 10\n{AGENTS}"
    ))
    .start()
    .await;
    let flooder = sw.login(json!({})).await;
    let mut created = 0;
    let mut retry_after = None;
    let flood = std::time::Instant::now();
    for _ in 0..40 {
        let response = sw
            .post("/v1/tasks", &flooder.token)
            .json(&json!({"agent": "cat", "prompt": "flood"}))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            201 => created += 1,
            429 => {
                retry_after = Some(response.headers()["retry-after"].clone());
                expect_error(response, 429, "rate_limited").await;
            }
            other => panic!("create answered {other}"),
        }
    }
    // The burst of 10, plus 2 a second refilled while the flood ran (timed
    // here, around every request), plus one of slack for rounding.
    let elapsed = flood.elapsed().as_secs_f64();
    let refilled = (2.0 * elapsed).ceil() as usize;
    let most = 10 + refilled + 1;
    assert!(
        (10..=most).contains(&created) && created < 40,
        "{created} of 40 created in {elapsed:.2}s (at most {most} allowed)"
    );
    let wait: u64 = retry_after.unwrap().to_str().unwrap().parse().unwrap();
    assert_eq!(wait, 1, "the next place frees within a second");

    // Another credential is served meanwhile, and the flooder after its wait.
    let (status, _) = sw.create(json!({"agent": "cat", "prompt": "admin"})).await;
    assert_eq!(status, 201);
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let own = sw
        .create_as(&flooder.token, json!({"agent": "cat", "prompt": "later"}))
        .await;

    // Its socket's writes (here cancels of its own finished task) count
    // against the same kind of limit.
    let mut ws = sw.connect(&flooder).await;
    for i in 0..30 {
        ws.send(json!({"type": "cancel_task", "req_id": format!("c{i}"), "task_id": own}))
            .await;
    }
    let limited = ws
        .recv_until(|f| f["type"] == "error" && f["code"] == "rate_limited")
        .await
        .0;
    assert!(
        limited["error"]
            .as_str()
            .unwrap()
            .contains("write_rate_per_sec"),
        "{limited}"
    );
    // So do its subscribes: each may make the store read the log from its
    // start. A fresh session's burst of 10 is spent by 30 at once.
    let reader = sw.login(json!({})).await;
    let mut ws = sw.connect(&reader).await;
    for i in 0..30 {
        ws.send(
            json!({"type": "subscribe", "req_id": format!("s{i}"), "task_id": own,
            "after_seq": 0}),
        )
        .await;
    }
    let limited = ws
        .recv_until(|f| f["type"] == "error" && f["code"] == "rate_limited")
        .await
        .0;
    assert!(
        limited["req_id"].as_str().unwrap().starts_with('s'),
        "{limited}"
    );
    let scrape = sw.metrics().await;
    for limit in ["write", "ws"] {
        assert!(
            scrape.contains(&format!("swarmd_rate_limited_total{{limit=\"{limit}\"}}")),
            "{limit}: {scrape}"
        );
    }
}
