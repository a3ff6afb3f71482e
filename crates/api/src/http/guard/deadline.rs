//! A request body with a total deadline: however slowly it trickles, it
//! must have arrived `server.body_timeout_secs` after the handler first
//! reads it. tower-http's `TimeoutBody` bounds only the pause between two
//! frames, which one byte every few seconds never exceeds.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::metrics::GuardMetrics;

/// The error a late body ends with; the extractors answer 408 for it.
pub(crate) const BODY_TIMEOUT_MESSAGE: &str =
    "the request body did not arrive within server.body_timeout_secs";

/// Why a body stopped: it came too late.
#[derive(Debug)]
pub(crate) struct Late;

impl std::fmt::Display for Late {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(BODY_TIMEOUT_MESSAGE)
    }
}

impl std::error::Error for Late {}

/// `body` cut off `timeout` after its first read; a cut is counted as a
/// `body_timeout` refusal.
pub(super) fn limit(body: Body, timeout: Duration, metrics: GuardMetrics) -> Body {
    Body::new(Deadline {
        body,
        timeout,
        metrics,
        sleep: None,
    })
}

struct Deadline {
    body: Body,
    timeout: Duration,
    metrics: GuardMetrics,
    /// Set at the first read.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let timeout = self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + timeout)));
        if sleep.as_mut().poll(cx).is_ready() {
            self.metrics.request_refused("body_timeout");
            return Poll::Ready(Some(Err(axum::Error::new(Late))));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_is_cut_at_the_deadline() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let body = Body::from_stream(tokio_stream_of(rx));
        tokio::spawn(async move {
            // One byte a second, forever: never a long pause between frames.
            loop {
                if tx.send(Ok(Bytes::from_static(b"x"))).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut stream = limit(body, Duration::from_secs(10), metrics()).into_data_stream();
        let mut bytes = 0;
        let error = loop {
            match stream.next().await {
                Some(Ok(chunk)) => bytes += chunk.len(),
                Some(Err(error)) => break error,
                None => panic!("the body ended"),
            }
        };
        assert!(error.to_string().contains("body_timeout_secs"), "{error}");
        assert!(
            (9..=11).contains(&bytes),
            "read {bytes} bytes before the cut"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_body_passes_whole() {
        let body = limit(Body::from("hello"), Duration::from_secs(1), metrics());
        let bytes = axum::body::to_bytes(body, 1024).await.unwrap();
        assert_eq!(&bytes[..], b"hello");
    }

    fn metrics() -> GuardMetrics {
        crate::metrics::Metrics::new().guards()
    }

    fn tokio_stream_of(
        mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    ) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
