//! What the engine is built from: its settings (`EngineConfig`, read once
//! from the daemon's configuration) and its parts (`EngineParts`, the
//! stores, the token authority, the resolver and the clock, built in
//! `main`).

use std::sync::Arc;
use std::time::Duration;

use swarmd_output_store::OutputStore;

use crate::auth::TokenAuthority;
use crate::clock::Clock;
use crate::spawn::SpawnerResolver;
use crate::store::TaskStore;
use crate::task::Policy;

/// Default of `EngineConfig::max_output_bytes_per_attempt`: 64 MiB.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES_PER_ATTEMPT: u64 = 64 * 1024 * 1024;

/// Engine-wide settings, read once from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Policy fields a task does not set.
    pub defaults: Policy,
    /// Attempts running at once, across all agents.
    pub max_running: usize,
    /// Sub-tasks deeper than this are refused.
    pub max_spawn_depth: u32,
    /// Lifetime of worker tokens and handles.
    pub worker_token_ttl_secs: u64,
    /// How long a cancelled worker may take to stop before dispatch moves on.
    pub kill_grace: Duration,
    /// Bytes of output one attempt may store (records plus spilled blobs).
    pub max_output_bytes_per_attempt: u64,
    /// How long a task may wait for somewhere to run (a session to take an
    /// operator attempt) when its policy sets no `queue_timeout_secs`.
    pub unavailable_wait: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            defaults: Policy::default(),
            max_running: 1024,
            max_spawn_depth: 4,
            worker_token_ttl_secs: 1800,
            kill_grace: Duration::from_secs(5),
            max_output_bytes_per_attempt: DEFAULT_MAX_OUTPUT_BYTES_PER_ATTEMPT,
            unavailable_wait: Duration::from_secs(600),
        }
    }
}

/// Everything the engine is built from; built in `main`, passed in.
#[derive(Debug, Clone)]
pub struct EngineParts {
    pub config: EngineConfig,
    pub store: Arc<dyn TaskStore>,
    pub outputs: Arc<dyn OutputStore>,
    pub tokens: Arc<TokenAuthority>,
    pub resolver: Arc<dyn SpawnerResolver>,
    pub clock: Arc<dyn Clock>,
}
