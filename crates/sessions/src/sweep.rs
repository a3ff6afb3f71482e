//! The idle sweep (docs/security.md, Session and admin secrets): a session with no socket and no activity for
//! `auth.session_idle_secs` expires and releases its roles. On a cluster
//! only the session's home node expires it; the others drop their copy
//! once its record is gone, and mail its home the activity the copy saw
//! (`homes`). The same pass writes back the last activity of sessions that
//! were active since their record was written, so a restart restores a
//! recent `last_seen`, and the `task_done` watermarks of every session
//! (see `delivery`); a one-second tick writes the watermarks of sessions
//! that delivered a `task_done`.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::Engine;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{CloseReason, SessionRegistry};

/// The sweep runs at a quarter of the idle time, within these bounds.
const MIN_PERIOD: Duration = Duration::from_secs(1);
const MAX_PERIOD: Duration = Duration::from_secs(60);

impl SessionRegistry {
    /// One pass: expires idle sessions, persists fresh activity. Returns how
    /// many sessions expired.
    pub async fn sweep(&self, engine: &Engine) -> usize {
        let now = self.clock.now_ms();
        let idle = self.settings.idle;
        // Only a session's home expires it (`homes`).
        let is_idle = |s: &super::Session| s.is_home() && s.idle_at(now, idle);
        self.sweep_copies().await;
        let mut expired = 0;
        for session in self.all() {
            if is_idle(&session) {
                let removed = {
                    let mut maps = self.maps();
                    // Checked again under the lock: a login or attach may have raced.
                    if maps.by_sid.get(&session.sid).is_some_and(|s| is_idle(s)) {
                        maps.remove(&session);
                        true
                    } else {
                        false
                    }
                };
                if removed {
                    expired += 1;
                    tracing::info!(sid = %session.sid, "session expired after being idle");
                    if let Err(error) = session.end(engine, CloseReason::Expired).await {
                        tracing::warn!(sid = %session.sid, %error, "cannot delete an expired session");
                    }
                }
            } else if session.dirty()
                && let Err(error) = session.persist(engine).await
            {
                tracing::warn!(sid = %session.sid, %error, "cannot persist session activity");
            }
        }
        expired
    }

    /// Runs `sweep` periodically on `tasks` until `shutdown` fires.
    pub fn start_idle_sweep(
        self: &Arc<Self>,
        engine: Engine,
        shutdown: CancellationToken,
        tasks: &TaskTracker,
    ) -> JoinHandle<()> {
        let registry = self.clone();
        let period = (self.settings.idle / 4).clamp(MIN_PERIOD, MAX_PERIOD);
        tasks.spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut checkpoint = tokio::time::interval(super::delivery::CHECKPOINT_EVERY);
            checkpoint.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    _ = ticker.tick() => {
                        registry.checkpoint_delivery(&engine, true).await;
                        registry.sweep(&engine).await;
                    }
                    _ = checkpoint.tick() => {
                        registry.checkpoint_delivery(&engine, false).await;
                    }
                }
            }
            tracing::debug!("idle sweep stopped");
        })
    }
}
