//! The swarmd engine: the role/verb gate, capability tokens, tasks and
//! attempts, dispatch, the event bus and recovery. The vocabulary it works
//! in (ids, statuses, policy, error codes, events) is `swarmd-types`',
//! re-exported here under the same module paths.
//!
//! The engine owns every task's state. A task is created by
//! `Engine::create_task`, made durable, queued by admission control, and driven
//! attempt by attempt by `dispatch` through a `SpawnerAdapter` that the
//! spawner crate links. Workers talk back through the worker-side operations
//! (`fetch_prompt`, `worker_output`, `post_result`, `heartbeat`), which take a
//! credential and enforce its verification (docs/security.md). Only the engine mutates task state;
//! each task's changes happen under that task's own lock, and every change is
//! written to the `TaskStore` and published on the event bus from one place.
//! Flow runs' records and pinned flow documents (`run`) are written through
//! the same batches (`Engine::write_run`, `Engine::create_task_with`).
//!
//! The engine knows nothing of HTTP, WebSocket, axum, Lua or operator
//! sessions: every error carries an `ErrorCode` (wire string and status
//! number) that the server answers with, and the spawner crate implements
//! the traits in `spawn`. A stack is handed an `Attempt`, whose
//! `AttemptHost` (`host`) is all of the engine a layer or spawner can reach.

mod admission;
pub mod audit;
pub mod auth;
pub mod budget;
mod bus;
mod cancel;
pub mod clock;
mod config;
pub mod continuation;
mod create;
mod detach;
mod dispatch;
mod engine;
mod epilogue;
pub mod error;
pub mod gate;
mod handles;
mod held;
pub mod host;
mod ledger;
mod live;
pub mod metrics;
pub mod outcome;
mod output;
mod recovery;
mod resume;
mod retention;
mod runs;
mod shared;
pub mod spawn;
pub mod store;
pub mod task;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod worker_api;

pub use swarmd_types::{error_code, event, ids, run, usage};

pub use bus::Follower;
pub use cancel::MAX_CANCEL_REASON;
pub use config::{EngineConfig, EngineParts};
pub use create::RunWrites;
pub use detach::detached;
pub use engine::Engine;
pub use error::EngineError;
pub use error_code::ErrorCode;
pub use event::Event;
pub use ids::RunId;
pub use recovery::RecoveryReport;
pub use run::{FlowDoc, RunFilter, RunRecord, RunStatus, RunSummary};
pub use spawn::{
    AgentProfile, Attempt, AttemptHost, Ctx, Placement, Route, SpawnError, SpawnerAdapter,
    SpawnerResolver, Worker, WorkerCredential, WorkerError,
};
pub use store::WriteOp;
pub use task::{Task, TaskSpec, TaskStatus};
pub use worker_api::{HeartbeatAck, Prompt, ResultAck, ResultPost, WorkerAuth, body_digest};
