//! What a layer sees of a finished attempt before the engine decides it:
//! the engine's own verdict (`swarmd_engine::outcome`) on the join result and
//! the tail's last Final, so a layer never reports another outcome than the
//! task's.

use serde_json::{Value, json};
use swarmd_engine::outcome::Verdict;
use swarmd_engine::task::AttemptOutcome;
use swarmd_engine::{AttemptHost, WorkerError};

/// The attempt's result as far as the layers can tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub outcome: AttemptOutcome,
    /// The deciding Final's value and `ok`, when there is one.
    pub value: Option<Value>,
    pub ok: Option<bool>,
    pub reason: Option<String>,
}

impl Observed {
    /// The engine's verdict on `joined` and, when the worker completed, the
    /// tail's last Final.
    pub async fn read(host: &dyn AttemptHost, joined: &Result<(), WorkerError>) -> Observed {
        host.verdict(joined).await.into()
    }

    /// `{outcome, ok, value, reason}` as handed to hooks and Lua middleware.
    pub fn to_json(&self) -> Value {
        json!({
            "outcome": self.outcome.as_str(),
            "ok": self.ok,
            "value": self.value,
            "reason": self.reason,
        })
    }
}

impl From<Verdict> for Observed {
    fn from(verdict: Verdict) -> Observed {
        let (value, ok) = match verdict.result {
            Some(result) => (Some(result.value), Some(result.ok)),
            None => (None, None),
        };
        Observed {
            outcome: verdict.outcome,
            value,
            ok,
            reason: verdict.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use async_trait::async_trait;
    use serde_json::json;
    use swarmd_engine::event::Event;
    use swarmd_engine::task::{PolicyOverrides, TaskSpec};
    use swarmd_engine::{Attempt, SpawnError, SpawnerAdapter, Worker};

    use super::*;
    use crate::stack::wrap_join;
    use crate::testing::{Act, FinalSpawner, call_log, engine_running, events};

    /// Records what the layers observe of each attempt.
    #[derive(Debug)]
    struct Observer {
        seen: Arc<Mutex<Vec<Observed>>>,
        inner: Arc<dyn SpawnerAdapter>,
    }

    #[async_trait]
    impl SpawnerAdapter for Observer {
        async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
            let host = Arc::clone(&attempt.host);
            let worker = self.inner.spawn(attempt).await?;
            let seen = Arc::clone(&self.seen);
            Ok(wrap_join(worker, move |joined| async move {
                let observed = Observed::read(&*host, &joined).await;
                seen.lock().unwrap().push(observed);
                joined
            }))
        }
    }

    /// Runs one attempt acting out `act` (cancelled after `cancel_after`,
    /// when given) and returns what the layer observed and what the engine
    /// decided, both as an `Observed`.
    async fn observe(
        act: Act,
        policy: PolicyOverrides,
        cancel_after: Option<Duration>,
    ) -> (Observed, Observed) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let observer = Arc::new(Observer {
            seen: Arc::clone(&seen),
            inner: FinalSpawner::arc(act, &call_log()),
        });
        let engine = engine_running("a", observer);
        let policy = PolicyOverrides {
            max_attempts: Some(1),
            ..policy
        };
        let spec = TaskSpec {
            agent: "a".to_owned(),
            prompt: "do it".to_owned(),
            policy,
            ..TaskSpec::default()
        };
        let task = engine.create_task(spec).await.unwrap();
        if let Some(after) = cancel_after {
            tokio::time::sleep(after).await;
            engine.cancel_task(task.id, None).await.unwrap();
        }
        let task = engine
            .wait_task(task.id, Duration::from_secs(3600))
            .await
            .unwrap();
        // The task's end is in memory before its events are stored.
        let (outcome, reason) = loop {
            let finished = events(&engine)
                .await
                .into_iter()
                .find_map(|event| match event {
                    Event::AttemptFinished {
                        outcome, reason, ..
                    } => Some((outcome, reason)),
                    _ => None,
                });
            match finished {
                Some(finished) => break finished,
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        let decided = Observed {
            outcome,
            value: task.result.as_ref().map(|r| r.value.clone()),
            ok: task.result.as_ref().map(|r| r.ok),
            reason,
        };
        let observed = seen.lock().unwrap().pop().expect("the layer observed");
        (observed, decided)
    }

    #[tokio::test(start_paused = true)]
    async fn every_end_reads_as_the_engine_decides_it() {
        let long = Duration::from_secs(60);
        let lease = PolicyOverrides {
            attempt_timeout_secs: Some(1),
            ..PolicyOverrides::default()
        };
        let cases = [
            (
                "pass",
                Act::Final(json!("v"), true),
                PolicyOverrides::default(),
                None,
            ),
            (
                "blocked",
                Act::Final(json!("w"), false),
                PolicyOverrides::default(),
                None,
            ),
            ("no final", Act::Nothing, PolicyOverrides::default(), None),
            (
                "worker failed",
                Act::Fail("exit 3".into()),
                PolicyOverrides::default(),
                None,
            ),
            (
                "cancelled",
                Act::After(long, json!("late"), true),
                PolicyOverrides::default(),
                Some(Duration::from_millis(10)),
            ),
            (
                "lease expired",
                Act::After(long, json!("late"), true),
                lease,
                None,
            ),
        ];
        for (name, act, policy, cancel_after) in cases {
            let (observed, decided) = observe(act, policy, cancel_after).await;
            assert_eq!(observed, decided, "{name}");
        }
    }
}
