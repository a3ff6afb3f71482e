//! Why a session operation was refused.

use swarmd_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "role `{0}` is held by another live session (a holder with no socket can be taken over once auth.role_takeover_secs have passed)"
    )]
    RoleTaken(String),
    #[error("no such session")]
    NotFound,
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error(
        "the daemon holds {0} operator sessions (limits.max_operator_sessions); delete one or let an idle one expire"
    )]
    TooMany(usize),
    #[error(transparent)]
    Engine(#[from] EngineError),
}
