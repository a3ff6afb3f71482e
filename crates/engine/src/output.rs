//! Output of live attempts: the engine numbers each attempt's output events
//! itself, counts them against the attempt's output budget, queues them on
//! the output store and publishes their `output` events right behind them,
//! all under the task's lock. The budget is one rule for every spawner
//! kind: a write past it is refused whole (`OutputBudgetExceeded`), and
//! before any of its blobs is stored, so a refused write leaves nothing on
//! disk (`queue_output`); a write whose text alone is past it is refused
//! before it is encoded at all.
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

use swarmd_output_store::{Durable, OutputEvent, OutputRecord, Prepared, least_text_bytes};

use crate::budget::fold_usage;

/// The text a write must carry before it is checked against the budget
/// ahead of its encoding.
const PRECHECK_BYTES: u64 = 64 * 1024;
use crate::error::{EngineError, WorkerError};
use crate::event::Event;
use crate::held::Held;
use crate::ids::{AttemptId, SessionId};
use crate::ledger::Ledger;
use crate::live::{RunState, TaskState};
use crate::metrics::EngineStats;
use crate::outcome::{AttemptEnd, Stopped};

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
    /// Appends output events on behalf of a spawner or layer (no credential),
    /// and publishes them. Refused once the attempt is decided or superseded.
    pub(crate) async fn record_output(
        &self,
        id: AttemptId,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let session = {
            let cell = self.held.cell(id.task)?;
            let state = cell.lock();
            state.check_open(id.n)?;
            state.task.session
        };
        self.append_and_publish(id, session, producer, events).await
    }

    /// The last Final of an attempt: the one that decides it.
    pub(crate) async fn last_final(
        &self,
        id: AttemptId,
    ) -> Result<Option<OutputRecord>, EngineError> {
        let cached = self.held.live.get(&id.task).and_then(|cell| {
            cell.lock()
                .run
                .as_ref()
                .filter(|r| r.attempt == id.n)
                .and_then(|r| r.last_final.clone())
        });
        if cached.is_some() {
            return Ok(cached);
        }
        Ok(self
            .ledger
            .outputs
            .last_final(id.task.as_uuid(), id.n)
            .await?)
    }

    /// How an attempt whose worker's join returned `joined` ended: a worker
    /// that completed is judged by the tail's last Final, a worker the
    /// engine stopped by the reason it stopped it. Past a budget, the
    /// attempt fails whatever its worker did.
    pub(crate) async fn attempt_end(
        &self,
        id: AttemptId,
        joined: Result<(), WorkerError>,
    ) -> AttemptEnd {
        if self.stopped(id) == Some(Stopped::OverBudget) {
            return AttemptEnd::OverBudget;
        }
        match joined {
            Ok(()) => AttemptEnd::Finished(self.last_final(id).await),
            Err(WorkerError::Cancelled) => match self.stopped(id) {
                Some(stopped) => stopped.end(),
                None => AttemptEnd::WorkerFailed(WorkerError::Cancelled),
            },
            Err(error) => AttemptEnd::WorkerFailed(error),
        }
    }

    /// Why the engine stopped the worker of this live attempt, if it did.
    fn stopped(&self, id: AttemptId) -> Option<Stopped> {
        let cell = self.held.live.get(&id.task)?;
        let state = cell.lock();
        state
            .run
            .as_ref()
            .filter(|run| run.attempt == id.n)
            .and_then(|run| run.stopped)
    }

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
        // A write whose text alone is past the budget is refused before it
        // is encoded: encoding, spilling and hashing a large value cost
        // copies of it and time, all for nothing. Small writes (a Final's
        // short value) skip the look, and the exact count below decides.
        let least = least_text_bytes(&events);
        if least > PRECHECK_BYTES {
            let cell = self.held.cell(id.task)?;
            let mut state = cell.lock();
            self.check_room(open_run(&mut state, id.n)?, least)?;
        }
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
        // cannot all pass the budget and store their blobs first. Until the
        // write is appended they are given back if it stops, refused or cut
        // short by its caller going away.
        {
            let cell = self.held.cell(id.task)?;
            let mut state = cell.lock();
            self.count_output(open_run(&mut state, id.n)?, bytes)?;
        }
        let counted = Counted {
            appends: self,
            id,
            bytes,
        };
        let prepared = self.ledger.outputs.store_blobs(prepared).await?;
        let closed = match self.held.cell(id.task) {
            Ok(cell) => {
                let mut state = cell.lock();
                match open_run(&mut state, id.n) {
                    Ok(_) => {
                        std::mem::forget(counted);
                        return Ok(
                            self.append_counted(&mut state, id, session, producer, prepared, then)
                        );
                    }
                    Err(error) => error,
                }
            }
            Err(error) => error,
        };
        drop(counted);
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

/// Bytes counted against an attempt's budget for a write not appended
/// yet: given back when dropped, which a write that is appended prevents
/// with `mem::forget`.
struct Counted<'a, 'b> {
    appends: &'a Appends<'b>,
    id: AttemptId,
    bytes: u64,
}

impl Drop for Counted<'_, '_> {
    fn drop(&mut self) {
        self.appends.uncount_output(self.id, self.bytes);
    }
}

/// The open run of `attempt`, or why it is not open.
fn open_run(state: &mut TaskState, attempt: u32) -> Result<&mut RunState, EngineError> {
    state.check_open(attempt)?;
    state.run.as_mut().ok_or(EngineError::TaskTerminal)
}

impl Appends<'_> {
    /// Counts `bytes` more output for `run` against the attempt's budget;
    /// refuses (and counts the refusal) past it.
    fn count_output(&self, run: &mut RunState, bytes: u64) -> Result<(), EngineError> {
        self.check_room(run, bytes)?;
        run.output_bytes = run.output_bytes.saturating_add(bytes);
        Ok(())
    }

    /// Refuses (and counts the refusal) when `bytes` more output would take
    /// `run` past the attempt's budget; counts nothing otherwise.
    fn check_room(&self, run: &RunState, bytes: u64) -> Result<(), EngineError> {
        let limit = self.limit;
        if run.output_bytes.saturating_add(bytes) > limit {
            self.stats
                .output_budget_refusals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(EngineError::OutputBudgetExceeded { limit });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::json;
    use swarmd_output_store::{
        ContentRef, OutputStore, SqliteDb, SqliteOptions, SqliteOutputStore,
    };

    use super::*;
    use crate::Engine;
    use crate::clock::SystemClock;
    use crate::store::MemoryTaskStore;
    use crate::task::{SpawnerKind, TaskSpec};
    use crate::testing::{GatedOutputs, Script, ScriptedSpawner, StaticResolver, engine_with};
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
            match engine
                .appends()
                .record_output(one, "w", vec![partial(tag)])
                .await
            {
                Ok(_) => kept += 1,
                Err(EngineError::OutputBudgetExceeded { limit }) => assert_eq!(limit, BUDGET),
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!((kept, blob_files(dir.path())), (3, 3));

        let two = started(&engine).await;
        let engine = &engine;
        let writes = (10..20).map(|tag| async move {
            let appends = engine.appends();
            appends.record_output(two, "w", vec![partial(tag)]).await
        });
        let results = futures_util::future::join_all(writes).await;
        let raced = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!((raced, blob_files(dir.path())), (3, 6));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_text_is_past_the_budget_is_refused_before_it_is_encoded() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(GatedOutputs::over(sqlite_outputs(dir.path())));
        let engine = engine(held.clone());
        let id = started(&engine).await;
        held.hold_encodes(true);
        let big = OutputEvent::Partial {
            chunk: ContentRef::Inline {
                value: json!("v".repeat(BUDGET.max(PRECHECK_BYTES) as usize + 1)),
            },
        };
        let appends = engine.appends();
        let write = appends.record_output(id, "w", vec![big]);
        let refused = tokio::time::timeout(std::time::Duration::from_secs(10), write)
            .await
            .expect("refused without an encode");
        assert!(
            matches!(
                refused,
                Err(EngineError::OutputBudgetExceeded { limit: BUDGET })
            ),
            "{refused:?}"
        );
        assert!(!held.encode_waiting());
        assert_eq!(blob_files(dir.path()), 0);
    }

    /// Waits until a blob store, its blobs stored, is held at the gate.
    async fn until_blobs_held(outputs: &GatedOutputs) {
        for _ in 0..5000 {
            if outputs.blob_store_waiting() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("no blob store reached the gate");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_attempt_closes_while_it_stores_leaves_no_blob() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(GatedOutputs::over(sqlite_outputs(dir.path())));
        held.hold_blob_stores(true);
        let engine = engine(held.clone());
        let id = started(&engine).await;
        let write = tokio::spawn({
            let engine = engine.clone();
            async move {
                engine
                    .appends()
                    .record_output(id, "w", vec![partial(1)])
                    .await
            }
        });
        until_blobs_held(&held).await;
        assert_eq!(blob_files(dir.path()), 1, "stored, not appended yet");
        engine.cancel_task(id.task, None).await.unwrap();
        held.hold_blob_stores(false);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_cut_short_while_it_stores_gives_its_bytes_back() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(GatedOutputs::over(sqlite_outputs(dir.path())));
        held.hold_blob_stores(true);
        let engine = engine(held.clone());
        let id = started(&engine).await;
        let cut = tokio::spawn({
            let engine = engine.clone();
            async move {
                engine
                    .appends()
                    .record_output(id, "w", vec![partial(0)])
                    .await
            }
        });
        until_blobs_held(&held).await;
        cut.abort();
        assert!(cut.await.unwrap_err().is_cancelled());
        held.hold_blob_stores(false);

        // The cut write stored nothing the attempt owns: the budget holds
        // three more writes of its size, as it did before.
        for tag in 1..=3 {
            let written = engine
                .appends()
                .record_output(id, "w", vec![partial(tag)])
                .await;
            assert!(written.is_ok(), "write {tag}: {written:?}");
        }
        let tail = engine.outputs().tail(id.task.as_uuid(), 1, 0, 10).await;
        assert_eq!(tail.unwrap().len(), 3);
    }
}
