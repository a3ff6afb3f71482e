//! `audit` (base layer, docs/tasks.md, Layers): a durable audit record when an attempt is
//! spawned (or fails to spawn) and when it completes.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use swarmd_engine::audit::{AuditAction, AuditRecord};
use swarmd_engine::auth::fingerprint;
use swarmd_engine::{Attempt, AttemptHost, SpawnError, SpawnerAdapter, Worker};
use tokio::time::Instant;

use crate::stack::{SpawnerLayer, wrap_join};

/// Builds [`Audit`] wrappers.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditLayer;

impl SpawnerLayer for AuditLayer {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        Arc::new(Audit { inner })
    }
}

/// Writes `spawned` / `spawn_failed` with the token's fingerprint, then
/// `completed` with the outcome and elapsed time. A join abandoned before it
/// completes is recorded as `abandoned`.
#[derive(Debug)]
pub struct Audit {
    inner: Arc<dyn SpawnerAdapter>,
}

#[async_trait]
impl SpawnerAdapter for Audit {
    async fn spawn(&self, attempt: Attempt) -> Result<Box<dyn Worker>, SpawnError> {
        // The record owed at completion carries no detail until then, so a
        // waiting attempt holds no JSON map.
        let ctx = &attempt.ctx;
        let record = AuditRecord {
            id: 0,
            ts_ms: 0,
            task_id: ctx.id.task,
            attempt: ctx.id.n,
            agent: ctx.agent.clone(),
            session: ctx.session,
            action: AuditAction::Spawned,
            detail: serde_json::Value::Null,
        };
        let token_fingerprint = fingerprint(attempt.credential.token());
        let host = Arc::clone(&attempt.host);
        let started = Instant::now();
        let worker = match self.inner.spawn(attempt).await {
            Ok(worker) => worker,
            Err(error) => {
                host.audit(AuditRecord {
                    action: AuditAction::SpawnFailed,
                    detail: json!({
                        "token_fingerprint": token_fingerprint,
                        "error": error.to_string(),
                    }),
                    ..record
                });
                return Err(error);
            }
        };
        host.audit(AuditRecord {
            detail: json!({ "token_fingerprint": token_fingerprint }),
            ..record.clone()
        });
        let mut pending = Pending {
            host,
            record: Some(record),
            started,
        };
        Ok(wrap_join(worker, move |joined| async move {
            // The engine's verdict by its own rule: the record names the
            // outcome the task will have, and only the outcome and reason.
            let verdict = pending.host.verdict(&joined).await;
            pending.complete(json!({
                "outcome": verdict.outcome.as_str(),
                "reason": verdict.reason,
            }));
            joined
        }))
    }
}

/// The completion record still owed; written as `abandoned` if dropped.
struct Pending {
    host: Arc<dyn AttemptHost>,
    record: Option<AuditRecord>,
    started: Instant,
}

impl Pending {
    fn complete(&mut self, mut detail: serde_json::Value) {
        if let Some(mut record) = self.record.take() {
            detail["elapsed_ms"] = json!(self.started.elapsed().as_millis() as u64);
            record.action = AuditAction::Completed;
            record.detail = detail;
            self.host.audit(record);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.complete(json!({ "outcome": "abandoned" }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Act, FinalSpawner, call_log, engine_running, mock_attempt, run_task};
    use swarmd_engine::task::{PolicyOverrides, TaskStatus};

    /// The layer alone against a mock host: it records `spawned` with the
    /// token's fingerprint before the worker runs, and `completed` with the
    /// host's verdict once the worker's join passes back through it.
    #[tokio::test]
    async fn against_a_mock_host_it_records_the_spawn_then_the_verdict() {
        let (attempt, host) = mock_attempt("a");
        let id = attempt.ctx.id;
        let base = FinalSpawner::arc(Act::Final(json!("done"), true), &call_log());
        let worker = AuditLayer.wrap(base).spawn(attempt).await.unwrap();
        {
            let recorded = host.recorded();
            assert_eq!(
                recorded.audit.len(),
                1,
                "spawned is written before the join"
            );
            let spawned = &recorded.audit[0];
            assert_eq!(spawned.action, AuditAction::Spawned);
            assert_eq!((spawned.task_id, spawned.attempt), (id.task, id.n));
            assert_eq!(
                spawned.detail["token_fingerprint"],
                json!(fingerprint("swc1.test"))
            );
        }
        worker.join().await.unwrap();
        let recorded = host.recorded();
        let completed = &recorded.audit[1];
        assert_eq!(completed.action, AuditAction::Completed);
        assert_eq!(completed.detail["outcome"], "pass");
        assert_eq!(completed.ts_ms, 1_000, "the host stamps the record");
    }

    /// A worker dropped before its join completes is recorded as abandoned.
    #[tokio::test]
    async fn against_a_mock_host_a_dropped_worker_is_abandoned() {
        let (attempt, host) = mock_attempt("a");
        let base = FinalSpawner::arc(Act::Final(json!(1), true), &call_log());
        let worker = AuditLayer.wrap(base).spawn(attempt).await.unwrap();
        drop(worker);
        let recorded = host.recorded();
        let actions: Vec<_> = recorded.audit.iter().map(|r| r.action).collect();
        assert_eq!(actions, [AuditAction::Spawned, AuditAction::Completed]);
        assert_eq!(recorded.audit[1].detail["outcome"], "abandoned");
    }

    async fn audited(act: Act) -> (TaskStatus, Vec<AuditRecord>) {
        let base = FinalSpawner::arc(act, &call_log());
        let engine = engine_running("a", AuditLayer.wrap(base));
        let task = run_task(&engine, "a", PolicyOverrides::default()).await;
        let mut records = engine.audit_records(Some(task.id), 100).await.unwrap();
        records.sort_by_key(|r| r.id);
        (task.status(), records)
    }

    #[tokio::test]
    async fn spawn_and_completion_are_recorded_with_fingerprint_and_outcome() {
        let (status, records) = audited(Act::Final(json!("x"), false)).await;
        assert_eq!(status, TaskStatus::Blocked);
        let actions: Vec<_> = records.iter().map(|r| r.action).collect();
        assert_eq!(actions, [AuditAction::Spawned, AuditAction::Completed]);
        let fp = records[0].detail["token_fingerprint"].as_str().unwrap();
        assert_eq!(fp.len(), 12);
        assert!(fp.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(records[1].detail["outcome"], "blocked");
        assert!(records[1].detail["elapsed_ms"].is_u64());
        assert!(records.iter().all(|r| r.agent == "a" && r.attempt == 1));
    }

    #[tokio::test]
    async fn a_failed_spawn_is_recorded_with_its_error() {
        let (status, records) = audited(Act::Refuse("no binary".into())).await;
        assert_eq!(status, TaskStatus::Failed);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].action, AuditAction::SpawnFailed);
        assert!(
            records[0].detail["error"]
                .as_str()
                .unwrap()
                .contains("no binary")
        );
    }

    #[tokio::test]
    async fn no_final_is_recorded_as_failed() {
        let (_, records) = audited(Act::Nothing).await;
        assert_eq!(records[1].detail["outcome"], "failed");
        assert_eq!(
            records[1].detail["reason"],
            "the worker finished without a final"
        );
    }
}
