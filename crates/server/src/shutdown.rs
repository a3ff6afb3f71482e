//! The shutdown signal: a `CancellationToken` fired by SIGTERM or SIGINT.
//!
//! Every long-lived task holds a clone (or a child token) and stops at its
//! next safe point when it fires. A second signal while draining means the
//! operator does not want to wait: the process exits at once with status 130,
//! saying so on the terminal. What the drain waits for is said there too
//! ([`drain_notice`]).

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Which signal started the shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Terminate,
    Interrupt,
}

/// Installs SIGTERM and SIGINT handlers and returns the token they cancel.
/// Must be called inside a tokio runtime.
///
/// # Errors
/// If a signal handler cannot be registered.
pub fn install() -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let fired = token.clone();
    // Not on the daemon's task tracker: it must outlive the drain, to hear a
    // second signal, and it ends with the runtime.
    tokio::spawn(async move {
        let received = |signal: StopSignal| {
            if fired.is_cancelled() {
                tracing::warn!(?signal, "second stop signal: exiting without draining");
                crate::telemetry::notice(FORCED);
                std::process::exit(130);
            }
            tracing::info!(?signal, "stop signal: draining");
            fired.cancel();
        };
        loop {
            tokio::select! {
                Some(()) = terminate.recv() => received(StopSignal::Terminate),
                Some(()) = interrupt.recv() => received(StopSignal::Interrupt),
                else => return,
            }
        }
    });
    Ok(token)
}

/// What the terminal is told when a second signal stops the daemon at once.
const FORCED: &str = "stopped at once: attempts still running were interrupted; \
the next start, or on a cluster another node, resumes those that can resume \
(docs/tasks.md, Restarts)";

/// Who picks up what a stopping daemon leaves: on a cluster (the
/// PostgreSQL store) the other nodes take it over at once.
fn picked_up_by(clustered: bool) -> &'static str {
    if clustered {
        "another node of the cluster (or this node's next start) takes over"
    } else {
        "the next start resumes"
    }
}

/// What the terminal is told when the drain starts: how many running
/// attempts it waits for and how long, the session sockets it closes
/// then, and that a second signal stops the daemon at once.
pub fn drain_notice(attempts: usize, sockets: usize, grace: Duration, clustered: bool) -> String {
    let plural = |n: usize, what: &str| {
        if n == 1 {
            format!("1 {what}")
        } else {
            format!("{n} {what}s")
        }
    };
    let closing = (sockets > 0).then(|| format!("closing {}", plural(sockets, "session socket")));
    if attempts == 0 {
        return match closing {
            Some(closing) => format!("stopping: {closing}"),
            None => "stopping".to_owned(),
        };
    }
    let then = closing.map(|c| format!(", then {c}")).unwrap_or_default();
    format!(
        "stopping: waiting up to {}s for {} to finish{then}; press Ctrl-C again \
         (or send the stop signal again) to stop at once. Attempts still \
         running then are interrupted; {} those that can resume \
         (docs/tasks.md, Restarts)",
        grace.as_secs(),
        plural(attempts, "running attempt"),
        picked_up_by(clustered),
    )
}

/// What the terminal is told once the drain is over: the tasks left
/// unfinished, which the next start (or another node) picks up.
pub fn drained_notice(unfinished: usize, clustered: bool) -> Option<String> {
    let by = if clustered {
        "taken over by another node of the cluster (or this node's next start)"
    } else {
        "picked up at the next start"
    };
    match unfinished {
        0 => None,
        1 => Some(format!("stopped: 1 unfinished task is {by}")),
        n => Some(format!("stopped: {n} unfinished tasks are {by}")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::*;

    #[test]
    fn the_drain_says_what_it_waits_for() {
        let grace = Duration::from_secs(30);
        let notice = drain_notice(2, 1, grace, false);
        assert!(
            notice.starts_with(
                "stopping: waiting up to 30s for 2 running attempts to finish, then closing 1 session socket; press Ctrl-C again"
            ),
            "{notice}"
        );
        assert_eq!(
            drain_notice(0, 3, grace, false),
            "stopping: closing 3 session sockets"
        );
        assert!(
            drain_notice(1, 0, grace, false).contains("for 1 running attempt to finish"),
            "{}",
            drain_notice(1, 0, grace, false)
        );
        assert_eq!(drain_notice(0, 0, grace, false), "stopping");
        assert_eq!(drained_notice(0, false), None);
        assert_eq!(
            drained_notice(2, false).as_deref(),
            Some("stopped: 2 unfinished tasks are picked up at the next start")
        );
        assert_eq!(
            drained_notice(1, true).as_deref(),
            Some(
                "stopped: 1 unfinished task is taken over by another node of the cluster \
                 (or this node's next start)"
            )
        );
        assert!(
            drain_notice(2, 0, grace, true)
                .contains("another node of the cluster (or this node's next start) takes over")
        );
    }

    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = install().unwrap();
        assert!(!token.is_cancelled());
        raise(Signal::SIGTERM).unwrap();
        tokio::time::timeout(Duration::from_secs(10), token.cancelled())
            .await
            .expect("SIGTERM must cancel the token");
    }
}
