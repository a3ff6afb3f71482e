//! A task with nowhere to run waits without an attempt and asks again:
//! every `RECHECK` (500 ms), and at once on `Engine::wake_waiting`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use swarmd_engine::spawn::{AgentProfile, Route, SpawnerAdapter, SpawnerResolver};
use swarmd_engine::task::{SpawnerKind, TaskStatus};
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};
use swarmd_engine::{EngineConfig, SpawnError};
use tokio::time::Instant;

use super::spec;

/// Agent `a`, runnable only while `open` is set.
#[derive(Debug)]
struct Gated {
    inner: StaticResolver,
    open: AtomicBool,
}

impl SpawnerResolver for Gated {
    fn profile(&self, agent: &str, layers: &[String]) -> Result<AgentProfile, SpawnError> {
        self.inner.profile(agent, layers)
    }

    fn link(&self, agent: &str, layers: &[String]) -> Result<Arc<dyn SpawnerAdapter>, SpawnError> {
        self.inner.link(agent, layers)
    }

    fn unavailable(&self, _task: Route<'_>) -> Option<String> {
        (!self.open.load(Ordering::Acquire)).then(|| "no session".to_owned())
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_task_starts_at_once_when_woken() {
    let spawner = ScriptedSpawner::new(|_| Script::Hang);
    let resolver = Arc::new(Gated {
        inner: StaticResolver::new().with("a", SpawnerKind::InProcess, None, spawner.clone()),
        open: AtomicBool::new(false),
    });
    let engine = memory_engine(resolver.clone(), EngineConfig::default());
    let task = engine.create_task(spec("a")).await.unwrap();
    // Between two rechecks, so only a wake can start it before the next.
    tokio::time::sleep(Duration::from_millis(3_250)).await;
    assert!(spawner.spawned().is_empty(), "nowhere to run");
    let waiting = engine.get_task(task.id).await.unwrap().unwrap();
    assert_eq!(waiting.status(), TaskStatus::Queued);

    resolver.open.store(true, Ordering::Release);
    let woken = Instant::now();
    engine.wake_waiting();
    while spawner.spawned().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        woken.elapsed() < Duration::from_millis(100),
        "started {:?} after the wake, not at the next recheck",
        woken.elapsed()
    );
}
