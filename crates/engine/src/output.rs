//! Output of live attempts: the engine numbers each attempt's output events
//! itself, counts them against the attempt's output budget, queues them on
//! the output store and publishes their `output` events right behind them,
//! all under the task's lock. The budget is one rule for every spawner
//! kind: a write past it is refused whole (`OutputBudgetExceeded`), and
//! before any of its blobs is stored, so a refused write leaves nothing on
//! disk (`queue_output`).
//!
//! Numbering here rather than in the store lets a caller act on an output as
//! soon as it is queued, without waiting for its commit: a posted Final
//! decides its attempt at once, and the attempt's terminal writes queue
//! behind the Final's, so they share its group commit or follow it, and the
//! event log has the `output` before `task_finished`. Whoever answers a client
//! still waits for durability first. A write that fails leaves a gap in the
//! attempt's seqs (and an `output` event naming a record that is not
//! stored); later outputs go on after it.

use std::time::Instant;

use swarmd_output_store::{Durable, OutputEvent, OutputRecord, Prepared};

use crate::budget::fold_usage;
use crate::error::EngineError;
use crate::event::Event;
use crate::held::Held;
use crate::ids::{AttemptId, SessionId};
use crate::ledger::Ledger;
use crate::live::{RunState, TaskState};
use crate::metrics::EngineStats;
use crate::worker_api::check_open;

/// What appending an attempt's output reaches of the engine: the held
/// tasks (the attempt's fence and budget), the ledger (the output store and
/// the bus), the counters and the per-attempt byte budget.
pub(crate) struct Appends<'a> {
    pub held: &'a Held,
    pub ledger: &'a Ledger,
    pub stats: &'a EngineStats,
    /// `EngineConfig::max_output_bytes_per_attempt`.
    pub limit: u64,
}

impl Appends<'_> {
    /// Appends output events of the open attempt, publishes them, and
    /// resolves once they are durable.
    pub(crate) async fn append_and_publish(
        &self,
        id: AttemptId,
        session: Option<SessionId>,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let started = Instant::now();
        let (records, durable) = self
            .queue_output(id, session, producer, events, |_| {})
            .await?;
        self.output_durable(started, durable).await?;
        Ok(records)
    }

    /// Waits for queued outputs to be durable and records how long the
    /// append took since `started`.
    pub(crate) async fn output_durable(
        &self,
        started: Instant,
        durable: Durable,
    ) -> Result<(), EngineError> {
        durable.await?;
        self.stats.store_append_latency.observe(started.elapsed());
        Ok(())
    }

    /// Numbers and queues output events of the open attempt, publishes their
    /// `output` events behind them, and keeps the attempt's last Final; then
    /// runs `then` on the attempt, still under the task's lock. Returns the
    /// records and the future of their durability.
    ///
    /// A write past the attempt's budget stores nothing: the events are
    /// encoded first (what they take is known before anything is stored),
    /// their bytes are counted against the budget under the lock, and only
    /// then are their blobs stored. Blobs stored for a write refused after
    /// all (its attempt closed meanwhile) are discarded at once.
    pub(crate) async fn queue_output(
        &self,
        id: AttemptId,
        session: Option<SessionId>,
        producer: &str,
        events: Vec<OutputEvent>,
        then: impl FnOnce(&mut RunState),
    ) -> Result<(Vec<OutputRecord>, Durable), EngineError> {
        // Encoding may hash large values: done before the lock.
        let prepared = self.ledger.outputs.encode(events).await?;
        let bytes = prepared.stored_bytes();
        if !prepared.has_pending() {
            let cell = self.held.cell(id.task)?;
            let mut state = cell.lock();
            self.count_output(open_run(&mut state, id.n)?, bytes)?;
            return Ok(self.append_counted(&mut state, id, session, producer, prepared, then));
        }
        // The bytes are counted before the blobs are stored (a file or a
        // database write, not under the lock), so that concurrent writes
        // cannot all pass the budget and store their blobs first.
        {
            let cell = self.held.cell(id.task)?;
            let mut state = cell.lock();
            self.count_output(open_run(&mut state, id.n)?, bytes)?;
        }
        let prepared = match self.ledger.outputs.store_blobs(prepared).await {
            Ok(prepared) => prepared,
            Err(error) => {
                self.uncount_output(id, bytes);
                return Err(error.into());
            }
        };
        let closed = match self.held.cell(id.task) {
            Ok(cell) => {
                let mut state = cell.lock();
                match open_run(&mut state, id.n) {
                    Ok(_) => {
                        return Ok(
                            self.append_counted(&mut state, id, session, producer, prepared, then)
                        );
                    }
                    Err(error) => error,
                }
            }
            Err(error) => error,
        };
        self.uncount_output(id, bytes);
        if let Err(error) = self.ledger.outputs.discard_blobs(prepared).await {
            tracing::warn!(task = %id.task, attempt = id.n, %error,
                "could not discard the blobs of a refused output; the sweep will");
        }
        Err(closed)
    }

    /// Gives back bytes counted for a write that stored nothing after all.
    fn uncount_output(&self, id: AttemptId, bytes: u64) {
        self.held.with_run(id.task, id.n, |run| {
            run.output_bytes = run.output_bytes.saturating_sub(bytes);
        });
    }

    /// Numbers and queues `prepared` (counted already, its blobs stored)
    /// on the open attempt of `state`, under the task's lock, and
    /// publishes it.
    fn append_counted(
        &self,
        state: &mut TaskState,
        id: AttemptId,
        session: Option<SessionId>,
        producer: &str,
        prepared: Prepared,
        then: impl FnOnce(&mut RunState),
    ) -> (Vec<OutputRecord>, Durable) {
        let AttemptId {
            task: task_id,
            n: attempt,
        } = id;
        let first = state.run.as_ref().map_or(1, |run| run.next_seq);
        let (records, durable) =
            self.ledger
                .outputs
                .append_at(task_id.as_uuid(), attempt, first, producer, prepared);
        if let Some(run) = state.run.as_mut() {
            run.next_seq += records.len() as u64;
            if let Some(last) = records.iter().rev().find(|r| r.event.is_final()) {
                run.last_final = Some(last.clone());
            }
            then(run);
        }
        let usage_write = fold_usage(&self.stats.usage, state, &records);
        let published = records
            .iter()
            .map(|r| {
                (
                    session,
                    Event::Output {
                        task_id,
                        attempt,
                        seq: r.seq,
                        output: r.event.clone(),
                    },
                )
            })
            .collect();
        self.ledger
            .bus
            .submit(usage_write.into_iter().collect(), published, None);
        (records, durable)
    }
}

/// The open run of `attempt`, or why it is not open.
fn open_run(state: &mut TaskState, attempt: u32) -> Result<&mut RunState, EngineError> {
    check_open(state, attempt)?;
    state.run.as_mut().ok_or(EngineError::TaskTerminal)
}

impl Appends<'_> {
    /// Counts `bytes` more output for `run` against the attempt's budget;
    /// refuses (and counts the refusal) past it.
    fn count_output(&self, run: &mut RunState, bytes: u64) -> Result<(), EngineError> {
        let limit = self.limit;
        let total = run.output_bytes.saturating_add(bytes);
        if total > limit {
            self.stats
                .output_budget_refusals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(EngineError::OutputBudgetExceeded { limit });
        }
        run.output_bytes = total;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use async_trait::async_trait;
    use serde_json::json;
    use swarmd_output_store::{
        BlobSweep, ContentRef, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore, StoreError,
    };
    use tokio::sync::Notify;
    use uuid::Uuid;

    use super::*;
    use crate::Engine;
    use crate::clock::SystemClock;
    use crate::store::MemoryTaskStore;
    use crate::task::{SpawnerKind, TaskSpec};
    use crate::testing::{Script, ScriptedSpawner, StaticResolver, engine_with};
    use crate::{EngineConfig, EngineError};

    /// Each write is one partial of about 4 KiB; three fit the budget.
    const BUDGET: u64 = 14_000;

    fn partial(tag: usize) -> OutputEvent {
        let value = json!(format!("{tag}:{}", "v".repeat(4096)));
        OutputEvent::Partial {
            chunk: ContentRef::Inline { value },
        }
    }

    fn sqlite_outputs(state: &Path) -> Arc<SqliteOutputStore> {
        let db = SqliteDb::open(SqliteOptions::new(state.join("swarmd.db"))).unwrap();
        Arc::new(SqliteOutputStore::open(db, state.join("blobs"), 1024).unwrap())
    }

    fn blob_files(state: &Path) -> usize {
        std::fs::read_dir(state.join("blobs")).unwrap().count()
    }

    /// An engine over `outputs` whose attempts hang until cancelled.
    fn engine(outputs: Arc<dyn OutputStore>) -> Engine {
        let spawner = ScriptedSpawner::new(|_| Script::Hang);
        let resolver = StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner);
        let config = EngineConfig {
            max_output_bytes_per_attempt: BUDGET,
            ..EngineConfig::default()
        };
        engine_with(
            Arc::new(resolver),
            Arc::new(MemoryTaskStore::new()),
            outputs,
            config,
            Arc::new(SystemClock),
        )
    }

    /// A started task's first attempt.
    async fn started(engine: &Engine) -> AttemptId {
        let spec = TaskSpec {
            agent: "a".into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        };
        let task = engine.create_task(spec).await.unwrap();
        let id = AttemptId::new(task.id, 1);
        for _ in 0..1000 {
            let open = engine.inner.held.live.get(&id.task).is_some_and(|cell| {
                cell.lock()
                    .run
                    .as_ref()
                    .is_some_and(|run| run.attempt == id.n && run.open)
            });
            if open {
                return id;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("never started");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_past_the_budget_store_no_blob_even_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(sqlite_outputs(dir.path()));
        let one = started(&engine).await;
        let mut kept = 0;
        for tag in 0..10 {
            match engine.record_output(one, "w", vec![partial(tag)]).await {
                Ok(_) => kept += 1,
                Err(EngineError::OutputBudgetExceeded { limit }) => assert_eq!(limit, BUDGET),
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!((kept, blob_files(dir.path())), (3, 3));

        let two = started(&engine).await;
        let writes = (10..20).map(|tag| engine.record_output(two, "w", vec![partial(tag)]));
        let results = futures_util::future::join_all(writes).await;
        let raced = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!((raced, blob_files(dir.path())), (3, 6));
    }

    /// Delegates to a SQLite store; `store_blobs` stores, then waits to be
    /// let go.
    #[derive(Debug)]
    struct Held {
        inner: Arc<SqliteOutputStore>,
        stored: Notify,
        go: Notify,
    }

    #[async_trait]
    impl OutputStore for Held {
        async fn append(
            &self,
            task: Uuid,
            attempt: u32,
            producer: &str,
            events: Vec<OutputEvent>,
        ) -> Result<Vec<OutputRecord>, StoreError> {
            self.inner.append(task, attempt, producer, events).await
        }
        async fn prepare(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
            self.inner.prepare(events).await
        }
        async fn encode(&self, events: Vec<OutputEvent>) -> Result<Prepared, StoreError> {
            self.inner.encode(events).await
        }
        async fn store_blobs(&self, prepared: Prepared) -> Result<Prepared, StoreError> {
            let prepared = self.inner.store_blobs(prepared).await?;
            self.stored.notify_one();
            self.go.notified().await;
            Ok(prepared)
        }
        async fn discard_blobs(&self, prepared: Prepared) -> Result<u64, StoreError> {
            self.inner.discard_blobs(prepared).await
        }
        fn append_at(
            &self,
            task: Uuid,
            attempt: u32,
            first_seq: u64,
            producer: &str,
            prepared: Prepared,
        ) -> (Vec<OutputRecord>, Durable) {
            self.inner
                .append_at(task, attempt, first_seq, producer, prepared)
        }
        async fn last_seq(&self, task: Uuid, attempt: u32) -> Result<u64, StoreError> {
            self.inner.last_seq(task, attempt).await
        }
        async fn tail(
            &self,
            task: Uuid,
            attempt: u32,
            after_seq: u64,
            limit: usize,
        ) -> Result<Vec<OutputRecord>, StoreError> {
            self.inner.tail(task, attempt, after_seq, limit).await
        }
        async fn last_final(
            &self,
            task: Uuid,
            attempt: u32,
        ) -> Result<Option<OutputRecord>, StoreError> {
            self.inner.last_final(task, attempt).await
        }
        async fn list_attempts(&self, task: Uuid) -> Result<Vec<u32>, StoreError> {
            self.inner.list_attempts(task).await
        }
        async fn prune(&self, before_ms: u64) -> Result<u64, StoreError> {
            self.inner.prune(before_ms).await
        }
        async fn forget(&self, tasks: &[Uuid]) -> Result<u64, StoreError> {
            self.inner.forget(tasks).await
        }
        async fn sweep_blobs(&self, grace: std::time::Duration) -> Result<BlobSweep, StoreError> {
            self.inner.sweep_blobs(grace).await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_attempt_closes_while_it_stores_leaves_no_blob() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(Held {
            inner: sqlite_outputs(dir.path()),
            stored: Notify::new(),
            go: Notify::new(),
        });
        let engine = engine(held.clone());
        let id = started(&engine).await;
        let write = tokio::spawn({
            let engine = engine.clone();
            async move { engine.record_output(id, "w", vec![partial(1)]).await }
        });
        held.stored.notified().await;
        assert_eq!(blob_files(dir.path()), 1, "stored, not appended yet");
        engine.cancel_task(id.task, None).await.unwrap();
        held.go.notify_one();
        let refused = write.await.unwrap().unwrap_err();
        assert!(
            matches!(
                refused,
                EngineError::TaskTerminal | EngineError::AttemptSuperseded { .. }
            ),
            "{refused}"
        );
        assert_eq!(
            blob_files(dir.path()),
            0,
            "the refused write's blob is gone"
        );
        let tail = engine.outputs().tail(id.task.as_uuid(), 1, 0, 10).await;
        assert!(tail.unwrap().is_empty());
    }
}
