//! The counters of the accept loop and the request guards, shared with
//! them: open connections, refusals over a cap, failed accepts, rate
//! refusals, and requests refused before routing.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::ReasonLabel;

/// What the accept loop and the request guards count: open connections,
/// connections refused over a cap, failed accepts, requests refused for
/// their rate or for a foreign `Host`, `Origin` or content type.
#[derive(Debug, Clone)]
pub struct GuardMetrics {
    connections_open: Gauge,
    connections_refused: Family<ReasonLabel, Counter>,
    accept_errors: Counter,
    rate_limited: Family<ReasonLabel, Counter>,
    requests_refused: Family<ReasonLabel, Counter>,
}

impl GuardMetrics {
    pub(super) fn register(registry: &mut Registry) -> GuardMetrics {
        let metrics = GuardMetrics {
            connections_open: Gauge::default(),
            connections_refused: Family::default(),
            accept_errors: Counter::default(),
            rate_limited: Family::default(),
            requests_refused: Family::default(),
        };
        registry.register(
            "connections_open",
            "HTTP connections open now",
            metrics.connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept for being over a cap, by cap (global, peer)",
            metrics.connections_refused.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts (descriptors exhausted by something else)",
            metrics.accept_errors.clone(),
        );
        registry.register(
            "rate_limited",
            "Requests and frames answered 429 for their rate, by limit (write, login, ws)",
            metrics.rate_limited.clone(),
        );
        registry.register(
            "requests_refused",
            "Requests refused before routing, by reason (host, origin, content_type, body_timeout)",
            metrics.requests_refused.clone(),
        );
        metrics
    }

    /// Sets the number of open connections.
    pub fn connections_open(&self, open: usize) {
        self.connections_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Counts a connection refused over `cap` (`global` or `peer`).
    pub fn connection_refused(&self, cap: &'static str) {
        self.connections_refused
            .get_or_create(&[("cap", cap)])
            .inc();
    }

    /// Counts a failed accept.
    pub fn accept_error(&self) {
        self.accept_errors.inc();
    }

    /// Counts a request or frame refused for its rate under `limit`.
    pub fn rate_limited(&self, limit: &'static str) {
        self.rate_limited.get_or_create(&[("limit", limit)]).inc();
    }

    /// Counts a request refused before routing for `reason`.
    pub fn request_refused(&self, reason: &'static str) {
        self.requests_refused
            .get_or_create(&[("reason", reason)])
            .inc();
    }
}
