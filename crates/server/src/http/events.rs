//! `GET /v1/events` (the durable event log: whole for the admin and
//! observers, only its own tasks' and its own session's events for an
//! operator session; JSON page or live SSE with `id: <seq>`, optionally only
//! some `kinds`) and `GET /v1/audit` (audit records).

use std::collections::VecDeque;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::{Event, EventRecord};
use swarmd_engine::gate::{Role, Verb};
use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::{Engine, EngineError};

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Json, Query, empty_as_none};
use crate::http::sse::{self, Follow, Live, Wake, last_event_id, wants_sse};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/events", get(events))
        .route("/v1/audit", get(audit))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    after_seq: Option<u64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    limit: Option<usize>,
    /// Comma-separated event kinds; absent: every kind.
    #[serde(default, deserialize_with = "empty_as_none")]
    kinds: Option<String>,
}

#[derive(Debug, Serialize)]
struct EventsPage {
    events: Vec<EventRecord>,
    /// Pass as `after_seq` to get the next page (with `kinds`, the last seq
    /// read, which may be past the last event returned).
    next_seq: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    task_id: Option<TaskId>,
    #[serde(default, deserialize_with = "empty_as_none")]
    limit: Option<usize>,
}

#[derive(Debug, Serialize)]
struct AuditPage {
    records: Vec<AuditRecord>,
}

async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // An operator session reads its own part of the log; senior tokens none.
    let owner = match (&caller, caller.role()) {
        (Caller::Operator(session), _) => Some(session.sid),
        (_, Role::Admin | Role::Observer) => None,
        _ => {
            state.metrics.token_failure("forbidden");
            return Err(ApiError::forbidden());
        }
    };
    caller.check(&state, Verb::Subscribe)?;
    let scope = Scope {
        kinds: query.kinds.as_deref().map(parse_kinds).transpose()?,
        owner,
    };
    let after = match last_event_id(&headers) {
        Some(id) => id
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("Last-Event-ID must be an event sequence number"))?,
        None => query.after_seq.unwrap_or(0),
    };
    if wants_sse(&headers) {
        let rx = state.engine.subscribe();
        let follow = EventFollow {
            engine: state.engine.clone(),
            cursor: after,
            reported: after,
            page: sse::PAGE,
            scope,
        };
        return Ok(sse::stream(follow, rx, state.shutdown.clone(), false));
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut events = state.engine.events_after(after, limit).await?;
    let next_seq = events.last().map_or(after, |e| e.seq);
    events.retain(|e| scope.wants(e));
    Ok(Json(EventsPage { events, next_seq }).into_response())
}

/// `kinds=a,b`: each a known event kind, at most one of each.
fn parse_kinds(text: &str) -> Result<Vec<&'static str>, ApiError> {
    let mut kinds = Vec::new();
    for name in text.split(',').map(str::trim) {
        let kind = Event::KINDS.iter().find(|k| **k == name).ok_or_else(|| {
            ApiError::bad_request(format!("unknown event kind in kinds: {name:?}"))
        })?;
        if !kinds.contains(kind) {
            kinds.push(*kind);
        }
    }
    Ok(kinds)
}

async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let records = state.engine.audit_records(query.task_id, limit).await?;
    Ok(Json(AuditPage { records }))
}

/// Which events a reader gets: only `kinds` when set, and for an operator
/// session (`owner`) only the records that name it: its tasks' events (a
/// record carries the session that owns its task; sub-tasks inherit it)
/// and its own `session_attached`/`session_detached`. One comparison per
/// record, no read.
#[derive(Debug)]
struct Scope {
    kinds: Option<Vec<&'static str>>,
    owner: Option<SessionId>,
}

impl Scope {
    fn wants(&self, record: &EventRecord) -> bool {
        self.owner.is_none_or(|sid| record.session == Some(sid))
            && self
                .kinds
                .as_ref()
                .is_none_or(|kinds| kinds.contains(&record.event.kind()))
    }
}

/// Follows the event log from a sequence number, sending only what `scope`
/// wants (the cursor still steps over the others, and the client hears
/// how far as a progress id).
#[derive(Debug)]
struct EventFollow {
    engine: Engine,
    cursor: u64,
    /// The highest seq the client got: sent, or reported by a progress id.
    reported: u64,
    page: usize,
    scope: Scope,
}

impl Follow for EventFollow {
    type Item = EventRecord;

    async fn fill(&mut self, out: &mut VecDeque<EventRecord>) -> Result<bool, EngineError> {
        let events = self.engine.events_after(self.cursor, self.page).await?;
        let full = events.len() >= self.page;
        for event in events {
            self.cursor = self.cursor.max(event.seq);
            if self.scope.wants(&event) {
                self.reported = event.seq;
                out.push_back(event);
            }
        }
        Ok(full)
    }

    fn wake(&self, record: &EventRecord) -> Wake {
        if record.seq > self.cursor {
            Wake::Behind
        } else {
            Wake::Ignore
        }
    }

    fn take_live(&mut self, record: &EventRecord) -> Live<EventRecord> {
        // The broadcast record is the stored one: no read needed when it is next.
        if record.seq != self.cursor + 1 {
            return Live::Read;
        }
        self.cursor = record.seq;
        if self.scope.wants(record) {
            self.reported = record.seq;
            Live::Send(record.clone())
        } else {
            Live::Skip
        }
    }

    fn progress_id(&mut self) -> Option<String> {
        (self.cursor > self.reported).then(|| {
            self.reported = self.cursor;
            self.cursor.to_string()
        })
    }

    fn render(&self, item: EventRecord) -> SseEvent {
        SseEvent::default()
            .id(item.seq.to_string())
            .event(item.event.kind())
            .json_data(&item)
            .unwrap_or_else(|_| SseEvent::default().comment("unencodable event"))
    }
}
