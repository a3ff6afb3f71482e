//! The SubAgent of a delegated attempt, as the generator plays it: fetch the
//! prompt with the worker handle, then submit a raw text result (docs/protocol.md, Worker routes).
//! Both calls go through the shared keep-alive client.

use serde_json::Value;

/// The result every SubAgent submits.
const RESULT: &str = "done";

/// The worker routes of one daemon, parsed once: a SubAgent's calls only add
/// the task id, so no request parses a whole URL.
#[derive(Debug, Clone)]
pub(crate) struct WorkerUrls {
    prompt: reqwest::Url,
    submit: reqwest::Url,
}

impl WorkerUrls {
    /// The routes under `base` (`http://IP:PORT`).
    ///
    /// # Errors
    /// If `base` is not a URL.
    pub(crate) fn new(base: &str) -> anyhow::Result<WorkerUrls> {
        Ok(WorkerUrls {
            prompt: reqwest::Url::parse(&format!("{base}/v1/worker/prompt"))?,
            submit: reqwest::Url::parse(&format!("{base}/v1/worker/submit"))?,
        })
    }
}

fn with_task(route: &reqwest::Url, task_id: &str) -> reqwest::Url {
    let mut url = route.clone();
    url.query_pairs_mut().append_pair("task_id", task_id);
    url
}

/// Fetches the prompt and submits the result for `task_id` with `handle`.
///
/// # Errors
/// The failing step and the server's error code (`prompt:not_found`,
/// `submit:http_500`, `submit:transport`, …).
pub(crate) async fn play(
    http: &reqwest::Client,
    urls: &WorkerUrls,
    handle: &str,
    task_id: &str,
) -> Result<(), String> {
    let prompt = http
        .get(with_task(&urls.prompt, task_id))
        .bearer_auth(handle)
        .send()
        .await;
    expect_ok("prompt", prompt).await?;
    let submit = http
        .post(with_task(&urls.submit, task_id))
        .bearer_auth(handle)
        .header("content-type", "text/plain")
        .body(RESULT)
        .send()
        .await;
    expect_ok("submit", submit).await
}

/// Reads the whole body (so the connection goes back to the pool) and
/// turns a failure into `step:code`.
pub(crate) async fn expect_ok(
    step: &str,
    response: reqwest::Result<reqwest::Response>,
) -> Result<(), String> {
    let response = response.map_err(|_| format!("{step}:transport"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|_| format!("{step}:transport"))?;
    if status.is_success() {
        return Ok(());
    }
    Err(format!("{step}:{}", error_code(status.as_u16(), &body)))
}

/// The `code` of an `{error, code}` body, else `http_<status>`.
pub(crate) fn error_code(status: u16, body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| format!("http_{status}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_come_from_the_body_or_the_status() {
        let body = br#"{"error": "no such task", "code": "not_found"}"#;
        assert_eq!(error_code(404, body), "not_found");
        assert_eq!(error_code(502, b"Bad Gateway"), "http_502");
    }
}
