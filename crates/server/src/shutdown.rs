//! The shutdown signal: a `CancellationToken` fired by SIGTERM or SIGINT.
//!
//! Every long-lived task holds a clone (or a child token) and stops at its
//! next safe point when it fires. A second signal while draining means the
//! operator does not want to wait: the process exits at once with status 130.

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
                tracing::error!(?signal, "second stop signal: exiting without draining");
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::*;

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
