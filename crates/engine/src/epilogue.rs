//! An attempt's epilogue (docs/decisions.md, Output): outputs that describe
//! what an attempt left behind, such as its `worktree` artifact, appended
//! to its tail even after the attempt closed: cancelled, settled, or
//! decided by recovery after the daemon that ran it died.
//!
//! While the attempt is open an epilogue is ordinary output (`output`).
//! Once it is closed the engine hands out no more seqs for it, so the
//! store numbers the epilogue inside its write transaction, after every
//! output queued before it. An epilogue never holds a Final: the last Final
//! decides an attempt, so nothing appended after it changes the verdict.

use std::time::Instant;

use swarmd_output_store::{OutputEvent, OutputRecord};

use crate::error::EngineError;
use crate::event::Event;
use crate::ids::AttemptId;
use crate::output::Appends;

impl Appends<'_> {
    /// Records `events` as `id`'s epilogue: as output while the attempt is
    /// open, else after everything already queued for it.
    pub(crate) async fn record_epilogue(
        &self,
        id: AttemptId,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        if events.iter().any(OutputEvent::is_final) {
            return Err(EngineError::BadRequest(
                "an epilogue holds no final event".to_owned(),
            ));
        }
        if self.attempt_is_open(id) {
            match self.record_output(id, producer, events.clone()).await {
                Err(EngineError::TaskTerminal | EngineError::AttemptSuperseded { .. }) => {}
                recorded => return recorded,
            }
        }
        self.append_closed(id, producer, events).await
    }

    /// Whether `id` is the open attempt of a live task.
    fn attempt_is_open(&self, id: AttemptId) -> bool {
        self.held.live.get(&id.task).is_some_and(|cell| {
            cell.lock()
                .run
                .as_ref()
                .is_some_and(|r| r.attempt == id.n && r.open)
        })
    }

    /// Appends to a closed attempt: the store numbers the events after
    /// everything already queued for the attempt.
    async fn append_closed(
        &self,
        id: AttemptId,
        producer: &str,
        events: Vec<OutputEvent>,
    ) -> Result<Vec<OutputRecord>, EngineError> {
        let task = match self.held.live.get(&id.task) {
            Some(cell) => Some(cell.lock().task.clone()),
            None => self.ledger.store.task(id.task).await?,
        };
        let task = task
            .filter(|task| id.n >= 1 && id.n <= task.attempt)
            .ok_or_else(|| EngineError::NotFound(format!("attempt {id}")))?;
        let started = Instant::now();
        // Checked before any blob is stored: a refused epilogue leaves none.
        let prepared = self.ledger.outputs.encode(events).await?;
        if prepared.stored_bytes() > self.limit {
            return Err(EngineError::OutputBudgetExceeded { limit: self.limit });
        }
        let prepared = self.ledger.outputs.store_blobs(prepared).await?;
        let records = self
            .ledger
            .outputs
            .append(
                id.task.as_uuid(),
                id.n,
                producer,
                prepared.events().to_vec(),
            )
            .await?;
        self.stats.store_append_latency.observe(started.elapsed());
        let published = records
            .iter()
            .map(|r| {
                (
                    task.session,
                    Event::Output {
                        task_id: id.task,
                        attempt: id.n,
                        seq: r.seq,
                        output: r.event.clone(),
                    },
                )
            })
            .collect();
        self.ledger.bus.submit(Vec::new(), published, None);
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use swarmd_output_store::{ContentRef, OutputEvent};

    use crate::event::Event;
    use crate::ids::{AttemptId, TaskId};
    use crate::task::{SpawnerKind, TaskSpec, TaskStatus};
    use crate::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};
    use crate::{Engine, EngineConfig, EngineError};

    const WAIT: Duration = Duration::from_secs(3600);

    fn engine(script: Script) -> (Engine, Arc<ScriptedSpawner>) {
        let spawner = ScriptedSpawner::new(move |_| script.clone());
        let resolver =
            StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner.clone());
        (
            memory_engine(Arc::new(resolver), EngineConfig::default()),
            spawner,
        )
    }

    fn spec() -> TaskSpec {
        TaskSpec {
            agent: "a".into(),
            prompt: "p".into(),
            ..TaskSpec::default()
        }
    }

    fn artifact() -> OutputEvent {
        OutputEvent::Artifact {
            name: "worktree".into(),
            content: ContentRef::Inline {
                value: json!({"files": ["a.txt"]}),
            },
        }
    }

    async fn spawned(spawner: &ScriptedSpawner, task: TaskId) {
        for _ in 0..10_000 {
            if spawner.spawned().iter().any(|s| s.0 == task) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("never spawned");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_attempt_takes_its_epilogue_after_everything_else() {
        let (engine, spawner) = engine(Script::Hang);
        let t = engine.create_task(spec()).await.unwrap();
        spawned(&spawner, t.id).await;
        let id = AttemptId::new(t.id, 1);
        let note = OutputEvent::Progress {
            stage: "working".into(),
            note: None,
        };
        engine
            .appends()
            .record_output(id, "w", vec![note])
            .await
            .unwrap();
        engine.cancel_task(t.id, None).await.unwrap();
        let refused = engine
            .appends()
            .record_output(id, "w", vec![artifact()])
            .await;
        assert!(refused.is_err(), "ordinary output is fenced: {refused:?}");

        let records = engine
            .record_epilogue(id, "worktree", vec![artifact()])
            .await
            .unwrap();
        assert_eq!(records[0].seq, 2, "after the attempt's own output");
        let tail = engine
            .outputs()
            .tail(t.id.as_uuid(), 1, 0, 10)
            .await
            .unwrap();
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[1].event, artifact());
        let task = engine.wait_task(t.id, WAIT).await.unwrap();
        assert_eq!(task.status(), TaskStatus::Cancelled, "the verdict stands");
        let events = engine.events_after(0, 1000).await.unwrap();
        assert!(
            events.iter().any(|e| matches!(
                &e.event,
                Event::Output { seq: 2, output, .. } if *output == artifact()
            )),
            "the epilogue is published"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_epilogue_after_the_decision_changes_no_verdict() {
        let (engine, _) = engine(Script::Final {
            value: json!("done"),
            ok: false,
        });
        let t = engine.create_task(spec()).await.unwrap();
        let done = engine.wait_task(t.id, WAIT).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Blocked);
        let id = AttemptId::new(t.id, 1);
        engine
            .record_epilogue(id, "worktree", vec![artifact()])
            .await
            .unwrap();
        let last = engine
            .appends()
            .last_final(id)
            .await
            .unwrap()
            .expect("the final");
        assert_eq!(last.seq, 1, "the Final still decides");
        assert_eq!(
            engine.get_task(t.id).await.unwrap().unwrap().status(),
            TaskStatus::Blocked
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_or_an_attempt_never_started_is_refused() {
        let (engine, _) = engine(Script::Final {
            value: json!(1),
            ok: true,
        });
        let t = engine.create_task(spec()).await.unwrap();
        engine.wait_task(t.id, WAIT).await.unwrap();
        let id = AttemptId::new(t.id, 1);
        let final_ = OutputEvent::inline_final(json!(2), true);
        let error = engine
            .record_epilogue(id, "w", vec![final_])
            .await
            .unwrap_err();
        assert!(matches!(error, EngineError::BadRequest(_)), "{error}");
        for id in [AttemptId::new(t.id, 2), AttemptId::new(TaskId::new(), 1)] {
            let error = engine
                .record_epilogue(id, "w", vec![artifact()])
                .await
                .unwrap_err();
            assert!(matches!(error, EngineError::NotFound(_)), "{error}");
        }
    }
}
