//! The stdio MCP relay (`swarmd mcp`): the daemon's MCP tools on stdio,
//! relayed to its `/mcp`.
//!
//! The tools have one implementation, the daemon's. This process is an MCP
//! server on stdin/stdout and an rmcp client of `<url>/mcp`. By default it
//! holds one operator session (`session`): resumed from its state file
//! (`state_file`) or logged in with the credential, relayed with the
//! session's own token, logged in anew when the daemon refuses that token,
//! and left on exit (stdin closed, SIGINT, SIGTERM) unless kept. Its
//! upstream client (`link`) pings `/mcp` every 15 s and is replaced when
//! the daemon restarts; a call made meanwhile waits up to
//! `--daemon-wait-secs`. It lists the daemon's tools, forwards each call, relays
//! the daemon's progress notifications under the progress token the stdio
//! client chose, and forwards a cancellation of a call upstream; a stdin
//! line rmcp cannot read is answered with a parse error (`stdio`). Logs go to
//! stderr; stdout carries only the protocol; no credential is ever logged.

mod link;
mod relay;
mod session;
mod state_file;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use swarmd_types::session::SessionKind;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Mutex;

use std::path::PathBuf;

use link::Forwards;
use relay::Relay;
use session::{Operators, Relogin, Seat, Secret, SharedSeat, Wanted};
use state_file::{StateFile, StateFileError};

/// What the relay is asked for (the flags of `swarmd mcp`).
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Role names the relay's session asks for.
    pub roles: Vec<String>,
    /// The session's kind.
    pub kind: SessionKind,
    /// The session's description.
    pub description: Option<String>,
    /// Leave the session in place on exit, to be resumed next time.
    pub keep_session: bool,
    /// The session file; `state_dir` names the default.
    pub session_file: Option<PathBuf>,
    /// The per-user state directory (`$XDG_STATE_HOME/swarmd`, else
    /// `~/.local/state/swarmd`) holding the default session files.
    pub state_dir: Option<PathBuf>,
    /// How long a call waits for a restarting daemon.
    pub daemon_wait_secs: u64,
    /// The upstream ping interval.
    pub heartbeat_secs: u64,
    /// Relay with the given credential instead of a session of its own.
    pub no_login: bool,
}

/// Why `swarmd mcp` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot reach the daemon's MCP endpoint {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("cannot reach the daemon at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the daemon at {url} refused {what}: {message}")]
    Refused {
        url: String,
        what: &'static str,
        message: String,
    },
    #[error("--no-login needs a credential: --token or SWARMD_TOKEN")]
    NoCredential,
    #[error("no place for the session file: pass --session-file, or set XDG_STATE_HOME or HOME")]
    NoSessionFile,
    #[error("session file: {0}")]
    SessionFile(String),
    #[error("MCP on stdio: {0}")]
    Stdio(String),
}

/// Serves the daemon's tools on stdio until stdin closes or a signal.
///
/// `credential` authorizes the login (none: a loopback login); with
/// `--no-login` it is the bearer of every `/mcp` request instead.
///
/// # Errors
/// When the daemon cannot be reached or refuses the login or the
/// credential, when the session file cannot be used, or when stdio fails.
pub async fn serve_stdio(
    args: &RelayOptions,
    base_url: &str,
    credential: Option<&str>,
) -> Result<(), ProxyError> {
    // Listening from the start: a signal during the login or the handshake
    // still leaves the session.
    let mut signals = Signals::listen();
    let operators = Operators::new(base_url)?;
    // An empty credential (`SWARMD_TOKEN=`) is none.
    let credential = credential
        .map(Secret::new)
        .filter(|c| !c.expose().is_empty());
    let (seat, login) = match (args.no_login, credential) {
        (true, Some(credential)) => (Seat::Given(credential), None),
        (true, None) => return Err(ProxyError::NoCredential),
        (false, credential) => {
            let file = || state_file(args, operators.base());
            let seat = operators
                .open(credential.as_ref(), &wanted(args), file, args.keep_session)
                .await?;
            // A session of its own is one the credential may log in again.
            let login = matches!(seat, Seat::Own { .. }).then_some(credential);
            (seat, login)
        }
    };
    let seat: SharedSeat = Arc::new(Mutex::new(seat));
    let relogin = login.map(|credential| Relogin::new(&operators, credential, wanted(args), &seat));
    let timing = Timing {
        patience: Duration::from_secs(args.daemon_wait_secs),
        heartbeat: Duration::from_secs(args.heartbeat_secs),
    };
    let ended = relay(&operators, &seat, relogin, timing, &mut signals).await;
    // The keeper has stopped: the session held now is the one to leave.
    operators.leave(&*seat.lock().await).await;
    ended
}

/// The session the flags ask for.
fn wanted(args: &RelayOptions) -> Wanted {
    Wanted {
        roles: args.roles.clone(),
        kind: args.kind,
        description: args.description.clone(),
    }
}

/// The locked state file; none when another relay holds it (this relay's
/// session is then not resumable, and says so).
fn state_file(args: &RelayOptions, base: &str) -> Result<Option<StateFile>, ProxyError> {
    let path = match (&args.session_file, &args.state_dir) {
        (Some(path), _) => path.clone(),
        (None, Some(dir)) => state_file::default_path(dir, base),
        (None, None) => return Err(ProxyError::NoSessionFile),
    };
    match StateFile::lock(&path) {
        Ok(file) => Ok(Some(file)),
        Err(StateFileError::Busy(path)) => {
            tracing::warn!(
                path = %path.display(),
                "another swarmd mcp uses this session file: logging in a session of our own, not resumable"
            );
            Ok(None)
        }
        Err(error) => Err(ProxyError::SessionFile(error.to_string())),
    }
}

/// Connects upstream as `seat` and serves stdio until stdin closes or a
/// signal comes.
async fn relay(
    operators: &Operators,
    seat: &SharedSeat,
    relogin: Option<Relogin>,
    timing: Timing,
    signals: &mut Signals,
) -> Result<(), ProxyError> {
    let url = format!("{}/mcp", operators.base());
    let forwards = Forwards::default();
    let (bearer, sid) = {
        let seat = seat.lock().await;
        (seat.bearer().clone(), seat.sid().map(str::to_owned))
    };
    let (link, first, keeper) = link::connect(
        &url,
        bearer.expose(),
        relogin,
        forwards.clone(),
        timing.heartbeat,
    )
    .await
    .map_err(|reason| ProxyError::Connect {
        url: url.clone(),
        reason,
    })?;
    match sid {
        Some(sid) => {
            tracing::info!(url = %url, sid = %sid, "relaying the daemon's MCP tools on stdio");
        }
        None => tracing::info!(url = %url, "relaying the daemon's MCP tools on stdio"),
    }
    let relay = Relay::new(link, &first, forwards, operators.base(), timing.patience);
    let (stdin, stdout, written) = stdio::transport();
    let served = tokio::select! {
        served = relay.serve((stdin, stdout)) => match served {
            Ok(served) => served,
            Err(ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("stdin closed before the MCP handshake");
                keeper.shutdown().await;
                return Ok(());
            }
            Err(error) => {
                keeper.shutdown().await;
                return Err(ProxyError::Stdio(error.to_string()));
            }
        },
        signal = signals.recv() => {
            tracing::info!(signal, "stopping before the MCP handshake");
            keeper.shutdown().await;
            return Ok(());
        }
    };
    let cancel = served.cancellation_token();
    let waiting = served.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        ended = &mut waiting => ended,
        signal = signals.recv() => {
            tracing::info!(signal, "stopping");
            cancel.cancel();
            waiting.await
        }
    };
    // The upstream client ends before the session may be left.
    keeper.shutdown().await;
    // rmcp's last answers reach stdout before the process ends.
    let _ = tokio::time::timeout(Duration::from_secs(2), written).await;
    ended
        .map(|_| ())
        .map_err(|e| ProxyError::Stdio(e.to_string()))
}

/// The relay's clocks, from the flags.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// How long a call waits for an absent daemon.
    patience: Duration,
    /// How often the relay pings `/mcp`.
    heartbeat: Duration,
}

/// SIGINT and SIGTERM, listened to from creation on.
struct Signals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl Signals {
    fn listen() -> Signals {
        let listen = |kind| {
            signal(kind)
                .inspect_err(|error| tracing::warn!(%error, "cannot listen to a signal"))
                .ok()
        };
        Signals {
            interrupt: listen(SignalKind::interrupt()),
            terminate: listen(SignalKind::terminate()),
        }
    }

    /// The next signal, by name; never, for one that cannot be listened to.
    async fn recv(&mut self) -> &'static str {
        async fn next(signal: Option<&mut Signal>) {
            match signal {
                Some(signal) => {
                    if signal.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => "SIGINT",
            () = next(self.terminate.as_mut()) => "SIGTERM",
        }
    }
}
