//! Output of live attempts: the engine numbers each attempt's output events
//! itself, counts them against the attempt's output budget, queues them on
//! the output store and publishes their `output` events right behind them,
//! all under the task's lock. The budget is one rule for every spawner
//! kind: a write past it is refused whole (`OutputBudgetExceeded`).
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

use swarmd_output_store::{Durable, OutputEvent, OutputRecord};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::event::Event;
use crate::ids::{AttemptId, SessionId};
use crate::live::RunState;
use crate::worker_api::check_open;

impl Engine {
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
        self.inner
            .stats
            .store_append_latency
            .observe(started.elapsed());
        Ok(())
    }

    /// Numbers and queues output events of the open attempt, publishes their
    /// `output` events behind them, and keeps the attempt's last Final; then
    /// runs `then` on the attempt, still under the task's lock. Returns the
    /// records and the future of their durability.
    pub(crate) async fn queue_output(
        &self,
        id: AttemptId,
        session: Option<SessionId>,
        producer: &str,
        events: Vec<OutputEvent>,
        then: impl FnOnce(&mut RunState),
    ) -> Result<(Vec<OutputRecord>, Durable), EngineError> {
        let AttemptId {
            task: task_id,
            n: attempt,
        } = id;
        // Spilling large values may touch files: done before the lock.
        let prepared = self.inner.outputs.prepare(events).await?;
        let cell = self.live_cell(task_id)?;
        let mut state = cell.lock();
        check_open(&state, attempt)?;
        let Some(run) = state.run.as_mut() else {
            return Err(EngineError::TaskTerminal);
        };
        let limit = self.inner.config.max_output_bytes_per_attempt;
        let bytes = run.output_bytes.saturating_add(prepared.stored_bytes());
        if bytes > limit {
            self.inner
                .stats
                .output_budget_refusals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(EngineError::OutputBudgetExceeded { limit });
        }
        run.output_bytes = bytes;
        let first = run.next_seq;
        run.next_seq += prepared.len() as u64;
        let (records, durable) =
            self.inner
                .outputs
                .append_at(task_id.as_uuid(), attempt, first, producer, prepared);
        if let Some(last) = records.iter().rev().find(|r| r.event.is_final()) {
            run.last_final = Some(last.clone());
        }
        then(run);
        let usage_write = self.fold_usage(&mut state, &records);
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
        self.inner
            .bus
            .submit(usage_write.into_iter().collect(), published, None);
        drop(state);
        Ok((records, durable))
    }
}
