//! `GET /v1/tasks/{id}/output` (docs/protocol.md, Output routes): a task's output records as a JSON
//! page, or with `Accept: text/event-stream` as a live SSE stream.
//!
//! With `?attempt=A` the route covers that attempt and event ids are its
//! sequence numbers; without it, every attempt in order, with ids
//! `<attempt>:<seq>`. The cursor is "strictly after": `Last-Event-ID` wins
//! over `after_seq`. A seq is one attempt's, so a cursor names its attempt:
//! `after_seq` needs `attempt`, and without `attempt` `Last-Event-ID` is
//! `<attempt>:<seq>`; a bare seq there is refused (`400`) rather than read
//! as the current attempt's, which a retry may change between two pages.
//! The stream sends the stored records first, then live ones, and ends once
//! the attempt (or the whole task) is finished and everything stored has
//! been sent. A task outside the caller's part (`views::Reader`) is unknown.

use std::collections::VecDeque;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use swarmd_engine::event::{Event, EventRecord};
use swarmd_engine::gate::Verb;
use swarmd_engine::ids::TaskId;
use swarmd_engine::{EngineError, ErrorCode};

use super::views::{Reader, TaskView};
use swarmd_output_store::{OutputEvent, OutputRecord, OutputStore};

use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Json, Path, Query, empty_as_none};
use crate::http::sse::{self, Follow, Wake, last_event_id, wants_sse};

const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 10_000;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/tasks/{id}/output", get(output))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputQuery {
    #[serde(default, deserialize_with = "empty_as_none")]
    attempt: Option<u32>,
    #[serde(default, deserialize_with = "empty_as_none")]
    after_seq: Option<u64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    limit: Option<usize>,
}

/// One output record as served (the task id is the route's).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutputItem {
    pub attempt: u32,
    pub seq: u64,
    pub ts_ms: u64,
    pub producer: String,
    pub event: OutputEvent,
}

impl From<OutputRecord> for OutputItem {
    fn from(r: OutputRecord) -> Self {
        OutputItem {
            attempt: r.attempt,
            seq: r.seq,
            ts_ms: r.ts_ms,
            producer: r.producer,
            event: r.event,
        }
    }
}

/// The JSON page.
#[derive(Debug, Serialize)]
pub struct OutputPage {
    pub(crate) task_id: TaskId,
    pub(crate) records: Vec<OutputItem>,
    /// The id of the last record (resume with `Last-Event-ID`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next: Option<String>,
    /// Whether more records may follow right now.
    pub(crate) more: bool,
}

async fn output(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<TaskId>,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.check(&state, Verb::ReadOutput)?;
    let live = wants_sse(&headers);
    let slot = match live {
        true => {
            caller.check(&state, Verb::Subscribe)?;
            match state.guards.open_stream(caller.stream_key()) {
                Ok(slot) => Some(slot),
                Err(refused) => return Ok(refused.into_response()),
            }
        }
        false => None,
    };
    // Subscribed before the task is read, so nothing published in between is lost.
    let rx = live.then(|| (state.engine.follow(), state.engine.subscribe()));
    let view = TaskView::read(&state.engine, Reader::of(&caller), id)
        .await?
        .ok_or_else(|| crate::http::tasks::unknown(id))?;
    if let (Some(rx), Some(slot)) = (rx, slot) {
        let cursor = start_cursor(
            &view,
            query.attempt,
            query.after_seq,
            last_event_id(&headers),
        )?;
        let follow = OutputFollow {
            outputs: state.engine.outputs().clone(),
            task: id,
            only: query.attempt,
            cursor,
            page: sse::PAGE,
            end: sse::StreamEnd::of(&caller),
        };
        let finished = source_finished(&view, query.attempt);
        return Ok(sse::stream(
            follow,
            rx,
            (state.shutdown.clone(), slot),
            finished,
        ));
    }
    let cursor = PageCursor {
        attempt: query.attempt,
        after_seq: query.after_seq,
        last_id: last_event_id(&headers),
        limit: query.limit.unwrap_or(DEFAULT_LIMIT),
    };
    Ok(Json(page(&state, &view, cursor).await?).into_response())
}

/// Where a JSON page starts and how long it is (the route's query).
#[derive(Debug)]
pub struct PageCursor<'a> {
    pub attempt: Option<u32>,
    pub after_seq: Option<u64>,
    pub last_id: Option<&'a str>,
    /// Clamped to 1–10 000.
    pub limit: usize,
}

/// One JSON page of a task's output records after a cursor; the caller has
/// been checked for `read_output`.
pub async fn page(
    state: &AppState,
    view: &TaskView,
    cursor: PageCursor<'_>,
) -> Result<OutputPage, ApiError> {
    let id = view.task.id;
    let start = start_cursor(view, cursor.attempt, cursor.after_seq, cursor.last_id)?;
    let mut follow = OutputFollow {
        outputs: state.engine.outputs().clone(),
        task: id,
        only: cursor.attempt,
        cursor: start,
        page: cursor.limit.clamp(1, MAX_LIMIT),
        end: sse::StreamEnd::default(),
    };
    let mut records = VecDeque::new();
    let more = follow.fill(&mut records).await?;
    let next = records.back().map(|r| follow.id_of(r));
    Ok(OutputPage {
        task_id: id,
        records: records.into(),
        next,
        more,
    })
}

/// Where reading starts: the last (attempt, seq) already seen.
fn start_cursor(
    view: &TaskView,
    only: Option<u32>,
    after_seq: Option<u64>,
    last_id: Option<&str>,
) -> Result<(u32, u64), ApiError> {
    let current = view.task.attempt;
    // A task that ended has all the attempts it will ever have.
    if let Some(a) = only
        && view.task.status().is_terminal()
        && (a == 0 || a > current)
    {
        return Err(ApiError::coded(
            ErrorCode::NotFound,
            format!(
                "task {} ended after {current} attempt(s): it has no attempt {a}",
                view.task.id
            ),
        ));
    }
    if only.is_none() && after_seq.is_some() {
        return Err(ApiError::bad_request(
            "after_seq needs `attempt` (a seq is one attempt's): name the attempt, or \
             resume every attempt with Last-Event-ID `<attempt>:<seq>` (a page's `next`)",
        ));
    }
    let bad = || ApiError::bad_request("Last-Event-ID must be `<seq>` or `<attempt>:<seq>`");
    let from_id = match last_id {
        None => None,
        Some(text) => Some(match (text.split_once(':'), only) {
            (Some((a, s)), _) => (
                a.parse::<u32>().map_err(|_| bad())?,
                s.parse::<u64>().map_err(|_| bad())?,
            ),
            (None, Some(a)) => (a, text.parse::<u64>().map_err(|_| bad())?),
            (None, None) => {
                return Err(ApiError::bad_request(
                    "Last-Event-ID without `attempt` must be `<attempt>:<seq>`: a seq is one attempt's",
                ));
            }
        }),
    };
    match (only, from_id) {
        (Some(a), Some((b, _))) if a != b => Err(ApiError::bad_request(
            "Last-Event-ID names another attempt than `attempt`",
        )),
        (_, Some(cursor)) => Ok(cursor),
        (Some(a), None) => Ok((a, after_seq.unwrap_or(0))),
        (None, None) => Ok((0, 0)),
    }
}

/// Whether nothing can be appended any more to what the route covers.
fn source_finished(view: &TaskView, only: Option<u32>) -> bool {
    if view.task.status().is_terminal() {
        return true;
    }
    match only {
        None => false,
        Some(a) => {
            view.task.attempt > a
                || view
                    .attempts
                    .iter()
                    .any(|r| r.attempt == a && r.outcome.is_some())
        }
    }
}

/// Reads one task's output streams from a cursor.
#[derive(Debug)]
struct OutputFollow {
    outputs: std::sync::Arc<dyn OutputStore>,
    task: TaskId,
    only: Option<u32>,
    cursor: (u32, u64),
    page: usize,
    /// When the stream ends with the reader's credential.
    end: sse::StreamEnd,
}

impl OutputFollow {
    fn id_of(&self, item: &OutputItem) -> String {
        match self.only {
            Some(_) => item.seq.to_string(),
            None => format!("{}:{}", item.attempt, item.seq),
        }
    }
}

impl Follow for OutputFollow {
    type Item = OutputItem;

    async fn fill(&mut self, out: &mut VecDeque<OutputItem>) -> Result<bool, EngineError> {
        let task = self.task.as_uuid();
        let attempts = match self.only {
            Some(a) => vec![a],
            None => self.outputs.list_attempts(task).await?,
        };
        let mut room = self.page;
        let first = self.cursor.0;
        for attempt in attempts.into_iter().filter(|a| *a >= first) {
            let after = if attempt == self.cursor.0 {
                self.cursor.1
            } else {
                0
            };
            let records = self.outputs.tail(task, attempt, after, room).await?;
            for record in records {
                self.cursor = (attempt, record.seq);
                room = room.saturating_sub(1);
                out.push_back(record.into());
            }
            if room == 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn wake(&self, record: &EventRecord) -> Wake {
        match &record.event {
            Event::Output {
                task_id, attempt, ..
            } if *task_id == self.task && self.only.is_none_or(|a| a == *attempt) => Wake::Behind,
            Event::AttemptFinished {
                task_id, attempt, ..
            } if *task_id == self.task && self.only == Some(*attempt) => Wake::Finished,
            Event::TaskFinished { task_id, .. } if *task_id == self.task => Wake::Finished,
            _ => Wake::Ignore,
        }
    }

    fn may_end(&self) -> bool {
        self.end.may_end()
    }

    fn ended(&self) -> bool {
        self.end.ended()
    }

    fn render(&self, item: OutputItem) -> SseEvent {
        let id = self.id_of(&item);
        SseEvent::default()
            .id(id)
            .event("output")
            .json_data(&item)
            .unwrap_or_else(|_| SseEvent::default().comment("unencodable record"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_engine::task::{Policy, Task, TaskSpec};

    fn view(attempt: u32) -> TaskView {
        let mut task = Task::new(TaskId::new(), TaskSpec::default(), Policy::default(), 0, 1);
        for _ in 0..attempt {
            task.start_attempt(2).unwrap();
            task.requeue(3).unwrap();
        }
        TaskView {
            task,
            attempts: Vec::new(),
        }
    }

    #[test]
    fn cursor_forms() {
        let v = view(2);
        assert_eq!(start_cursor(&v, None, None, None).unwrap(), (0, 0));
        assert_eq!(start_cursor(&v, Some(1), Some(4), None).unwrap(), (1, 4));
        assert_eq!(start_cursor(&v, Some(2), None, None).unwrap(), (2, 0));
        assert_eq!(
            start_cursor(&v, Some(1), Some(4), Some("9")).unwrap(),
            (1, 9)
        );
        assert_eq!(start_cursor(&v, None, None, Some("1:9")).unwrap(), (1, 9));
        assert_eq!(start_cursor(&v, None, None, Some("2:9")).unwrap(), (2, 9));
        assert!(start_cursor(&v, Some(2), None, Some("1:9")).is_err());
        assert!(start_cursor(&v, None, None, Some("x:1")).is_err());
    }

    /// A seq names no attempt: without `attempt` it is refused, whether
    /// as `after_seq` or as a bare `Last-Event-ID`, rather than read as
    /// the current attempt's (a retry between two pages would skip the
    /// rest of the earlier attempt).
    #[test]
    fn a_seq_without_its_attempt_is_refused() {
        for current in [1, 2] {
            let v = view(current);
            let error = start_cursor(&v, None, Some(4), None).unwrap_err();
            assert_eq!(error.code(), ErrorCode::BadRequest);
            assert!(error.message().contains("attempt"), "{error:?}");
            let error = start_cursor(&v, None, None, Some("9")).unwrap_err();
            assert_eq!(error.code(), ErrorCode::BadRequest);
            assert!(error.message().contains("<attempt>:<seq>"), "{error:?}");
            // Refused even beside a Last-Event-ID that names the attempt:
            // the query itself asks for something that has no meaning.
            assert!(start_cursor(&v, None, Some(4), Some("1:9")).is_err());
        }
    }

    #[test]
    fn finished_sources() {
        let v = view(2);
        assert!(!source_finished(&v, None));
        assert!(source_finished(&v, Some(1)));
        assert!(!source_finished(&v, Some(2)));
        assert!(!source_finished(&v, Some(3)));
    }
}
