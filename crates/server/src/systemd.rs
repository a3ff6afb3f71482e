//! systemd integration (docs/operations.md): `READY=1`, `STOPPING=1` and a watchdog
//! that pings only while a self-check passes.
//!
//! The socket address and watchdog interval are read from an `Environment`
//! snapshot once, so tests point the notifier at their own socket. Messages
//! are formatted by the `sd-notify` crate's `NotifyState`. Without
//! `NOTIFY_SOCKET` every call is a no-op.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sd_notify::NotifyState;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use swarmd_config::environment::Environment;

/// A self-check run before each watchdog ping: `true` when the daemon is healthy.
pub type SelfCheck = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// Sends state changes to the service manager.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    socket: Option<NotifySocket>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NotifySocket {
    Path(PathBuf),
    /// `@name`: a Linux abstract-namespace socket.
    Abstract(Vec<u8>),
}

/// What systemd told this process at start: where to notify, how often to ping.
#[derive(Debug, Clone, Default)]
pub struct Systemd {
    /// Where state changes go.
    pub notifier: Notifier,
    /// The ping interval (half of `WATCHDOG_USEC`), when the watchdog is on.
    pub watchdog: Option<Duration>,
}

impl Systemd {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `env`.
    /// The watchdog is off when `WATCHDOG_PID` names another process.
    pub fn from_env(env: &Environment) -> Systemd {
        let notifier = Notifier::from_env(env);
        let pid_matches = env
            .get("WATCHDOG_PID")
            .is_none_or(|pid| pid.parse() == Ok(std::process::id()));
        let watchdog = env
            .get("WATCHDOG_USEC")
            .and_then(|usec| usec.parse::<u64>().ok())
            .filter(|usec| *usec > 0 && pid_matches && notifier.is_enabled())
            .map(|usec| Duration::from_micros(usec) / 2);
        Systemd { notifier, watchdog }
    }

    /// Starts the watchdog task on `tasks` when the watchdog is on; see
    /// `start_watchdog`.
    pub fn start_watchdog(
        &self,
        check: SelfCheck,
        shutdown: CancellationToken,
        tasks: &TaskTracker,
    ) -> Option<JoinHandle<()>> {
        let interval = self.watchdog?;
        Some(start_watchdog(
            self.notifier.clone(),
            interval,
            check,
            shutdown,
            tasks,
        ))
    }
}

impl Notifier {
    /// A notifier for `NOTIFY_SOCKET` in `env`; disabled when unset.
    pub fn from_env(env: &Environment) -> Notifier {
        let socket = env
            .get("NOTIFY_SOCKET")
            .map(|value| match value.strip_prefix('@') {
                Some(name) => NotifySocket::Abstract(name.as_bytes().to_vec()),
                None => NotifySocket::Path(PathBuf::from(value)),
            });
        Notifier { socket }
    }

    /// A notifier sending to the unix datagram socket at `path`.
    pub fn to_path(path: impl Into<PathBuf>) -> Notifier {
        Notifier {
            socket: Some(NotifySocket::Path(path.into())),
        }
    }

    /// Whether there is a service manager to notify.
    pub fn is_enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// `READY=1`: the listener is bound and recovery is done.
    pub fn notify_ready(&self) -> io::Result<()> {
        self.send(&[NotifyState::Ready])
    }

    /// `STOPPING=1`: draining has started.
    pub fn notify_stopping(&self) -> io::Result<()> {
        self.send(&[NotifyState::Stopping])
    }

    /// `STATUS=...`: a one-line status shown by `systemctl status`.
    pub fn notify_status(&self, status: &str) -> io::Result<()> {
        self.send(&[NotifyState::Status(status)])
    }

    /// `WATCHDOG=1`: the daemon is alive.
    pub fn notify_watchdog(&self) -> io::Result<()> {
        self.send(&[NotifyState::Watchdog])
    }

    fn send(&self, states: &[NotifyState<'_>]) -> io::Result<()> {
        let Some(socket) = &self.socket else {
            return Ok(());
        };
        let message: String = states.iter().map(|state| format!("{state}\n")).collect();
        let address = match socket {
            NotifySocket::Path(path) => SocketAddr::from_pathname(path)?,
            NotifySocket::Abstract(name) => SocketAddr::from_abstract_name(name)?,
        };
        // A datagram send to a local socket does not wait on the receiver.
        let sender = UnixDatagram::unbound()?;
        let sent = sender.send_to_addr(message.as_bytes(), &address)?;
        if sent == message.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short notify datagram",
            ))
        }
    }
}

/// Every `interval`, runs `check` (bounded by `interval`) and sends
/// `WATCHDOG=1` only when it returned `true`, until `shutdown` fires, on
/// `tasks` so that shutdown awaits it like the daemon's other background
/// tasks. A daemon whose check keeps failing stops pinging, and systemd
/// restarts it.
pub fn start_watchdog(
    notifier: Notifier,
    interval: Duration,
    check: SelfCheck,
    shutdown: CancellationToken,
    tasks: &TaskTracker,
) -> JoinHandle<()> {
    tasks.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let checked = tokio::time::timeout(interval, check());
            let healthy = tokio::select! {
                _ = shutdown.cancelled() => return,
                healthy = checked => healthy.unwrap_or(false),
            };
            if !healthy {
                tracing::warn!("self-check failed; watchdog ping withheld");
                continue;
            }
            if let Err(error) = notifier.notify_watchdog() {
                tracing::warn!(%error, "watchdog ping failed");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::UnixDatagram as TokioDatagram;

    use super::*;

    fn socket() -> (tempfile::TempDir, PathBuf, TokioDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let receiver = TokioDatagram::bind(&path).unwrap();
        (dir, path, receiver)
    }

    async fn receive(receiver: &TokioDatagram) -> String {
        let mut buffer = [0u8; 256];
        let length = receiver.recv(&mut buffer).await.unwrap();
        String::from_utf8(buffer[..length].to_vec()).unwrap()
    }

    #[tokio::test]
    async fn ready_and_stopping_reach_the_socket() {
        let (_dir, path, receiver) = socket();
        let env = Environment::from_pairs([("NOTIFY_SOCKET", path.to_str().unwrap())]);
        let notifier = Systemd::from_env(&env).notifier;
        notifier.notify_ready().unwrap();
        assert_eq!(receive(&receiver).await, "READY=1\n");
        notifier.notify_stopping().unwrap();
        assert_eq!(receive(&receiver).await, "STOPPING=1\n");
    }

    #[test]
    fn without_notify_socket_everything_is_a_no_op() {
        let env = Environment::from_pairs([("WATCHDOG_USEC", "1000000")]);
        let systemd = Systemd::from_env(&env);
        assert!(!systemd.notifier.is_enabled());
        assert!(systemd.watchdog.is_none());
        systemd.notifier.notify_ready().unwrap();
    }

    #[test]
    fn watchdog_interval_is_half_and_respects_the_pid() {
        let own = std::process::id().to_string();
        let with = |pid: Option<&str>| {
            let mut pairs = vec![("NOTIFY_SOCKET", "/run/x"), ("WATCHDOG_USEC", "30000000")];
            pairs.extend(pid.map(|pid| ("WATCHDOG_PID", pid)));
            Systemd::from_env(&Environment::from_pairs(pairs)).watchdog
        };
        assert_eq!(with(None), Some(Duration::from_secs(15)));
        assert_eq!(with(Some(&own)), Some(Duration::from_secs(15)));
        assert_eq!(with(Some("1")), None);
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_pings_only_while_the_check_passes() {
        let (_dir, path, receiver) = socket();
        let verdicts = [true, false, true];
        let calls = Arc::new(AtomicUsize::new(0));
        let (called, mut call_seen) = tokio::sync::mpsc::unbounded_channel();
        let check: SelfCheck = {
            let calls = calls.clone();
            Arc::new(move || {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                called.send(call).ok();
                Box::pin(async move { verdicts.get(call).copied().unwrap_or(false) })
            })
        };
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let task = start_watchdog(
            Notifier::to_path(&path),
            Duration::from_secs(10),
            check,
            shutdown.clone(),
            &tasks,
        );
        // The fourth check starts only after the third tick's ping was sent.
        for expected in 0..4 {
            assert_eq!(call_seen.recv().await, Some(expected));
        }
        shutdown.cancel();
        task.await.unwrap();
        let mut pings = 0;
        let mut buffer = [0u8; 64];
        while let Ok(length) = receiver.try_recv(&mut buffer) {
            assert_eq!(&buffer[..length], b"WATCHDOG=1\n");
            pings += 1;
        }
        assert_eq!(pings, 2);
    }
}
