//! `GET /v1/blobs/{sha256}` (docs/protocol.md, Output events): the bytes of
//! a spilled output value, which an output names as a `file_ref` to
//! `blobs/<sha256>`. Read through the output store, so on PostgreSQL any
//! node serves what any node spilled.

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use swarmd_engine::gate::Verb;
use swarmd_output_store::is_blob_name;

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::Path;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/blobs/{sha256}", get(blob))
}

/// The blob's bytes as stored (a value's JSON), to whoever may read outputs.
async fn blob(
    State(state): State<AppState>,
    caller: Caller,
    Path(sha256): Path<String>,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadOutput)?;
    if !is_blob_name(&sha256) {
        return Err(ApiError::bad_request(
            "a blob is named by 64 lowercase hex digits (its SHA-256)",
        ));
    }
    let bytes = state
        .engine
        .outputs()
        .read_blob(&sha256)
        .await
        .map_err(|error| ApiError::internal(&error))?
        .ok_or_else(|| ApiError::not_found(format!("blob {sha256}")))?;
    Ok(([(CONTENT_TYPE, "application/json")], bytes).into_response())
}
