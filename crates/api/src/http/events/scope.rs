//! Which events a `/v1/events` reader gets (`kinds`, `tasks`, an operator
//! session's own part) and the coalesced `tick` of new tasks a stream may
//! add (`tick_ms`, `tick_agent`, `tick_session`, `tick_parent`), parsed
//! and bounded here.

use std::time::Duration;

use swarmd_engine::event::{Event, EventRecord};
use swarmd_engine::ids::{SessionId, TaskId};

use crate::http::error::ApiError;
use crate::http::views::Reader;

/// At most this many ids in `tasks=`.
pub(crate) const MAX_TASKS: usize = 100;
/// The shortest tick interval a client may ask for.
pub(crate) const TICK_MIN: Duration = Duration::from_millis(250);
/// The longest tick interval a client may ask for.
pub(crate) const TICK_MAX: Duration = Duration::from_secs(60);
/// The longest `tick_agent`, in bytes.
const MAX_AGENT_LEN: usize = 256;

/// Which events a reader gets: only `kinds` when set, only the events of
/// `tasks` when set, and only the records in the `reader`'s part
/// (`views::Reader`, the rule every task read follows): for an operator
/// session the records that name it, its tasks' events (a record carries
/// the session that owns its task; sub-tasks inherit it) and its own
/// `session_attached`/`session_detached`. Every condition narrows; none
/// widens another. One comparison per condition and record, no read.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) kinds: Option<Vec<&'static str>>,
    pub(crate) reader: Reader,
    /// Sorted, without repeats, at most `MAX_TASKS`.
    pub(crate) tasks: Option<Vec<TaskId>>,
}

impl Scope {
    pub(crate) fn wants(&self, record: &EventRecord) -> bool {
        self.owned(record)
            && self
                .kinds
                .as_ref()
                .is_none_or(|kinds| kinds.contains(&record.event.kind()))
            && self.tasks.as_ref().is_none_or(|tasks| {
                record
                    .event
                    .task_id()
                    .is_some_and(|id| tasks.binary_search(&id).is_ok())
            })
    }

    /// Whether the record is in the caller's part of the log.
    pub(crate) fn owned(&self, record: &EventRecord) -> bool {
        self.reader.sees(record.session)
    }
}

/// `kinds=a,b`: each a known event kind, at most one of each.
pub(crate) fn parse_kinds(text: &str) -> Result<Vec<&'static str>, ApiError> {
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

/// `tasks=T-…,T-…`: task ids, at most `MAX_TASKS` once repeats are
/// dropped; returned sorted for a binary search per record. (An empty
/// `tasks=` is absent, as every empty query parameter is.)
pub(crate) fn parse_tasks(text: &str) -> Result<Vec<TaskId>, ApiError> {
    let mut tasks = Vec::new();
    for item in text.split(',').map(str::trim) {
        let id = item.parse::<TaskId>().map_err(|error| {
            ApiError::bad_request(format!("tasks: {:?} is not a task id: {error}", clip(item)))
        })?;
        tasks.push(id);
        if tasks.len() > MAX_TASKS * 2 {
            break;
        }
    }
    tasks.sort_unstable();
    tasks.dedup();
    if tasks.len() > MAX_TASKS {
        return Err(ApiError::bad_request(format!(
            "tasks names more than {MAX_TASKS} tasks"
        )));
    }
    Ok(tasks)
}

/// The first characters of a bad item, for an error message.
fn clip(item: &str) -> String {
    item.chars().take(40).collect()
}

/// The `tick_*` parameters as given.
#[derive(Debug, Default)]
pub(crate) struct TickQuery {
    pub(crate) ms: Option<u64>,
    pub agent: Option<String>,
    pub(crate) session: Option<SessionId>,
    pub(crate) parent: Option<TaskId>,
}

/// A coalesced count of new tasks: the `task_created` records in the
/// reader's part of the log that match `agent`, `session` and `parent`
/// (each when set), counted as the stream steps over them and sent at
/// most once per `every` as one `tick` frame.
#[derive(Debug)]
pub(crate) struct Tick {
    pub(crate) every: Duration,
    agent: Option<String>,
    session: Option<SessionId>,
    parent: Option<TaskId>,
    /// New tasks counted since the last tick.
    pub(crate) created: u64,
}

impl Tick {
    /// Validates the `tick_*` parameters: `None` without `tick_ms`; a
    /// filter without `tick_ms`, or an interval out of bounds, is a 400.
    pub(crate) fn parse(query: TickQuery) -> Result<Option<Tick>, ApiError> {
        let Some(ms) = query.ms else {
            if query.agent.is_some() || query.session.is_some() || query.parent.is_some() {
                return Err(ApiError::bad_request(
                    "tick_agent, tick_session and tick_parent need tick_ms",
                ));
            }
            return Ok(None);
        };
        let every = Duration::from_millis(ms);
        if !(TICK_MIN..=TICK_MAX).contains(&every) {
            return Err(ApiError::bad_request(format!(
                "tick_ms must be from {} to {}",
                TICK_MIN.as_millis(),
                TICK_MAX.as_millis()
            )));
        }
        if query
            .agent
            .as_ref()
            .is_some_and(|a| a.len() > MAX_AGENT_LEN)
        {
            return Err(ApiError::bad_request(format!(
                "tick_agent is longer than {MAX_AGENT_LEN} bytes"
            )));
        }
        Ok(Some(Tick {
            every,
            agent: query.agent,
            session: query.session,
            parent: query.parent,
            created: 0,
        }))
    }

    /// Counts `record` when it is a matching new task (the caller has
    /// checked it is in the reader's part of the log).
    pub(crate) fn count(&mut self, record: &EventRecord) {
        let Event::TaskCreated { agent, parent, .. } = &record.event else {
            return;
        };
        if self.agent.as_ref().is_none_or(|a| a == agent)
            && self.session.is_none_or(|s| record.session == Some(s))
            && self.parent.is_none_or(|p| *parent == Some(p))
        {
            self.created += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_engine::ErrorCode;
    use swarmd_engine::task::TaskStatus;

    fn record(session: Option<SessionId>, event: Event) -> EventRecord {
        EventRecord {
            seq: 1,
            ts_ms: 0,
            session,
            event,
        }
    }

    fn created(agent: &str, parent: Option<TaskId>) -> Event {
        Event::TaskCreated {
            task_id: TaskId::new(),
            agent: agent.into(),
            parent,
        }
    }

    #[test]
    fn tasks_parse_sorted_without_repeats_and_bounded() {
        let a = TaskId::new();
        let b = TaskId::new();
        let parsed = parse_tasks(&format!("{b}, {a},{b}")).unwrap();
        let mut expected = vec![a, b];
        expected.sort();
        assert_eq!(parsed, expected);

        let hundred: Vec<String> = (0..MAX_TASKS).map(|_| TaskId::new().to_string()).collect();
        assert_eq!(parse_tasks(&hundred.join(",")).unwrap().len(), MAX_TASKS);
        // Repeats do not count against the bound.
        let repeated = format!("{},{}", hundred.join(","), hundred[0]);
        assert_eq!(parse_tasks(&repeated).unwrap().len(), MAX_TASKS);

        let too_many = format!("{},{}", hundred.join(","), TaskId::new());
        let error = parse_tasks(&too_many).unwrap_err();
        assert_eq!(error.status(), 400);
        assert_eq!(error.code(), ErrorCode::BadRequest);
        assert!(error.message().contains("more than 100"), "{error:?}");
        // A very long list stops being parsed early and is refused.
        let huge: Vec<String> = (0..5000).map(|_| TaskId::new().to_string()).collect();
        assert_eq!(parse_tasks(&huge.join(",")).unwrap_err().status(), 400);
    }

    #[test]
    fn a_bad_task_id_is_a_400_naming_it() {
        for bad in ["", "T-1", "S-0123456789abcdef0123456789abcdef", "x,,y", ","] {
            let error = parse_tasks(bad).unwrap_err();
            assert_eq!(error.status(), 400, "{bad}");
            assert!(error.message().starts_with("tasks: "), "{error:?}");
        }
        let error = parse_tasks(&format!("{},nope", TaskId::new())).unwrap_err();
        assert!(error.message().contains("\"nope\""), "{error:?}");
    }

    #[test]
    fn tasks_narrow_and_never_widen_the_owner_scope() {
        let mine = SessionId::new();
        let theirs = SessionId::new();
        let task = TaskId::new();
        let other = TaskId::new();
        let scope = Scope {
            kinds: Some(vec!["task_finished"]),
            reader: Reader::session(mine),
            tasks: Some(vec![task]),
        };
        let finished = |task_id| Event::TaskFinished {
            task_id,
            attempt: 1,
            status: TaskStatus::Pass,
            result: None,
        };
        assert!(scope.wants(&record(Some(mine), finished(task))));
        // Another task, another kind, another session, no task at all.
        assert!(!scope.wants(&record(Some(mine), finished(other))));
        assert!(!scope.wants(&record(Some(mine), Event::TaskQueued { task_id: task })));
        assert!(!scope.wants(&record(Some(theirs), finished(task))));
        assert!(!scope.wants(&record(None, finished(task))));
        let attached = Scope {
            kinds: None,
            reader: Reader::of(&crate::http::auth::Caller::Admin),
            tasks: Some(vec![task]),
        };
        assert!(!attached.wants(&record(None, Event::SessionAttached { sid: mine })));
    }

    #[test]
    fn tick_bounds_its_interval_and_needs_it_for_filters() {
        assert!(Tick::parse(TickQuery::default()).unwrap().is_none());
        for ms in [0, 249, 60_001, u64::MAX] {
            let error = Tick::parse(TickQuery {
                ms: Some(ms),
                ..TickQuery::default()
            })
            .unwrap_err();
            assert_eq!(error.status(), 400, "{ms}");
        }
        for ms in [250, 1000, 60_000] {
            let tick = Tick::parse(TickQuery {
                ms: Some(ms),
                ..TickQuery::default()
            })
            .unwrap()
            .unwrap();
            assert_eq!(tick.every, Duration::from_millis(ms));
        }
        let error = Tick::parse(TickQuery {
            agent: Some("coder".into()),
            ..TickQuery::default()
        })
        .unwrap_err();
        assert!(error.message().contains("need tick_ms"), "{error:?}");
        let error = Tick::parse(TickQuery {
            ms: Some(1000),
            agent: Some("a".repeat(MAX_AGENT_LEN + 1)),
            ..TickQuery::default()
        })
        .unwrap_err();
        assert_eq!(error.status(), 400);
    }

    #[test]
    fn tick_counts_only_matching_new_tasks() {
        let sid = SessionId::new();
        let parent = TaskId::new();
        let mut tick = Tick::parse(TickQuery {
            ms: Some(1000),
            agent: Some("coder".into()),
            session: Some(sid),
            parent: Some(parent),
        })
        .unwrap()
        .unwrap();
        tick.count(&record(Some(sid), created("coder", Some(parent))));
        tick.count(&record(Some(sid), created("other", Some(parent))));
        tick.count(&record(None, created("coder", Some(parent))));
        tick.count(&record(Some(sid), created("coder", None)));
        tick.count(&record(
            Some(sid),
            Event::TaskQueued {
                task_id: TaskId::new(),
            },
        ));
        assert_eq!(tick.created, 1);
        let mut any = Tick::parse(TickQuery {
            ms: Some(250),
            ..TickQuery::default()
        })
        .unwrap()
        .unwrap();
        any.count(&record(None, created("x", None)));
        any.count(&record(Some(sid), created("y", Some(parent))));
        assert_eq!(any.created, 2);
    }
}
