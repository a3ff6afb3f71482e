//! The HTTP API (docs/protocol.md): routes, authentication, extractors, middleware
//! and error mapping, assembled by `router`.
//!
//! Route groups live in their own files (`worker`, `pool`, `tasks`, `output`,
//! `events`, `ops`, and the operator sessions in `operators`); `error` is
//! the one place errors become status + `{error, code}`, and `extract` makes
//! bad input land there too.

mod agents;
pub mod auth;
mod blobs;
pub mod branches;
pub mod error;
pub mod extract;
pub mod flows;
pub mod guard;
pub mod layers;
pub mod operators;
pub mod sse;

mod events;
mod ops;
pub mod output;
pub(crate) mod pool;
pub mod tasks;
pub(crate) mod ui;
pub mod views;
pub mod worker;

use axum::Router;
use swarmd_engine::ErrorCode;

use crate::app::AppState;
use crate::http::error::ApiError;

pub use tasks::MAX_WAIT_SECS;

/// The HTTP API's routes, without middleware (`crate::router` adds it).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .merge(worker::routes())
        .merge(pool::routes())
        .merge(tasks::routes())
        .merge(output::routes())
        .merge(blobs::routes())
        .merge(events::routes())
        .merge(ops::routes())
        .merge(operators::routes())
        .merge(agents::routes())
        .merge(branches::routes())
        .merge(flows::routes())
        .merge(ui::routes())
}

/// The answer to a request no route matches.
pub(crate) async fn not_found() -> ApiError {
    ApiError::coded(ErrorCode::NotFound, "no such route")
}

#[cfg(test)]
mod tests;
