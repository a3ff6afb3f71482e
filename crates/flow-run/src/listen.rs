//! Following the engine: every step task that ends is recorded in its
//! run's journal and the run moved on; at start every open run is read
//! back, its open steps' tasks looked up (an outcome missed while the
//! daemon was down is recorded then) and moved on.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use swarmd_engine::ids::TaskId;
use swarmd_engine::{Event, RunId, RunRecord, TaskStatus};
use swarmd_flow::Flow;
use tokio::sync::broadcast::error::RecvError;

use crate::advance::Live;
use crate::{RunError, Runner, State};

impl Runner {
    /// Reads back every open run, then follows the engine's events until
    /// `stop` completes (the daemon drains: a step that ends after it is
    /// recorded when the next start reads its run back) or the bus closes.
    /// Spawn it once, after the engine recovered.
    pub async fn run(self, stop: impl std::future::Future<Output = ()> + Send) {
        let mut stop = std::pin::pin!(stop);
        let mut events = self.engine().subscribe();
        if let Err(error) = self.recover().await {
            tracing::error!(%error, "flow runs could not be read back");
        }
        loop {
            let received = tokio::select! {
                () = &mut stop => return,
                received = events.recv() => received,
                () = self.inner.adopt.notified() => {
                    match self.recover().await {
                        Ok(count) => tracing::info!(runs = count, "flow runs taken over"),
                        Err(error) => tracing::error!(%error, "flow runs taken over could not be read"),
                    }
                    continue;
                }
            };
            match received {
                Ok(record) => {
                    if let Event::TaskFinished {
                        task_id,
                        status,
                        result,
                        ..
                    } = &record.event
                        && self.task_map().contains_key(task_id)
                    {
                        // Runs move on in parallel; each run's lock keeps
                        // its own outcomes in order.
                        let passed = match (status, result) {
                            (TaskStatus::Pass, Some(r)) if r.ok => Some(r.value.clone()),
                            (TaskStatus::Pass, None) => Some(Value::Null),
                            _ => None,
                        };
                        let (runner, id, at) = (self.clone(), *task_id, record.ts_ms);
                        tokio::spawn(async move { runner.task_ended(id, passed, at).await });
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "the flow runner fell behind the event bus; checking every open step"
                    );
                    let tasks: Vec<TaskId> = self.task_map().keys().copied().collect();
                    for task in tasks {
                        self.task_ended(task, None, 0).await;
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Records how task `id` ended in its run, if it is a step of one: with
    /// the value it passed with (from its `task_finished`, at `at`), or
    /// else as the task's record says (a failure's reason is there).
    async fn task_ended(&self, id: TaskId, passed: Option<Value>, at: u64) {
        let Some(run) = self.task_map().get(&id).copied() else {
            return;
        };
        let cell = self.open_runs().get(&run).cloned();
        let Some(cell) = cell else {
            self.task_map().remove(&id);
            return;
        };
        if let Some(value) = passed {
            let mut live = cell.lock().await;
            self.record_result(&mut live, id, Ok(value), at, None).await;
            self.advance(&mut live).await;
            return;
        }
        let task = match self.engine().get_task(id).await {
            Ok(Some(task)) if task.status().is_terminal() => task,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(task_id = %id, %error, "could not read a flow step's task");
                return;
            }
        };
        let mut live = cell.lock().await;
        self.record_outcome(&mut live, &task).await;
        self.advance(&mut live).await;
    }

    /// Reads back every open run not open here yet and moves each on;
    /// how many it read.
    pub async fn recover(&self) -> Result<usize, RunError> {
        let _reading = self.inner.reading.lock().await;
        let runs = self.engine().open_runs().await?;
        let mut count = 0;
        for record in runs {
            let id = record.id;
            if self.open_runs().contains_key(&id) {
                continue;
            }
            count += 1;
            let state: State = match serde_json::from_value(record.state.clone()) {
                Ok(state) => state,
                Err(error) => {
                    tracing::error!(run_id = %id, %error, "a flow run's journal does not parse; it is left as it is");
                    continue;
                }
            };
            // One run whose flow cannot be read is left for the next
            // recovery; the runs after it are still read back.
            let (flow, called) = match self.flows_of(&record, &state).await {
                Ok(flows) => flows,
                Err(error) => {
                    tracing::error!(run_id = %id, %error, "a flow run's pinned flow could not be read; it is left open and read again at the next start");
                    continue;
                }
            };
            let open: Vec<TaskId> = state
                .journal
                .open_steps()
                .filter_map(|(_, t)| t.parse().ok())
                .collect();
            let owner = record.owner.clone();
            let live = Live::new(record, state, flow, Arc::new(called));
            let cell = Arc::new(tokio::sync::Mutex::new(live));
            self.open_runs().insert(id, cell.clone(), owner.as_deref());
            {
                let mut tasks = self.task_map();
                for task in &open {
                    tasks.insert(*task, id);
                }
            }
            let mut live = cell.lock().await;
            for task in open {
                if let Ok(Some(task)) = self.engine().get_task(task).await
                    && task.status().is_terminal()
                {
                    self.record_outcome(&mut live, &task).await;
                }
            }
            self.advance(&mut live).await;
        }
        if count > 0 {
            tracing::info!(runs = count, "flow runs read back");
        }
        Ok(count)
    }

    /// The flow `record` pinned and the sub-flows its journal called.
    async fn flows_of(
        &self,
        record: &RunRecord,
        state: &State,
    ) -> Result<(Arc<Flow>, BTreeMap<String, Flow>), RunError> {
        let flow = self.pinned(&record.flow_hash).await?;
        let mut called = BTreeMap::new();
        for (name, hash) in &state.calls {
            called.insert(name.clone(), (*self.pinned(hash).await?).clone());
        }
        Ok((flow, called))
    }

    /// Whether run `id` is open in this runner.
    pub fn is_open(&self, id: RunId) -> bool {
        self.open_runs().contains_key(&id)
    }
}
