//! The stack's order, proven with recording layers around a recording base
//! spawner, driven through the engine.

use serde_json::json;
use swarmd_engine::SpawnError;
use swarmd_engine::task::{PolicyOverrides, TaskStatus};

use super::*;
use crate::testing::{
    Act, FinalSpawner, RecordingLayer, call_log, calls, engine_running, run_task,
};

fn strings(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

#[tokio::test]
async fn spawn_runs_outside_in_and_completion_unwinds_inside_out() {
    let log = call_log();
    let registry = LayerRegistry::new()
        .with_base("audit", RecordingLayer::arc("audit", &log))
        .with_base("long_hold", RecordingLayer::arc("long_hold", &log))
        .with_hint("h1", RecordingLayer::arc("h1", &log))
        .with_hint("h2", RecordingLayer::arc("h2", &log))
        .with_hint("h3", RecordingLayer::arc("h3", &log));
    // The agent names h2; the task adds h3, h1 and h2 again.
    let hints = registry
        .hint_keys(
            "a",
            &strings(&["h2"]),
            &strings(&["h3", "h1", "h2", "audit"]),
        )
        .unwrap();
    assert_eq!(hints, strings(&["h2", "h3", "h1"]));
    let stack = registry.stack("a", &hints).unwrap();
    assert_eq!(stack.keys(), ["audit", "long_hold", "h2", "h3", "h1"]);

    let base = FinalSpawner::arc(Act::Final(json!("v"), true), &log);
    let engine = engine_running("a", stack.link(base));
    let task = run_task(&engine, "a", PolicyOverrides::default()).await;
    assert_eq!(task.status(), TaskStatus::Pass);
    assert_eq!(
        calls(&log),
        [
            "audit spawn",
            "long_hold spawn",
            "h2 spawn",
            "h3 spawn",
            "h1 spawn",
            "base spawn",
            "base join",
            "h1 join",
            "h3 join",
            "h2 join",
            "long_hold join",
            "audit join",
        ]
    );
}

#[tokio::test]
async fn a_failed_spawn_unwinds_without_joins() {
    let log = call_log();
    let registry = LayerRegistry::new()
        .with_base("audit", RecordingLayer::arc("audit", &log))
        .with_hint("h1", RecordingLayer::arc("h1", &log));
    let stack = registry.stack("a", &strings(&["h1"])).unwrap();
    let base = FinalSpawner::arc(Act::Refuse("no".into()), &log);
    let engine = engine_running("a", stack.link(base));
    let task = run_task(&engine, "a", PolicyOverrides::default()).await;
    assert_eq!(task.status(), TaskStatus::Failed);
    assert_eq!(calls(&log), ["audit spawn", "h1 spawn", "base spawn"]);
}

#[test]
fn unknown_hint_keys_name_the_agent_and_key() {
    let log = call_log();
    let registry = LayerRegistry::new().with_hint("h1", RecordingLayer::arc("h1", &log));
    let err = registry
        .hint_keys("writer", &strings(&["h1"]), &strings(&["nope"]))
        .unwrap_err();
    assert!(
        matches!(&err, SpawnError::UnknownLayer { agent, key } if agent == "writer" && key == "nope")
    );
    assert_eq!(err.to_string(), "agent `writer`: unknown layer `nope`");
    assert!(registry.stack("writer", &strings(&["zzz"])).is_err());
}
