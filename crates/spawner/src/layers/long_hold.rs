//! `long_hold` (base layer, docs/tasks.md, Layers): while an attempt runs past its task's
//! `long_hold_warn_secs`, publishes `long_hold_warn` at that moment and again
//! at each further multiple. It never changes the outcome.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use swarmd_engine::event::Event;
use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};
use tokio::time::Instant;

use crate::stack::{SpawnerLayer, around_join};

/// Builds [`LongHold`] wrappers.
#[derive(Debug, Clone, Copy, Default)]
pub struct LongHoldLayer;

impl SpawnerLayer for LongHoldLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(LongHold { inner })
    }
}

/// Races a timer against the inner join; the timer only publishes. A
/// threshold of 0 disables the warning.
#[derive(Debug)]
pub struct LongHold {
    inner: Arc<dyn SpawnerAdapter>,
}

#[async_trait]
impl SpawnerAdapter for LongHold {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        let started = Instant::now();
        let host = Arc::clone(&attempt.host);
        let threshold = attempt.ctx.long_hold_warn_secs;
        let worker = self.inner.spawn(attempt).await?;
        Ok(around_join(worker, move |mut join| async move {
            if threshold == 0 {
                return join.await;
            }
            let period = Duration::from_secs(threshold);
            let mut warned: u64 = 0;
            loop {
                let after = period.saturating_mul(u32::try_from(warned + 1).unwrap_or(u32::MAX));
                // A warning beyond what the clock can express never comes.
                let Some(next) = started.checked_add(after) else {
                    return join.await;
                };
                tokio::select! {
                    biased;
                    joined = &mut join => return joined,
                    () = tokio::time::sleep_until(next) => {
                        warned += 1;
                        let id = host.id();
                        host.publish(Event::LongHoldWarn {
                            task_id: id.task,
                            attempt: id.n,
                            elapsed_secs: threshold.saturating_mul(warned),
                        });
                    }
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarmd_engine::task::{PolicyOverrides, TaskStatus};

    use super::*;
    use crate::testing::{Act, FinalSpawner, call_log, engine_running, events, run_task};

    fn policy(warn: u64) -> PolicyOverrides {
        PolicyOverrides {
            long_hold_warn_secs: Some(warn),
            attempt_timeout_secs: Some(1000),
            ..PolicyOverrides::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn warns_while_running_at_each_multiple_and_keeps_the_outcome() {
        let base = FinalSpawner::arc(
            Act::After(Duration::from_secs(35), json!("late"), true),
            &call_log(),
        );
        let engine = engine_running("slow", LongHoldLayer.wrap(base));
        let task = run_task(&engine, "slow", policy(10)).await;
        assert_eq!(task.status(), TaskStatus::Pass);
        let log = events(&engine).await;
        let warns: Vec<u64> = log
            .iter()
            .filter_map(|e| match e {
                Event::LongHoldWarn {
                    elapsed_secs,
                    task_id,
                    attempt: 1,
                } if *task_id == task.id => Some(*elapsed_secs),
                _ => None,
            })
            .collect();
        assert_eq!(warns, [10, 20, 30]);
        // Every warning is published while the attempt is still running.
        let last_warn = log
            .iter()
            .rposition(|e| e.kind() == "long_hold_warn")
            .unwrap();
        let output = log.iter().position(|e| e.kind() == "output").unwrap();
        let finished = log
            .iter()
            .position(|e| e.kind() == "attempt_finished")
            .unwrap();
        assert!(last_warn < output && output < finished, "{log:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_attempt_gets_no_warning_and_zero_disables() {
        for (warn, act) in [
            (10, Act::Final(json!("x"), false)),
            (0, Act::After(Duration::from_secs(50), json!("x"), false)),
        ] {
            let engine =
                engine_running("a", LongHoldLayer.wrap(FinalSpawner::arc(act, &call_log())));
            let task = run_task(&engine, "a", policy(warn)).await;
            assert_eq!(task.status(), TaskStatus::Blocked);
            assert!(
                !events(&engine)
                    .await
                    .iter()
                    .any(|e| e.kind() == "long_hold_warn")
            );
        }
    }
}
