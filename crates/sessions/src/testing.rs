//! Test support for the tests of sessions and of the daemon's sockets: an
//! engine whose resolver delegates through a session registry (the daemon's
//! `StackResolver` with the operator-delegate layer), on memory stores.
//!
//! Agents: `echo` finishes at once with `"echoed"`; `slow` hangs until
//! cancelled; `reviewer` exists only through `operator_delegate` (its base
//! is the unconfigured-agent spawner).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use swarmd_engine::auth::{AuthorityConfig, Keyring, TokenAuthority};
use swarmd_engine::clock::{Clock, SystemClock};
use swarmd_engine::store::MemoryTaskStore;
use swarmd_engine::task::SpawnerKind;
use swarmd_engine::testing::{Script, ScriptedSpawner};
use swarmd_engine::{Engine, EngineConfig, EngineParts, SpawnerAdapter};
use swarmd_output_store::MemoryOutputStore;
use swarmd_spawner::layers::{OPERATOR_DELEGATE, OperatorDelegateLayer};
use swarmd_spawner::spawners::UnconfiguredAgent;
use swarmd_spawner::{AgentEntry, LayerRegistry, StackResolver};

use crate::{SessionRegistry, SessionSettings};

/// How long `eventually` waits before failing.
const PATIENCE: Duration = Duration::from_secs(10);

/// The settings of a daemon's default configuration.
pub fn default_settings() -> SessionSettings {
    SessionSettings {
        park_max: 10_000,
        idle: Duration::from_secs(86_400),
        takeover: Duration::from_secs(30),
        max_sessions: 10_000,
    }
}

/// An engine and the registry wired as its session directory.
#[derive(Debug)]
pub struct Harness {
    pub engine: Engine,
    pub registry: Arc<SessionRegistry>,
    /// The spawner of the `slow` agent: its workers hang until cancelled.
    pub slow: Arc<ScriptedSpawner>,
}

impl Harness {
    /// The default settings on the system clock.
    pub async fn new() -> Harness {
        Self::build(
            default_settings(),
            Arc::new(SystemClock),
            "http://127.0.0.1:9",
        )
    }

    /// A harness whose delegated attempts name `base_url` as the daemon's.
    pub fn build(settings: SessionSettings, clock: Arc<dyn Clock>, base_url: &str) -> Harness {
        Self::around(
            SessionRegistry::new(settings, clock.clone()),
            clock,
            base_url,
        )
    }

    /// A harness around `registry` (one built in a cluster, say).
    pub fn around(
        registry: Arc<SessionRegistry>,
        clock: Arc<dyn Clock>,
        base_url: &str,
    ) -> Harness {
        let slow = ScriptedSpawner::new(|_| Script::Hang);
        let echo = ScriptedSpawner::new(|_| Script::Final {
            value: json!("echoed"),
            ok: true,
        });
        let delegate = OperatorDelegateLayer::new(base_url, HashMap::new(), registry.clone());
        let entry = |kind, spawner: Arc<dyn SpawnerAdapter>, layers: &[&str]| AgentEntry {
            kind,
            spawner,
            layers: layers.iter().map(|l| (*l).to_owned()).collect(),
            concurrency: None,
            allow_subtasks: false,
            credential_leaves: false,
            input_schema: None,
            route: None,
        };
        let agents = HashMap::from([
            ("echo".to_owned(), entry(SpawnerKind::InProcess, echo, &[])),
            (
                "slow".to_owned(),
                entry(SpawnerKind::InProcess, slow.clone(), &[]),
            ),
            (
                "reviewer".to_owned(),
                entry(
                    SpawnerKind::Operator,
                    Arc::new(UnconfiguredAgent),
                    &[OPERATOR_DELEGATE],
                ),
            ),
        ]);
        let layers = LayerRegistry::new().with_hint(OPERATOR_DELEGATE, Arc::new(delegate));
        let resolver = StackResolver::new(agents, layers).with_operators(registry.clone());
        let tokens = TokenAuthority::new(
            Keyring::generate(),
            clock.clone(),
            AuthorityConfig::default(),
        );
        let engine = Engine::new(EngineParts {
            config: EngineConfig::default(),
            store: Arc::new(MemoryTaskStore::new()),
            outputs: Arc::new(MemoryOutputStore::new()),
            tokens: Arc::new(tokens),
            resolver: Arc::new(resolver),
            clock,
        });
        Harness {
            engine,
            registry,
            slow,
        }
    }
}

/// Polls `check` until it holds (state settled by other tasks).
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
