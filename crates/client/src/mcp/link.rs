//! The relay's upstream: an rmcp client of the daemon's `/mcp` that is
//! replaced when it breaks. One keeper task owns the client: it connects
//! (retrying with backoff), publishes the live peer, and when a call or the
//! heartbeat reports that peer broken (the daemon restarted or went away),
//! drops it and connects again with the same bearer; when the daemon
//! refuses that bearer (HTTP 401) and the relay holds a session of its own,
//! it logs in a new session (`Relogin`) and connects with its token. Callers
//! wait a bounded time for a live peer. The heartbeat pings `/mcp` (every 15 s by default,
//! under the 20 s the daemon's presence needs), which keeps the session
//! present on the daemon and finds a broken client between calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientRequest, ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, RoleServer, ServiceExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::session::Relogin;

/// A ping not answered in this long counts as a broken link.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnection backoff: first wait, and the most it grows to.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A connection attempt that takes longer than this is abandoned.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a call's broken response stream is resumed before the call
/// fails with a closed transport (the relay then treats it as a lost link).
const RESUME_TRIES: usize = 4;

/// The resumption policy of a call's response stream: a few tries, 1 s
/// doubling to 4 s, so a stream the daemon cannot resume (it restarted)
/// fails the call in about 15 s rather than being retried forever.
#[derive(Debug)]
struct Resumes;

impl SseRetryPolicy for Resumes {
    fn retry(&self, tries: usize) -> Option<Duration> {
        (tries < RESUME_TRIES).then(|| Duration::from_secs(1 << tries.min(2)))
    }
}

/// Upstream progress tokens mapped to the stdio call they belong to.
pub(super) type Forwards = Arc<Mutex<HashMap<ProgressToken, (ProgressToken, Peer<RoleServer>)>>>;

type Client = RunningService<RoleClient, Upstream>;

/// A live upstream peer and the generation of the client it belongs to.
#[derive(Debug, Clone)]
pub(super) struct Live {
    pub(super) generation: u64,
    pub(super) peer: Peer<RoleClient>,
}

/// Why the keeper's last attempt to reconnect failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Down {
    /// The daemon could not be reached, or failed the connection: why.
    Away(String),
    /// The daemon refuses the relay's bearer (HTTP 401): its session was
    /// ended, or the daemon's store no longer holds it. `login` is why
    /// logging in anew failed, when the relay can log in.
    Refused { login: Option<String> },
}

/// The relay's handle on its upstream; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Link {
    current: watch::Receiver<Option<Live>>,
    /// The generation a caller found broken; the keeper replaces it.
    broken: Arc<watch::Sender<u64>>,
    /// Why the keeper's last attempt to reconnect failed, while it fails.
    last_error: Arc<Mutex<Option<Down>>>,
}

/// The keeper and heartbeat tasks; they run until `shutdown` (or drop).
#[derive(Debug)]
pub(super) struct Keeper {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Keeper {
    /// Stops the tasks and waits (a bounded time) for the upstream client
    /// to close.
    pub(super) async fn shutdown(mut self) {
        self.stop.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Connects to `url` with `bearer`: the first connection is made here, so a
/// daemon that is absent or refuses the bearer fails the start; later ones
/// by the keeper task, which logs in anew through `relogin` when there is
/// one and the daemon refuses the bearer.
pub(super) async fn connect(
    url: &str,
    bearer: &str,
    relogin: Option<Relogin>,
    forwards: Forwards,
    heartbeat: Duration,
) -> Result<(Link, Peer<RoleClient>, Keeper), String> {
    let stop = CancellationToken::new();
    let dial = Dial {
        url: url.to_owned(),
        bearer: bearer.to_owned(),
        relogin,
        forwards,
    };
    let client = dial.once().await?;
    let first = client.peer().clone();
    let (current_tx, current) = watch::channel(Some(Live {
        generation: 1,
        peer: first.clone(),
    }));
    let (broken, broken_rx) = watch::channel(0);
    let link = Link {
        current,
        broken: Arc::new(broken),
        last_error: Arc::default(),
    };
    let tasks = vec![
        tokio::spawn(keep(
            dial,
            client,
            current_tx,
            broken_rx,
            link.last_error.clone(),
            stop.clone(),
        )),
        tokio::spawn(ping(link.clone(), heartbeat, stop.clone())),
    ];
    Ok((link, first, Keeper { stop, tasks }))
}

impl Link {
    /// The live peer of a generation past `after` (0: any), waiting until
    /// `deadline` for one; `None` past it.
    pub(super) async fn live_after(&self, after: u64, deadline: Instant) -> Option<Live> {
        let mut current = self.current.clone();
        let fresh = |live: &Option<Live>| live.as_ref().is_some_and(|l| l.generation > after);
        let waited = tokio::time::timeout_at(deadline, current.wait_for(fresh)).await;
        match waited {
            Ok(Ok(live)) => live.clone(),
            _ => None,
        }
    }

    /// Why the daemon cannot be reached now, if the keeper knows.
    pub(super) fn last_error(&self) -> Option<Down> {
        self.last_error.lock().ok().and_then(|last| last.clone())
    }

    /// Reports the client of `generation` broken (the keeper replaces it).
    pub(super) fn broken(&self, generation: u64) {
        self.broken.send_if_modified(|seen| {
            let newer = generation > *seen;
            if newer {
                *seen = generation;
            }
            newer
        });
    }
}

/// How to make a client: the URL, the bearer (and how to get a new one,
/// when the relay can log in), the progress relay.
struct Dial {
    url: String,
    bearer: String,
    relogin: Option<Relogin>,
    forwards: Forwards,
}

impl Dial {
    /// One client, initialized; why not, as one line.
    async fn once(&self) -> Result<Client, String> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .auth_header(&self.bearer);
        config.retry_config = Arc::new(Resumes);
        let transport = StreamableHttpClientTransport::from_config(config);
        let upstream = Upstream {
            forwards: self.forwards.clone(),
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, upstream.serve(transport)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
        }
    }

    /// What follows a failed connection (`error`). When the daemon refused
    /// the bearer and the relay can log in, it logs in anew and the next
    /// attempt carries the new session's token.
    async fn failed(&mut self, error: &str, stop: &CancellationToken) -> Next {
        if !credential_refused(error) {
            return Next::Down(Down::Away(error.to_owned()));
        }
        let Some(relogin) = &self.relogin else {
            return Next::Down(Down::Refused { login: None });
        };
        match relogin.renew(stop).await {
            Ok(Some(token)) => {
                token.expose().clone_into(&mut self.bearer);
                Next::Renewed
            }
            Ok(None) => Next::Stop,
            Err(login) => Next::Down(Down::Refused {
                login: Some(login.to_string()),
            }),
        }
    }
}

/// What the keeper does after a failed connection.
enum Next {
    /// Try again after the backoff; why this attempt failed.
    Down(Down),
    /// Try again after the backoff, as the session just logged in.
    Renewed,
    /// Nothing: the relay is stopping.
    Stop,
}

/// The keeper: holds the current client, replaces it when reported broken.
async fn keep(
    mut dial: Dial,
    mut client: Client,
    current: watch::Sender<Option<Live>>,
    mut broken: watch::Receiver<u64>,
    last_error: Arc<Mutex<Option<Down>>>,
    stop: CancellationToken,
) {
    let mut generation = 1;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            seen = broken.wait_for(|seen| *seen >= generation) => {
                if seen.is_err() {
                    break;
                }
            }
        }
        current.send_replace(None);
        tracing::warn!("lost the daemon's MCP endpoint: reconnecting");
        let _ = client.close_with_timeout(Duration::from_secs(1)).await;
        let mut backoff = BACKOFF_FIRST;
        let mut failures = 0_u32;
        client = loop {
            match dial.once().await {
                Ok(client) => break client,
                Err(error) => match dial.failed(&error, &stop).await {
                    Next::Stop => return,
                    Next::Renewed => {}
                    Next::Down(down) => {
                        // Once at first, then about once a minute at full backoff.
                        if failures.is_multiple_of(12) {
                            match &down {
                                Down::Refused { login: Some(login) } => {
                                    tracing::warn!(%error, %login, failures, "cannot log in anew yet");
                                }
                                _ => tracing::warn!(%error, failures, "cannot reconnect yet"),
                            }
                        }
                        failures += 1;
                        if let Ok(mut last) = last_error.lock() {
                            *last = Some(down);
                        }
                    }
                },
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        };
        generation += 1;
        if let Ok(mut last) = last_error.lock() {
            *last = None;
        }
        tracing::info!(generation, "reconnected to the daemon's MCP endpoint");
        current.send_replace(Some(Live {
            generation,
            peer: client.peer().clone(),
        }));
    }
    let _ = client.close_with_timeout(Duration::from_secs(1)).await;
}

/// Pings the live peer every `every`; a failed ping reports it broken.
async fn ping(link: Link, every: Duration, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(live) = link.current.borrow().clone() else {
            continue;
        };
        let ping = live
            .peer
            .send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(PING_TIMEOUT, ping).await {
            Ok(Ok(_)) => tracing::trace!("heartbeat"),
            Ok(Err(ServiceError::McpError(error))) => {
                // The daemon answered: the link works.
                tracing::debug!(%error, "heartbeat refused");
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "heartbeat failed");
                link.broken(live.generation);
            }
            Err(_) => link.broken(live.generation),
        }
    }
}

/// The client side: relays the daemon's progress notifications.
#[derive(Debug)]
pub(super) struct Upstream {
    forwards: Forwards,
}

impl ClientHandler for Upstream {
    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let target = self
            .forwards
            .lock()
            .ok()
            .and_then(|map| map.get(&params.progress_token).cloned());
        if let Some((token, peer)) = target {
            params.progress_token = token;
            if let Err(error) = peer.notify_progress(params).await {
                tracing::debug!(%error, "progress not relayed");
            }
        }
    }
}

/// Whether a failed request never reached the daemon (its connection
/// could not be made): such a request is safe to send again. rmcp keeps
/// the HTTP client's error without its causes, so the connect failure is
/// read from its `Debug` form (hyper's `ConnectError`, or the OS's
/// `ConnectionRefused`); the restart black-box test pins this down.
pub(super) fn never_reached(error: &ServiceError) -> bool {
    let ServiceError::TransportSend(error) = error else {
        return false;
    };
    let debug = format!("{:?}", error.error);
    debug.contains("ConnectError(") || debug.contains("ConnectionRefused")
}

/// The HTTP status of the daemon's answer a transport error carries, and
/// the answer from the status on (rmcp keeps it as `HTTP <status>: <body>`).
fn http_answer(error: &ServiceError) -> Option<(u16, String)> {
    let ServiceError::TransportSend(error) = error else {
        return None;
    };
    let text = error.error.to_string();
    let (_, answer) = text.split_once("HTTP ")?;
    let status: u16 = answer.get(..3)?.parse().ok()?;
    Some((status, answer.to_owned()))
}

/// Whether the daemon refused a request's bearer (HTTP 401): it ran
/// nothing, so the request is safe to send again once the link is mended.
pub(super) fn bearer_refused(error: &ServiceError) -> bool {
    http_answer(error).is_some_and(|(status, _)| status == 401)
}

/// The daemon's own refusal of a request, when a transport error carries
/// one: an HTTP 4xx answer with its `{error, code}` body. The request
/// reached the daemon and was answered, so sending it again cannot help. A
/// 401 (the relay's session is gone) and a 404 (its MCP session is) are
/// the link's to mend, not answers.
pub(super) fn refusal(error: &ServiceError) -> Option<serde_json::Value> {
    let (status, answer) = http_answer(error)?;
    if !(400..500).contains(&status) || status == 401 || status == 404 {
        return None;
    }
    let body = answer.split_once(": ").map_or("", |(_, body)| body);
    match serde_json::from_str::<serde_json::Value>(body.trim()) {
        Ok(answer) if answer.get("code").is_some_and(serde_json::Value::is_string) => Some(answer),
        _ => Some(serde_json::json!({
            "error": format!("the daemon refused the call: HTTP {}", answer.trim()),
            "code": swarmd_types::ErrorCode::BadRequest.as_str(),
        })),
    }
}

/// Whether a failed connection was the daemon refusing the relay's bearer
/// (`HTTP 401`): its session was ended, or the daemon's store no longer
/// holds it.
fn credential_refused(last_error: &str) -> bool {
    last_error.contains("HTTP 401")
}

#[cfg(test)]
mod tests {
    use std::io;

    use rmcp::transport::DynamicTransportError;

    use super::*;

    fn transport(error: io::Error) -> ServiceError {
        ServiceError::TransportSend(DynamicTransportError::from_parts(
            "test",
            std::any::TypeId::of::<()>(),
            Box::new(error),
        ))
    }

    #[test]
    fn a_daemons_4xx_is_its_answer_and_401_or_404_are_not() {
        let http = |text: &str| {
            let error = io::Error::other(format!("unexpected server response: {text}"));
            transport(error)
        };
        let too_large = http(
            r#"HTTP 413 Payload Too Large: {"error":"request body is larger","code":"payload_too_large"}"#,
        );
        let answer = refusal(&too_large).unwrap();
        assert_eq!(answer["code"], "payload_too_large");
        let plain = refusal(&http("HTTP 400 Bad Request: nope")).unwrap();
        assert_eq!(plain["code"], "bad_request");
        assert!(plain["error"].as_str().unwrap().contains("400"), "{plain}");
        for mended in [
            "HTTP 401 Unauthorized: {}",
            "HTTP 404 Not Found: {}",
            "HTTP 503 x: {}",
        ] {
            assert!(refusal(&http(mended)).is_none(), "{mended}");
        }
        assert!(refusal(&ServiceError::TransportClosed).is_none());
        assert!(credential_refused("… HTTP 401 Unauthorized: {…}"));
        assert!(bearer_refused(&http("HTTP 401 Unauthorized: {}")));
        assert!(!bearer_refused(&http("HTTP 404 Not Found: {}")));
        assert!(!bearer_refused(&ServiceError::TransportClosed));
    }

    #[test]
    fn only_a_connection_never_made_is_safe_to_send_again() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert!(never_reached(&transport(refused)));
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(!never_reached(&transport(reset)));
        assert!(!never_reached(&ServiceError::TransportClosed));
        let refused_by_daemon = rmcp::ErrorData::internal_error("ConnectionRefused", None);
        assert!(!never_reached(&ServiceError::McpError(refused_by_daemon)));
    }
}
