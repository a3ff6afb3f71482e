//! The engine's error type. Each variant says what kind of failure it is; the
//! server maps `EngineError::code` to an HTTP status in one place.

use swarmd_output_store::StoreError;

use crate::auth::TokenError;
use crate::spawn::SpawnError;
use crate::task::IllegalTransition;

/// Everything an engine operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error(transparent)]
    Unauthorized(TokenError),
    #[error("verb not allowed for this credential")]
    Forbidden,
    #[error("credential is bound to another task")]
    TaskMismatch,
    #[error("{0} not found")]
    NotFound(String),
    #[error("attempt {attempt} is no longer current (current: {current})")]
    AttemptSuperseded { attempt: u32, current: u32 },
    #[error("a result was already posted for this attempt")]
    AlreadyFinal,
    #[error("idempotency key reused with a different request")]
    IdempotencyConflict,
    #[error("task is terminal")]
    TaskTerminal,
    #[error("worker handle expired")]
    HandleExpired,
    #[error("spawn depth {depth} exceeds the limit {limit}")]
    DepthExceeded { depth: u32, limit: u32 },
    #[error("the engine is draining")]
    Draining,
    #[error("the attempt's output budget of {limit} bytes is spent")]
    OutputBudgetExceeded { limit: u64 },
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error(transparent)]
    Transition(#[from] IllegalTransition),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The machine code (docs/protocol.md, Errors).
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::BadRequest(_) | EngineError::DepthExceeded { .. } => "bad_request",
            EngineError::Unauthorized(e) => e.public_code(),
            EngineError::Forbidden => "forbidden",
            EngineError::TaskMismatch => "task_mismatch",
            EngineError::NotFound(_) => "not_found",
            EngineError::Spawn(SpawnError::UnknownAgent(_)) => "not_found",
            EngineError::Spawn(SpawnError::UnknownLayer { .. }) => "bad_request",
            EngineError::AttemptSuperseded { .. } => "attempt_superseded",
            EngineError::AlreadyFinal => "already_final",
            EngineError::IdempotencyConflict => "idempotency_conflict",
            EngineError::TaskTerminal | EngineError::Transition(_) => "task_terminal",
            EngineError::HandleExpired => "handle_expired",
            EngineError::Draining => "draining",
            EngineError::OutputBudgetExceeded { .. } => "output_budget_exceeded",
            EngineError::Spawn(_) | EngineError::Store(_) => "internal",
        }
    }
}
