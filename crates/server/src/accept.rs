//! The accept loop (docs/operations.md, Limits): every connection is
//! counted against a global cap and a cap per peer address, served by
//! hyper's HTTP/1.1 with a header-read timeout that also closes idle
//! keep-alive connections, and drained gracefully at shutdown.
//!
//! A connection over a cap is answered with a fixed `503` and closed at
//! once, so it holds no descriptor; the global cap is clamped to the
//! process's descriptor limit less a reserve for the spawner's pipes and
//! the store, so a flood of sockets cannot starve children or the database
//! of file descriptors.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use swarmd_api::metrics::GuardMetrics;
use swarmd_config::ServerConfig;

/// Descriptors kept back from connections whatever else is configured: the
/// store's files, the listener, logs, git commands.
const BASE_RESERVE: u64 = 256;
/// Descriptors kept back per attempt allowed to run: a child's three pipes
/// and its process handle.
const PER_ATTEMPT_RESERVE: u64 = 4;
/// The global cap never drops below this, however small the descriptor limit.
const MIN_CONNECTIONS: usize = 16;
/// How long the loop pauses after `accept` fails (descriptors exhausted by
/// something else): long enough not to spin, short enough to recover.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// What a connection over a cap is told before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 78\r\n\r\n\
{\"error\":\"too many open connections, try again\",\"code\":\"too_many_connections\"}";

/// The caps and timeouts of the accept loop, resolved from `[server]` and the
/// process's descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnLimits {
    /// Connections open at once, over all peers.
    pub(crate) max: usize,
    /// Connections open at once from one peer address.
    pub(crate) per_peer: usize,
    /// Time a connection has to send a request's headers, counted from its
    /// start or its previous response.
    pub(crate) header_timeout: Duration,
}

impl ConnLimits {
    /// The configured caps, with the global one clamped so that `nofile`
    /// descriptors keep a reserve for `max_running` attempts and the store
    /// (at most half of them).
    pub(crate) fn resolve(server: &ServerConfig, max_running: u32, nofile: u64) -> ConnLimits {
        let reserve = (BASE_RESERVE + PER_ATTEMPT_RESERVE * u64::from(max_running)).min(nofile / 2);
        let room = usize::try_from(nofile.saturating_sub(reserve)).unwrap_or(usize::MAX);
        let max = usize::try_from(server.max_connections)
            .unwrap_or(usize::MAX)
            .min(room)
            .max(MIN_CONNECTIONS);
        let per_peer = usize::try_from(server.max_connections_per_peer)
            .unwrap_or(usize::MAX)
            .min(max);
        ConnLimits {
            max,
            per_peer,
            header_timeout: Duration::from_secs(server.header_timeout_secs),
        }
    }
}

/// The soft limit on open descriptors, raised to the hard limit first (a
/// daemon that serves sockets and children wants all it may have).
pub(crate) fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(error) => {
                tracing::debug!(%error, "cannot raise the descriptor limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(error) => {
            tracing::debug!(%error, "cannot read the descriptor limit");
            1024
        }
    }
}

/// The open connections, in total and per peer address.
#[derive(Debug)]
struct Counts {
    limits: ConnLimits,
    open: AtomicUsize,
    peers: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropping it gives its places back.
#[derive(Debug)]
struct Admitted {
    counts: Arc<Counts>,
    metrics: GuardMetrics,
    peer: IpAddr,
}

impl Counts {
    /// Admits a connection from `peer`, or names the cap it is over.
    fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        metrics: &GuardMetrics,
    ) -> Result<Admitted, &'static str> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if self.open.load(Ordering::Relaxed) >= self.limits.max {
            return Err("global");
        }
        let mine = peers.entry(peer).or_insert(0);
        if *mine >= self.limits.per_peer {
            return Err("peer");
        }
        *mine += 1;
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        metrics.connections_open(open);
        Ok(Admitted {
            counts: Arc::clone(self),
            metrics: metrics.clone(),
            peer,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut peers = self.counts.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mine) = peers.get_mut(&self.peer) {
            *mine -= 1;
            if *mine == 0 {
                peers.remove(&self.peer);
            }
        }
        let open = self.counts.open.fetch_sub(1, Ordering::Relaxed) - 1;
        self.metrics.connections_open(open);
    }
}

/// Whether the accept loop still runs; the watchdog's self-check reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Accepting(Arc<AtomicBool>);

impl Accepting {
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, value: bool) {
        self.0.store(value, Ordering::Relaxed);
    }
}

/// Serves `router` on `listener` until `stop` fires, then lets every open
/// connection finish its request in flight (new requests are refused) and
/// returns once they have closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    metrics: GuardMetrics,
    accepting: Accepting,
    stop: CancellationToken,
) {
    let counts = Arc::new(Counts {
        limits,
        open: AtomicUsize::new(0),
        peers: Mutex::new(HashMap::new()),
    });
    let connections = TaskTracker::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    accepting.set(true);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error, &metrics);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let admitted = match counts.admit(peer.ip(), &metrics) {
            Ok(admitted) => admitted,
            Err(cap) => {
                refuse(&stream, cap, &metrics);
                continue;
            }
        };
        // Small request/response pairs and WebSocket frames must not wait
        // for delayed ACKs (Nagle): that costs ~40 ms per exchange on loopback.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        tracing::trace!(%peer, "connection accepted");
        let service = connection_service(router.clone(), peer);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    // The request in flight is answered; no new one is read.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                tracing::trace!(%error, "connection ended with an error");
            }
            drop(admitted);
        });
    }
    accepting.set(false);
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// The router as a hyper service for one connection, with the peer address
/// where `ConnectInfo` finds it (loopback login reads it).
fn connection_service(
    router: Router,
    peer: SocketAddr,
) -> TowerToHyperService<
    impl tower::Service<
        axum::http::Request<Incoming>,
        Response = axum::response::Response,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send,
> {
    TowerToHyperService::new(router.map_request(
        move |mut request: axum::http::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        },
    ))
}

/// Tells a connection over `cap` why and closes it; a client that does not
/// read gets the close alone.
fn refuse(stream: &TcpStream, cap: &'static str, metrics: &GuardMetrics) {
    metrics.connection_refused(cap);
    tracing::debug!(cap, "connection refused over its cap");
    let _ = stream.try_write(REFUSAL);
}

/// Counts a failed `accept` and logs it at most at warn, without its peer.
fn accept_failed(error: &io::Error, metrics: &GuardMetrics) {
    metrics.accept_error();
    tracing::warn!(%error, "accept failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(max: u64, per_peer: u64) -> ServerConfig {
        ServerConfig {
            max_connections: max,
            max_connections_per_peer: per_peer,
            ..ServerConfig::default()
        }
    }

    #[test]
    fn the_global_cap_keeps_a_reserve_of_descriptors() {
        let limits = ConnLimits::resolve(&server(100_000, 512), 1024, 20_000);
        assert_eq!(limits.max, 20_000 - (256 + 4 * 1024));
        let small = ConnLimits::resolve(&server(100_000, 512), 1024, 1024);
        assert_eq!(small.max, 512, "at most half the descriptors are kept back");
        assert_eq!(small.per_peer, 512);
        let roomy = ConnLimits::resolve(&server(4096, 512), 16, 1_000_000);
        assert_eq!(roomy.max, 4096, "the configured cap when there is room");
    }

    #[test]
    fn the_per_peer_cap_never_exceeds_the_global_one() {
        let limits = ConnLimits::resolve(&server(64, 512), 0, 1_000_000);
        assert_eq!((limits.max, limits.per_peer), (64, 64));
    }

    #[test]
    fn admission_counts_per_peer_and_gives_places_back() {
        let metrics = swarmd_api::metrics::Metrics::new().guards();
        let counts = Arc::new(Counts {
            limits: ConnLimits {
                max: 3,
                per_peer: 2,
                header_timeout: Duration::from_secs(1),
            },
            open: AtomicUsize::new(0),
            peers: Mutex::new(HashMap::new()),
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = counts.admit(a, &metrics).unwrap();
        let _second = counts.admit(a, &metrics).unwrap();
        assert_eq!(counts.admit(a, &metrics).unwrap_err(), "peer");
        let _third = counts.admit(b, &metrics).unwrap();
        assert_eq!(counts.admit(b, &metrics).unwrap_err(), "global");
        drop(first);
        assert!(
            counts.admit(a, &metrics).is_ok(),
            "a closed one frees its place"
        );
    }

    #[test]
    fn the_refusal_is_a_well_formed_answer() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["code"], "too_many_connections");
    }
}
