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
    #[error(transparent)]
    Engine(#[from] EngineError),
}
