//! Task output as a JSON page and as a live SSE stream that resumes from
//! `Last-Event-ID`, a cursor naming its attempt; the event log as SSE, and
//! a cursor past its end refused.

use std::collections::VecDeque;

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::{Api, PATIENCE, expect_error, parts};
use swarmd_client::{SseEvent, SseParser};

/// An open SSE response, parsed event by event.
struct Stream {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl Stream {
    async fn open(api: &Api, path: &str, bearer: &str, last_id: Option<&str>) -> Stream {
        let mut request = api.get(path, bearer).header("accept", "text/event-stream");
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Stream {
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::default(),
            ready: VecDeque::new(),
        }
    }

    /// The next event, or `None` once the server ended the stream.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next())
                .await
                .expect("no SSE event in time")?
                .unwrap();
            self.ready.extend(self.parser.push(&chunk));
        }
    }

    async fn expect(&mut self) -> (String, Value) {
        let event = self.next().await.expect("the stream ended early");
        let data = serde_json::from_str(&event.data).unwrap();
        (event.id.unwrap_or_default(), data)
    }
}

fn progress(stage: &str) -> Value {
    json!({"type": "progress", "stage": stage})
}

#[tokio::test]
async fn output_page_lists_every_attempt_in_order() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let ndjson = format!("{}\n{}\n", progress("a"), progress("b"));
    let response = api
        .post("/v1/worker/output", cred.handle())
        .body(ndjson)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let path = format!("/v1/tasks/{task}/output");
    let (status, page) = parts(api.get(&path, &api.observer()).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["records"][0]["event"], progress("a"));
    assert_eq!(page["records"][1]["seq"], 2);
    assert_eq!(page["records"][1]["attempt"], 1);
    assert_eq!(page["records"][1]["producer"], "worker");
    assert_eq!(page["next"], "1:2");
    assert_eq!(page["more"], false);

    let path = format!("/v1/tasks/{task}/output?attempt=1&after_seq=1&limit=5");
    let (_, page) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(page["records"].as_array().unwrap().len(), 1);
    assert_eq!(page["next"], "2");
    let path = format!("/v1/tasks/{task}/output?limit=1");
    let (_, page) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(
        (page["more"].as_bool(), page["next"].as_str()),
        (Some(true), Some("1:1"))
    );
}

#[tokio::test]
async fn sse_streams_live_output_and_resumes_from_last_event_id() {
    let api = Api::start().await;
    let task = api.spawn("sub").await;
    let cred = api.credential(&api.sub, task).await;
    let path = format!("/v1/tasks/{task}/output");

    // Already stored before the stream opens.
    let response = api
        .post("/v1/worker/output", cred.handle())
        .json(&progress("early"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = Stream::open(&api, &path, &api.admin, None).await;
    let (id, data) = stream.expect().await;
    assert_eq!(
        (id.as_str(), &data["seq"], &data["event"]),
        ("1:1", &json!(1), &progress("early"))
    );

    // Live NDJSON events arrive as they are appended.
    let ndjson = format!("{}\n{}\n", progress("live-1"), progress("live-2"));
    let response = api
        .post("/v1/worker/output", cred.token())
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (id, data) = stream.expect().await;
    assert_eq!((id.as_str(), &data["event"]), ("1:2", &progress("live-1")));
    let (id, _) = stream.expect().await;
    assert_eq!(id, "1:3");
    drop(stream);

    // Missed while disconnected: resumed without gaps or repeats.
    let response = api
        .post("/v1/worker/output", cred.handle())
        .json(&progress("missed"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut resumed = Stream::open(&api, &path, &api.observer(), Some("1:2")).await;
    assert_eq!(resumed.expect().await.0, "1:3");
    let (id, data) = resumed.expect().await;
    assert_eq!((id.as_str(), &data["event"]), ("1:4", &progress("missed")));

    // The result ends the stream once it is delivered.
    let response = api
        .post("/v1/worker/submit", cred.handle())
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (id, data) = resumed.expect().await;
    assert_eq!(id, "1:5");
    assert_eq!(data["event"]["type"], "final");
    assert!(
        resumed.next().await.is_none(),
        "the stream ends with the task"
    );

    // A finished task's stream replays what is stored and ends; one attempt
    // only uses plain sequence numbers.
    let single = format!("/v1/tasks/{task}/output?attempt=1");
    let mut replay = Stream::open(&api, &single, &api.admin, Some("3")).await;
    assert_eq!(replay.expect().await.0, "4");
    assert_eq!(replay.expect().await.0, "5");
    assert!(replay.next().await.is_none());
}

#[tokio::test]
async fn event_log_streams_and_resumes() {
    let api = Api::start().await;
    let observer = api.observer();
    let first = api.spawn("echo").await;
    api.finished(first).await;
    let mut stream = Stream::open(&api, "/v1/events", &observer, None).await;
    let (id, data) = stream.expect().await;
    assert_eq!(
        (id.as_str(), &data["event"]["kind"]),
        ("1", &json!("task_created"))
    );
    let mut last = id;
    // Drain what is stored, then see a live event.
    let second = api.spawn("hang").await;
    loop {
        let (id, data) = stream.expect().await;
        assert_eq!(
            id.parse::<u64>().unwrap(),
            last.parse::<u64>().unwrap() + 1,
            "no gaps"
        );
        last = id;
        if data["event"]["kind"] == "task_created" {
            assert_eq!(data["event"]["task_id"], second.to_string());
            break;
        }
    }
    drop(stream);
    let mut resumed = Stream::open(&api, "/v1/events", &api.admin, Some(&last)).await;
    api.post(&format!("/v1/tasks/{second}/cancel"), &api.admin)
        .send()
        .await
        .unwrap();
    let (id, _) = resumed.expect().await;
    assert_eq!(id.parse::<u64>().unwrap(), last.parse::<u64>().unwrap() + 1);
}

/// A seq is one attempt's: `after_seq` without `attempt`, or a bare seq
/// as `Last-Event-ID` without it, is refused; every attempt is paged
/// with the page's `next` (`<attempt>:<seq>`) and one with `attempt`.
#[tokio::test]
async fn an_output_cursor_names_its_attempt() {
    let api = Api::start().await;
    let policy = json!({"max_attempts": 2, "retry_backoff_ms": 0});
    let task = api
        .spawn_with(json!({"agent": "flaky", "prompt": "p", "policy": policy}))
        .await;
    let cred = api.credential_for(&api.flaky, task, 2).await;
    let ndjson = format!("{}\n{}\n{}\n", progress("a"), progress("b"), progress("c"));
    let response = api
        .post("/v1/worker/output", cred.handle())
        .body(ndjson)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let path = format!("/v1/tasks/{task}/output?after_seq=1");
    let body = expect_error(
        api.get(&path, &api.admin).send().await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    assert!(
        body["error"].as_str().unwrap().contains("attempt"),
        "{body}"
    );
    let response = api
        .get(&path, &api.admin)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    expect_error(response, 400, "bad_request").await;
    let response = api
        .get(&format!("/v1/tasks/{task}/output"), &api.admin)
        .header("accept", "text/event-stream")
        .header("last-event-id", "1")
        .send()
        .await
        .unwrap();
    let body = expect_error(response, 400, "bad_request").await;
    assert!(
        body["error"].as_str().unwrap().contains("<attempt>:<seq>"),
        "{body}"
    );

    // One attempt: `attempt` with `after_seq`.
    let path = format!("/v1/tasks/{task}/output?attempt=2&after_seq=1");
    let (status, page) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    let seqs: Vec<&Value> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["seq"])
        .collect();
    assert_eq!(seqs, [&json!(2), &json!(3)], "{page}");

    // Every attempt: one record a page, resumed from each page's `next`,
    // reads what one whole page holds, in order, across the retry.
    let whole = format!("/v1/tasks/{task}/output");
    let (_, all) = parts(api.get(&whole, &api.admin).send().await.unwrap()).await;
    let all: Vec<(Value, Value)> = all["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["attempt"].clone(), r["seq"].clone()))
        .collect();
    assert!(all.contains(&(json!(2), json!(3))), "{all:?}");
    let mut paged = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let mut request = api.get(&format!("{whole}?limit=1"), &api.admin);
        if let Some(id) = &next {
            request = request.header("last-event-id", id.as_str());
        }
        let (status, page) = parts(request.send().await.unwrap()).await;
        assert_eq!(status, 200, "{page}");
        for record in page["records"].as_array().unwrap() {
            paged.push((record["attempt"].clone(), record["seq"].clone()));
        }
        match page["next"].as_str() {
            Some(id) if page["more"] == true => next = Some(id.to_owned()),
            _ => break,
        }
    }
    assert_eq!(paged, all);
}

/// A cursor past the end of the event log is refused, on a page and on a
/// stream; one at the end reads an empty page.
#[tokio::test]
async fn an_event_cursor_past_the_log_end_is_refused() {
    let api = Api::start().await;
    let task = api.spawn("echo").await;
    api.finished(task).await;
    let (status, page) = parts(
        api.get("/v1/events?limit=1000", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let head = page["next_seq"].as_u64().unwrap();
    assert!(head > 0, "{page}");

    let path = format!("/v1/events?after_seq={head}");
    let (status, page) = parts(api.get(&path, &api.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"], json!([]), "{page}");
    assert_eq!(page["next_seq"], head, "{page}");

    let path = format!("/v1/events?after_seq={}", head + 1);
    let body = expect_error(
        api.get(&path, &api.observer()).send().await.unwrap(),
        400,
        "bad_request",
    )
    .await;
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("past the end") && error.contains(&format!("last seq {head}")),
        "{body}"
    );
    let response = api
        .get("/v1/events", &api.admin)
        .header("accept", "text/event-stream")
        .header("last-event-id", (head + 1000).to_string())
        .send()
        .await
        .unwrap();
    let body = expect_error(response, 400, "bad_request").await;
    assert!(
        body["error"].as_str().unwrap().contains("Last-Event-ID"),
        "{body}"
    );

    // A stream from the end is open, and the next event reaches it.
    let mut stream = Stream::open(&api, "/v1/events", &api.admin, Some(&head.to_string())).await;
    let next = api.spawn("echo").await;
    let (id, data) = stream.expect().await;
    assert_eq!(id, (head + 1).to_string());
    assert_eq!(data["event"]["task_id"], next.to_string(), "{data}");
}
