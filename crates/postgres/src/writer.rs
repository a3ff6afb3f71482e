//! The writer task: the only connection that writes, folding queued jobs
//! into group commits.
//!
//! Concurrency: one tokio task owns the writer connection and takes jobs
//! from an unbounded channel, so queueing never blocks the caller (the
//! engine queues under its task locks). It waits for the first job, takes
//! whatever else is queued (up to `max_batch`), folds the rows of all of
//! them into one multi-row statement per table (`rows::Group`), sends those
//! pipelined inside one `BEGIN … COMMIT`, and only then delivers every
//! job's outcome, in queue order. Jobs queued while a group commits form
//! the next group, so the group grows with the load and one WAL flush
//! covers all of it.
//!
//! If a group fails, it rolls back and its jobs run again one transaction
//! each, in queue order: a job that fails on its own (an event or output
//! seq already stored) gets its error and the others commit as they would
//! have. If the connection is lost, the writer reconnects before the next
//! group; a group whose `COMMIT` got no answer is reported failed.
//!
//! After each commit the writer records the tasks whose spec it carried
//! (`specs`); whenever a write fails (a group, a job of its retry, a
//! fenced node, a lost connection) it empties that set before it runs the
//! failed jobs' callbacks, so a task whose creation rolled back carries its
//! spec again at its next write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use swarmd_output_store::StoreError;
use swarmd_output_store::histogram::{Histogram, SYNC_BUCKETS};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Config};
use uuid::Uuid;

use crate::connect::{self, Connection, db_error};
use crate::rows::{Group, OutputRow, Row, Statements};
use crate::specs::SpecsSent;

/// Called once with a job's outcome: for `Op::AppendNext` the first output
/// seq it was given, for `Op::Rows` holding events the first event seq they
/// were given at commit, otherwise 0.
pub(crate) type Done = Box<dyn FnOnce(Result<u64, StoreError>) + Send>;

/// What a job writes.
#[derive(Debug)]
pub(crate) enum Op {
    /// Rows with every key chosen by the caller.
    Rows(Vec<Row>),
    /// Output records numbered by the writer after the stream's last seq
    /// (committed or pending in the same group).
    AppendNext {
        task: Uuid,
        attempt: i64,
        ts_ms: i64,
        producer: String,
        events: Vec<(bool, String)>,
    },
    /// Nothing: proves the writer commits (readiness).
    Ping,
}

pub(crate) struct Job {
    pub(crate) op: Op,
    pub(crate) done: Done,
}

pub(crate) enum Command {
    Job(Job),
    /// Commit what was queued before, acknowledge, stop.
    Close(oneshot::Sender<()>),
}

/// Counters of the writer, for metrics and tests.
#[derive(Debug)]
pub struct WriterStats {
    commits: AtomicU64,
    jobs: AtomicU64,
    failed_groups: AtomicU64,
    commit_latency: Histogram,
}

impl Default for WriterStats {
    fn default() -> WriterStats {
        WriterStats {
            commits: AtomicU64::default(),
            jobs: AtomicU64::default(),
            failed_groups: AtomicU64::default(),
            commit_latency: Histogram::new(&SYNC_BUCKETS),
        }
    }
}

impl WriterStats {
    /// Transactions that committed.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Jobs that ran, whatever their outcome.
    pub fn jobs(&self) -> u64 {
        self.jobs.load(Ordering::Relaxed)
    }

    /// Groups that failed and were retried job by job.
    pub fn failed_groups(&self) -> u64 {
        self.failed_groups.load(Ordering::Relaxed)
    }

    /// How long each group took from `BEGIN` to the answer of its `COMMIT`.
    pub fn commit_latency(&self) -> &Histogram {
        &self.commit_latency
    }
}

/// This node's place in a cluster, as the writer sees it: set once the
/// node is registered (`nodes::register`), and marked fenced for good once
/// a group finds the node's row no longer alive with its epoch.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    node: std::sync::OnceLock<(Uuid, i64)>,
    fenced: std::sync::atomic::AtomicBool,
}

impl Fence {
    /// The node and epoch every group checks, once registered.
    pub(crate) fn node(&self) -> Option<(Uuid, i64)> {
        self.node.get().copied()
    }

    pub(crate) fn set(&self, node: Uuid, epoch: i64) {
        let _ = self.node.set((node, epoch));
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    pub(crate) fn mark_fenced(&self) {
        self.fenced.store(true, Ordering::Release);
    }
}

pub(crate) struct Writer {
    config: Config,
    client: Client,
    statements: Statements,
    stats: Arc<WriterStats>,
    fence: Arc<Fence>,
    specs: Arc<SpecsSent>,
}

impl Writer {
    /// Takes over a connection already open, driven and migrated, and prepares the
    /// writer's statements on it.
    pub(crate) async fn new(
        config: Config,
        client: Client,
        stats: Arc<WriterStats>,
        fence: Arc<Fence>,
        specs: Arc<SpecsSent>,
    ) -> Result<Writer, StoreError> {
        let statements = Statements::prepare(&client).await.map_err(db_error)?;
        Ok(Writer {
            config,
            client,
            statements,
            stats,
            fence,
            specs,
        })
    }

    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        max_batch: usize,
    ) {
        let mut jobs = Vec::new();
        let mut close = None;
        while close.is_none() {
            match commands.recv().await {
                Some(Command::Job(job)) => jobs.push(job),
                Some(Command::Close(ack)) => close = Some(ack),
                None => break,
            }
            while close.is_none() && jobs.len() < max_batch {
                match commands.try_recv() {
                    Ok(Command::Job(job)) => jobs.push(job),
                    Ok(Command::Close(ack)) => close = Some(ack),
                    Err(_) => break,
                }
            }
            if !jobs.is_empty() {
                self.commit_jobs(std::mem::take(&mut jobs)).await;
            }
        }
        if let Some(ack) = close {
            let _ = ack.send(());
        }
    }

    /// Commits `jobs` as one group, or job by job if the group fails, and
    /// delivers every outcome in order. Every failure empties `specs`
    /// before the failed jobs' callbacks run.
    async fn commit_jobs(&mut self, jobs: Vec<Job>) {
        self.stats
            .jobs
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        // A fenced node writes nothing more, and need not ask to know it.
        if self.fence.is_fenced() {
            self.specs.forget_all();
            for job in jobs {
                (job.done)(Err(StoreError::Fenced));
            }
            return;
        }
        if let Err(error) = self.reconnect_if_lost().await {
            self.specs.forget_all();
            let error = Arc::new(error);
            for job in jobs {
                (job.done)(Err(StoreError::Batch(Arc::clone(&error))));
            }
            return;
        }
        let ops: Vec<&Op> = jobs.iter().map(|job| &job.op).collect();
        let outcome = self.commit_group(&ops).await;
        if outcome.is_err() {
            // Whatever the group held rolled back, creations included.
            self.specs.forget_all();
        }
        match outcome {
            Ok(firsts) => {
                self.specs.committed(ops.iter().flat_map(|op| specs_in(op)));
                for (job, first) in jobs.into_iter().zip(firsts) {
                    (job.done)(Ok(first));
                }
            }
            Err(error) if error.is_fenced() => {
                self.fence.mark_fenced();
                tracing::error!("this node was fenced: its write group was refused");
                for job in jobs {
                    (job.done)(Err(StoreError::Fenced));
                }
            }
            Err(error) if jobs.len() == 1 => {
                if let Some(job) = jobs.into_iter().next() {
                    (job.done)(Err(error));
                }
            }
            Err(error) => {
                self.stats.failed_groups.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, jobs = jobs.len(), "postgres group commit failed; retrying its jobs one by one");
                for job in jobs {
                    let outcome = match self.reconnect_if_lost().await {
                        Ok(()) => self.commit_group(&[&job.op]).await.map(|firsts| firsts[0]),
                        Err(error) => Err(error),
                    };
                    match &outcome {
                        Ok(_) => self.specs.committed(specs_in(&job.op)),
                        Err(_) => self.specs.forget_all(),
                    }
                    (job.done)(outcome);
                }
            }
        }
    }

    /// One transaction holding every op; returns each op's first seq.
    ///
    /// The last seqs `AppendNext` numbers after are read before the
    /// transaction: only this writer adds outputs, so nothing can commit
    /// one in between.
    async fn commit_group(&mut self, ops: &[&Op]) -> Result<Vec<u64>, StoreError> {
        let started = std::time::Instant::now();
        let tx = &self.client;
        let mut group = Group::default();
        let mut firsts = vec![0u64; ops.len()];
        // Rows of `AppendNext` jobs, numbered here; they live until the flush.
        let mut numbered: Vec<(usize, Vec<OutputRow>)> = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            if let Op::AppendNext {
                task,
                attempt,
                ts_ms,
                producer,
                events,
            } = op
            {
                let stored: Option<i64> = tx
                    .query_opt(&self.statements.last_output_seq, &[task, attempt])
                    .await
                    .map_err(db_error)?
                    .map(|row| row.get(0));
                let pending = numbered
                    .iter()
                    .flat_map(|(_, rows)| rows)
                    .filter(|row| row.task == *task && row.attempt == *attempt)
                    .map(|row| row.seq)
                    .max();
                let first = stored
                    .unwrap_or(0)
                    .max(pending.unwrap_or(0))
                    .max(group_last(ops, index, *task, *attempt))
                    + 1;
                firsts[index] = first as u64;
                let rows = events
                    .iter()
                    .zip(first..)
                    .map(|((is_final, event), seq)| OutputRow {
                        task: *task,
                        attempt: *attempt,
                        seq,
                        ts_ms: *ts_ms,
                        producer: producer.clone(),
                        is_final: *is_final,
                        event: event.clone(),
                    })
                    .collect();
                numbered.push((index, rows));
            }
        }
        let mut numbered = numbered.iter().peekable();
        // Each job's events: the group numbers them in queue order.
        let mut events_before = vec![0usize; ops.len()];
        for (index, op) in ops.iter().enumerate() {
            events_before[index] = group.event_count();
            match op {
                Op::Rows(rows) => rows.iter().for_each(|row| group.add(row)),
                Op::AppendNext { .. } => {
                    if let Some((_, rows)) = numbered.next_if(|(at, _)| *at == index) {
                        rows.iter().for_each(|row| group.add_output(row));
                    }
                }
                Op::Ping => {}
            }
        }
        let first_event = match group.commit(tx, &self.statements, self.fence.node()).await {
            Ok(first) => first,
            Err(error) => {
                // The failed statement's COMMIT rolled back; this makes sure no
                // transaction is left open whatever failed (a warning if none is).
                let _ = tx.batch_execute("ROLLBACK").await;
                return Err(db_error(error));
            }
        };
        for (index, op) in ops.iter().enumerate() {
            let has_events =
                matches!(op, Op::Rows(rows) if rows.iter().any(|r| matches!(r, Row::Event { .. })));
            if has_events {
                firsts[index] = (first_event + events_before[index] as i64) as u64;
            }
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.stats.commit_latency.observe(started.elapsed());
        Ok(firsts)
    }

    /// Opens a new connection (and prepares the statements on it) if the
    /// current one is closed.
    async fn reconnect_if_lost(&mut self) -> Result<(), StoreError> {
        if !self.client.is_closed() {
            return Ok(());
        }
        tracing::warn!("postgres writer connection lost; reconnecting");
        let (client, connection) = connect::connect(&self.config).await?;
        drive(connection);
        self.statements = Statements::prepare(&client).await.map_err(db_error)?;
        self.client = client;
        Ok(())
    }
}

/// The highest seq that ops before `index` give the stream through
/// caller-numbered output rows (`append_at`) in the same group.
fn group_last(ops: &[&Op], index: usize, task: Uuid, attempt: i64) -> i64 {
    ops[..index]
        .iter()
        .filter_map(|op| match op {
            Op::Rows(rows) => Some(rows),
            _ => None,
        })
        .flatten()
        .filter_map(|row| match row {
            Row::Output(o) if o.task == task && o.attempt == attempt => Some(o.seq),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Runs a connection's background half until it closes.
pub(crate) fn drive(connection: Connection) {
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "postgres writer connection closed");
        }
    });
}

/// The tasks whose spec `op` carries.
fn specs_in(op: &Op) -> impl Iterator<Item = Uuid> + '_ {
    let rows = match op {
        Op::Rows(rows) => rows.as_slice(),
        _ => &[],
    };
    rows.iter().filter_map(|row| match row {
        Row::Task {
            id, spec: Some(_), ..
        } => Some(*id),
        _ => None,
    })
}
