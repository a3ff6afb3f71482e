//! The worker routes the upstream `mse` client's SubAgent tools use besides
//! the documented ones (docs/protocol.md, Upstream clients), each answered
//! `204` to everyone: `artifact?name=` (a named part, one `artifact` output
//! event), and `stats` and `degradation` (reports it posts before its
//! result, kept as `progress` events `stats` and `degradation` whose note is
//! the report's JSON).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::Deserialize;
use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent};

use super::{NamedTask, id_of, parse_json, submitted_value};
use swarmd_output_store::MAX_ARTIFACT_NAME;

use crate::app::AppState;
use crate::http::auth::{Verified, verb, worker_refusal};
use crate::http::error::ApiError;
use crate::http::extract::{Query, RawBody};

/// The largest `stats` or `degradation` report, in bytes of JSON.
const MAX_REPORT_BYTES: usize = 64 << 10;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/worker/artifact", post(artifact))
        .route("/v1/worker/stats", post(stats))
        .route("/v1/worker/degradation", post(degradation))
}

/// `POST /v1/worker/artifact` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArtifactQuery {
    name: String,
    #[serde(default)]
    task_id: Option<NamedTask>,
}

/// `?task_id=` of the report routes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportQuery {
    #[serde(default)]
    task_id: Option<NamedTask>,
}

/// The body, read as `submit` reads it, as one `artifact` output event.
async fn artifact(
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::EmitOutput>,
    Query(query): Query<ArtifactQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<StatusCode, ApiError> {
    if query.name.is_empty() || query.name.len() > MAX_ARTIFACT_NAME {
        return Err(ApiError::bad_request(format!(
            "`name` must be 1 to {MAX_ARTIFACT_NAME} bytes"
        )));
    }
    let event = OutputEvent::Artifact {
        name: query.name,
        content: ContentRef::Inline {
            value: submitted_value(&headers, &body)?,
        },
    };
    state
        .engine
        .worker_output(&auth, id_of(query.task_id), vec![event])
        .await
        .map_err(|e| worker_refusal(&state, &bearer.0, e))?;
    Ok(StatusCode::NO_CONTENT)
}

async fn stats(
    state: State<AppState>,
    worker: Verified<verb::EmitOutput>,
    query: Query<ReportQuery>,
    body: RawBody,
) -> Result<StatusCode, ApiError> {
    report("stats", state, worker, query, body).await
}

async fn degradation(
    state: State<AppState>,
    worker: Verified<verb::EmitOutput>,
    query: Query<ReportQuery>,
    body: RawBody,
) -> Result<StatusCode, ApiError> {
    report("degradation", state, worker, query, body).await
}

/// A JSON report of at most [`MAX_REPORT_BYTES`] as a `progress` event named
/// `stage`.
async fn report(
    stage: &str,
    State(state): State<AppState>,
    Verified { bearer, auth, .. }: Verified<verb::EmitOutput>,
    Query(query): Query<ReportQuery>,
    RawBody(body): RawBody,
) -> Result<StatusCode, ApiError> {
    if body.len() > MAX_REPORT_BYTES {
        return Err(report_too_large(stage));
    }
    let value: Value = parse_json(&body)?;
    let event = report_event(stage, &value)?;
    state
        .engine
        .worker_output(&auth, id_of(query.task_id), vec![event])
        .await
        .map_err(|e| worker_refusal(&state, &bearer.0, e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// A `stats` or `degradation` report as the `progress` event it is kept as
/// (also for the MCP alias `mse_worker_submit`).
pub fn report_event(stage: &str, report: &Value) -> Result<OutputEvent, ApiError> {
    let note = report.to_string();
    if note.len() > MAX_REPORT_BYTES {
        return Err(report_too_large(stage));
    }
    Ok(OutputEvent::Progress {
        stage: stage.to_owned(),
        note: Some(note),
    })
}

fn report_too_large(stage: &str) -> ApiError {
    ApiError::bad_request(format!(
        "a {stage} report is at most {MAX_REPORT_BYTES} bytes"
    ))
}
