//! Why a runner verb was refused, with the stable code its HTTP answer
//! carries.

use swarmd_engine::{EngineError, ErrorCode};
use swarmd_flow::Problem;

/// A refused or failed runner verb.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    NotFound(String),
    /// The flow does not pass lint; every problem, each with its pointer.
    #[error("the flow has {} problem(s); the first: {}", problems.len(), problems.first().map_or("", |p| p.message.as_str()))]
    InvalidFlow { problems: Vec<Problem> },
    /// The run's input or a wait's answer does not match its schema.
    #[error("{0}")]
    InvalidInput(String),
    /// The run already ended.
    #[error("{0}")]
    Terminal(String),
    /// No open wait of that name, or several.
    #[error("{0}")]
    WaitNotOpen(String),
    /// An idempotency key reused for another flow or input.
    #[error("{0}")]
    KeyConflict(String),
    #[error("{0}")]
    Forbidden(String),
    /// The node holds its most open runs.
    #[error("{0}")]
    TooMany(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl RunError {
    /// The code of the error body.
    pub fn code(&self) -> ErrorCode {
        match self {
            RunError::NotFound(_) => ErrorCode::NotFound,
            RunError::InvalidFlow { .. } => ErrorCode::InvalidFlow,
            RunError::InvalidInput(_) => ErrorCode::InvalidInput,
            RunError::Terminal(_) => ErrorCode::RunTerminal,
            RunError::WaitNotOpen(_) => ErrorCode::WaitNotOpen,
            RunError::KeyConflict(_) => ErrorCode::IdempotencyConflict,
            RunError::Forbidden(_) => ErrorCode::Forbidden,
            RunError::TooMany(_) => ErrorCode::TooManyRuns,
            RunError::Engine(e) => e.code(),
        }
    }
}
