//! `GET /v1/events` (the durable event log: whole for the admin and
//! observers, only its own tasks' and its own session's events for an
//! operator session; JSON page or live SSE with `id: <seq>`, optionally only
//! some `kinds` and some `tasks`, and on SSE a coalesced `tick` of new
//! tasks; an operator session's stream ends once the session does) and
//! `GET /v1/audit` (audit records; an operator session's own tasks' only).

mod scope;

use std::collections::VecDeque;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use swarmd_engine::audit::AuditRecord;
use swarmd_engine::event::EventRecord;
use swarmd_engine::gate::{Role, Verb};
use swarmd_engine::ids::{SessionId, TaskId};
use swarmd_engine::{Engine, EngineError};

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Json, Query, empty_as_none};
use crate::http::sse::{self, Follow, Live, Wake, last_event_id, wants_sse};
use crate::http::views::Reader;
use scope::{Scope, Tick, TickQuery, parse_kinds, parse_tasks};

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
    /// Comma-separated task ids (at most 100); absent: every task.
    #[serde(default, deserialize_with = "empty_as_none")]
    tasks: Option<String>,
    /// SSE only: send a `tick` of new tasks at most this often.
    #[serde(default, deserialize_with = "empty_as_none")]
    tick_ms: Option<u64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    tick_agent: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    tick_session: Option<SessionId>,
    #[serde(default, deserialize_with = "empty_as_none")]
    tick_parent: Option<TaskId>,
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
    let reads = matches!(
        (&caller, caller.role()),
        (Caller::Operator(_), _) | (_, Role::Admin | Role::Observer)
    );
    if !reads {
        state.metrics.token_failure("forbidden");
        return Err(ApiError::forbidden());
    }
    caller.check(&state, Verb::Subscribe)?;
    let scope = Scope {
        kinds: query.kinds.as_deref().map(parse_kinds).transpose()?,
        reader: Reader::of(&caller),
        tasks: query.tasks.as_deref().map(parse_tasks).transpose()?,
    };
    let tick = Tick::parse(TickQuery {
        ms: query.tick_ms,
        agent: query.tick_agent,
        session: query.tick_session,
        parent: query.tick_parent,
    })?;
    let (after, named) = match last_event_id(&headers) {
        Some(id) => (
            id.parse::<u64>().map_err(|_| {
                ApiError::bad_request("Last-Event-ID must be an event sequence number")
            })?,
            "Last-Event-ID",
        ),
        None => (query.after_seq.unwrap_or(0), "after_seq"),
    };
    within_log(&state.engine, after, named).await?;
    if wants_sse(&headers) {
        let slot = match state.guards.open_stream(caller.stream_key()) {
            Ok(slot) => slot,
            Err(refused) => return Ok(refused.into_response()),
        };
        let rx = (state.engine.follow(), state.engine.subscribe());
        let follow = EventFollow {
            engine: state.engine.clone(),
            cursor: after,
            reported: after,
            page: sse::PAGE,
            scope,
            tick,
            end: sse::StreamEnd::of(&caller),
        };
        return Ok(sse::stream(
            follow,
            rx,
            (state.shutdown.clone(), slot),
            false,
        ));
    }
    if tick.is_some() {
        return Err(ApiError::bad_request(
            "tick_ms needs a stream (Accept: text/event-stream)",
        ));
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut events = state.engine.events_after(after, limit).await?;
    let next_seq = events.last().map_or(after, |e| e.seq);
    events.retain(|e| scope.wants(e));
    Ok(Json(EventsPage { events, next_seq }).into_response())
}

/// Refuses a cursor past the end of the event log (`400 bad_request`): a
/// seq the log never reached comes from another store or a database that
/// was reset, and a feed from it would wait, silently, for seqs that
/// arrive only much later and mean other events.
///
/// The end is the store's as read now, not this node's view of it: on a
/// cluster another node's commit is in the shared log before this node's
/// sequencer has it (`last_event_seq` lags), and on one node a commit is
/// readable just before its broadcast. `last_event_seq` counts only seqs
/// the log has used (committed, pruned, or left by a failed write), so a
/// cursor at or below it passes without a read; one past it passes only
/// if the store holds an event at or after it, as every committed event
/// another reader could have handed the client is. No margin: a margin
/// would let a foreign cursor just past the end through.
async fn within_log(engine: &Engine, after: u64, named: &str) -> Result<(), ApiError> {
    let known = engine.last_event_seq();
    if after <= known || !engine.events_after(after - 1, 1).await?.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{named} {after} is past the end of the event log (last seq {known}): a cursor \
         from another store or a reset database; read from 0, or from `event_seq` of \
         GET /v1/status"
    )))
}

async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    caller.check(&state, Verb::ReadTask)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut records = state.engine.audit_records(query.task_id, limit).await?;
    // A session reads the records of its own tasks among them.
    let reader = Reader::of(&caller);
    records.retain(|record| reader.sees(record.session));
    Ok(Json(AuditPage { records }))
}

/// Follows the event log from a sequence number, sending only what `scope`
/// wants (the cursor still steps over the others, and the client hears
/// how far as a progress id), and counting the new tasks `tick` asks for.
#[derive(Debug)]
struct EventFollow {
    engine: Engine,
    cursor: u64,
    /// The highest seq the client got: sent, or reported by a progress id.
    reported: u64,
    page: usize,
    scope: Scope,
    tick: Option<Tick>,
    /// When the stream ends with the reader's credential.
    end: sse::StreamEnd,
}

impl EventFollow {
    /// Steps the cursor over `record`; whether the reader gets it.
    fn step(&mut self, record: &EventRecord) -> bool {
        self.cursor = self.cursor.max(record.seq);
        if let Some(tick) = &mut self.tick
            && self.scope.owned(record)
        {
            tick.count(record);
        }
        let wanted = self.scope.wants(record);
        if wanted {
            self.reported = record.seq;
        }
        wanted
    }
}

impl Follow for EventFollow {
    type Item = EventRecord;

    async fn fill(&mut self, out: &mut VecDeque<EventRecord>) -> Result<bool, EngineError> {
        let events = self.engine.events_after(self.cursor, self.page).await?;
        let full = events.len() >= self.page;
        for event in events {
            if self.step(&event) {
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
        if self.step(record) {
            Live::Send(record.clone())
        } else {
            Live::Skip
        }
    }

    fn progress_id(&mut self) -> Option<String> {
        // New tasks counted and not yet ticked: the tick carries the id, so
        // a client resuming in between counts them again.
        if self.tick.as_ref().is_some_and(|t| t.created > 0) {
            return None;
        }
        (self.cursor > self.reported).then(|| {
            self.reported = self.cursor;
            self.cursor.to_string()
        })
    }

    fn tick_every(&self) -> Option<std::time::Duration> {
        self.tick.as_ref().map(|t| t.every)
    }

    fn tick_pending(&self) -> bool {
        self.tick.as_ref().is_some_and(|t| t.created > 0)
    }

    fn tick(&mut self) -> Option<SseEvent> {
        let tick = self.tick.as_mut().filter(|t| t.created > 0)?;
        let created = std::mem::take(&mut tick.created);
        self.reported = self.cursor;
        let data = serde_json::json!({ "seq": self.cursor, "created": created });
        Some(
            SseEvent::default()
                .id(self.cursor.to_string())
                .event("tick")
                .data(data.to_string()),
        )
    }

    fn may_end(&self) -> bool {
        self.end.may_end()
    }

    fn ended(&self) -> bool {
        self.end.ended()
    }

    fn render(&self, item: EventRecord) -> SseEvent {
        SseEvent::default()
            .id(item.seq.to_string())
            .event(item.event.kind())
            .json_data(&item)
            .unwrap_or_else(|_| SseEvent::default().comment("unencodable event"))
    }
}
