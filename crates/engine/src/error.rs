//! The engine's error type. Each variant says what kind of failure it is
//! through its `ErrorCode`, which the server answers HTTP and WebSocket
//! clients with.

use swarmd_output_store::StoreError;

use crate::auth::TokenError;
use crate::error_code::ErrorCode;
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
    #[error("task {task} is {status}: only a finished task can be continued")]
    TaskNotFinished {
        task: crate::ids::TaskId,
        status: crate::task::TaskStatus,
    },
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
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::BadRequest(_) | EngineError::DepthExceeded { .. } => ErrorCode::BadRequest,
            EngineError::Unauthorized(e) => e.public_code(),
            EngineError::Forbidden => ErrorCode::Forbidden,
            EngineError::TaskMismatch => ErrorCode::TaskMismatch,
            EngineError::NotFound(_) => ErrorCode::NotFound,
            EngineError::Spawn(SpawnError::UnknownAgent(_)) => ErrorCode::NotFound,
            EngineError::Spawn(SpawnError::UnknownLayer { .. }) => ErrorCode::BadRequest,
            EngineError::Spawn(SpawnError::InvalidInput { .. }) => ErrorCode::InvalidInput,
            EngineError::AttemptSuperseded { .. } => ErrorCode::AttemptSuperseded,
            EngineError::AlreadyFinal => ErrorCode::AlreadyFinal,
            EngineError::IdempotencyConflict => ErrorCode::IdempotencyConflict,
            EngineError::TaskTerminal | EngineError::Transition(_) => ErrorCode::TaskTerminal,
            EngineError::HandleExpired => ErrorCode::HandleExpired,
            EngineError::TaskNotFinished { .. } => ErrorCode::TaskNotFinished,
            EngineError::Draining => ErrorCode::Draining,
            EngineError::OutputBudgetExceeded { .. } => ErrorCode::OutputBudgetExceeded,
            EngineError::Store(error) if error.is_fenced() => ErrorCode::NodeFenced,
            EngineError::Store(error) if error.is_busy() => ErrorCode::Unavailable,
            EngineError::Spawn(_) | EngineError::Store(_) => ErrorCode::Internal,
        }
    }
}
