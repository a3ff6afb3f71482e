//! Retention (docs/tasks.md, Output and retention): terminal tasks older than the retention period
//! are pruned with their attempts, outputs and events, expired handles are
//! forgotten, and spilled blobs no record references any more are deleted,
//! by a periodic job the daemon starts.

use std::sync::atomic::Ordering;
use std::time::Duration;

use swarmd_output_store::BlobSweep;

use crate::auth::TokenAuthority;
use crate::clock::Clock;
use crate::error::EngineError;
use crate::held::Held;
use crate::ids::TaskId;
use crate::ledger::Ledger;
use crate::metrics::EngineStats;

/// Tasks whose outputs one `forget` call drops.
const FORGET_SLICE: usize = 1024;

/// A spilled blob claimed (written or reused) within this long is never
/// swept, whether or not a committed record references it yet: appends
/// commit within moments of their spill, far inside it.
const BLOB_GRACE: Duration = Duration::from_secs(3600);

/// What retention reaches of the engine: the stores, the handle table, the
/// counters, the clock and the token authority (for its leeway).
pub(crate) struct Retention<'a> {
    pub ledger: &'a Ledger,
    pub held: &'a Held,
    pub stats: &'a EngineStats,
    pub clock: &'a dyn Clock,
    pub tokens: &'a TokenAuthority,
}

impl Retention<'_> {
    /// Prunes terminal tasks finished more than `keep` ago and forgets the
    /// expired handles; returns how many tasks went.
    pub(crate) async fn prune(&self, keep: Duration) -> Result<usize, EngineError> {
        let now_ms = self.clock.now_ms();
        let cutoff = now_ms.saturating_sub(keep.as_millis() as u64);
        let gone = self.ledger.store.prune(cutoff).await?;
        // In slices, so that forgetting a large backlog never holds the
        // output store for long.
        let uuids: Vec<_> = gone.iter().map(TaskId::as_uuid).collect();
        for slice in uuids.chunks(FORGET_SLICE) {
            self.ledger.outputs.forget(slice).await?;
        }
        let now_secs = now_ms / 1000;
        let leeway = self.tokens.config().leeway_secs;
        self.held
            .handles()
            .retain(|_, h| h.exp_secs.saturating_add(leeway) > now_secs);
        if !gone.is_empty() {
            self.sweep_blobs().await?;
        }
        Ok(gone.len())
    }

    /// Deletes the spilled blobs no stored output references
    /// (`Engine::sweep_blobs`).
    pub(crate) async fn sweep_blobs(&self) -> Result<BlobSweep, EngineError> {
        let sweep = self.ledger.outputs.sweep_blobs(BLOB_GRACE).await?;
        self.stats
            .blobs_swept
            .fetch_add(sweep.removed, Ordering::Relaxed);
        self.stats
            .blob_bytes_swept
            .fetch_add(sweep.removed_bytes, Ordering::Relaxed);
        if sweep.removed > 0 {
            tracing::info!(
                removed = sweep.removed,
                bytes = sweep.removed_bytes,
                kept = sweep.kept,
                "swept unreferenced blobs"
            );
        }
        Ok(sweep)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use swarmd_output_store::{MemoryOutputStore, OutputStore};

    use crate::EngineConfig;
    use crate::clock::ManualClock;
    use crate::store::MemoryTaskStore;
    use crate::task::{SpawnerKind, TaskSpec, TaskStatus};
    use crate::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};

    #[tokio::test(start_paused = true)]
    async fn prunes_old_terminal_tasks_with_their_outputs() {
        let clock = Arc::new(ManualClock::new(10_000_000));
        let spawner = ScriptedSpawner::new(|_| Script::Final {
            value: json!(1),
            ok: true,
        });
        let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner);
        let outputs = Arc::new(MemoryOutputStore::new());
        let engine = engine_with(
            Arc::new(resolver),
            Arc::new(MemoryTaskStore::new()),
            outputs.clone(),
            EngineConfig::default(),
            clock.clone(),
        );
        let spec = TaskSpec {
            agent: "a".into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        };
        let old = engine.create_task(spec.clone()).await.unwrap();
        let old = engine
            .wait_task(old.id, std::time::Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(old.status(), TaskStatus::Pass);
        clock.advance_ms(2 * 86_400_000);
        let fresh = engine.create_task(spec).await.unwrap();
        engine
            .wait_task(fresh.id, std::time::Duration::from_secs(60))
            .await
            .unwrap();

        let pruned = engine
            .prune(std::time::Duration::from_secs(86_400))
            .await
            .unwrap();
        assert_eq!(pruned, 1);
        assert!(engine.get_task(old.id).await.unwrap().is_none());
        assert!(engine.get_task(fresh.id).await.unwrap().is_some());
        assert!(
            outputs
                .tail(old.id.as_uuid(), 1, 0, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            outputs
                .tail(fresh.id.as_uuid(), 1, 0, 10)
                .await
                .unwrap()
                .len(),
            1
        );
    }
}
