//! The engine's error types: `EngineError`, which every engine operation
//! returns and whose variants say what kind of failure they are through
//! their `ErrorCode` (what the server answers HTTP and WebSocket clients
//! with), and the spawners' `SpawnError` and `WorkerError` it wraps.

use swarmd_output_store::StoreError;

use crate::auth::TokenError;
use crate::error_code::ErrorCode;
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

/// Why an attempt could not be started, or an agent could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    #[error("agent `{agent}`: unknown layer `{key}`")]
    UnknownLayer { agent: String, key: String },
    #[error("agent `{agent}` is misconfigured: {reason}")]
    Misconfigured { agent: String, reason: String },
    #[error("rejected: {0}")]
    Rejected(String),
    #[error("input does not match agent `{agent}`'s input_schema at `{pointer}`: {reason}")]
    InvalidInput {
        agent: String,
        /// JSON pointer of the first failing value; empty for the input itself.
        pointer: String,
        reason: String,
    },
    #[error("no live operator session for `{0}`")]
    NoOperator(String),
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("spawn failed: {0}")]
    Failed(String),
    #[error("spawn failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a worker ended without a usable result. The text becomes the
/// attempt's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
    #[error("timed out")]
    TimedOut,
}
