//! Owner resolution (docs/decisions.md, Cluster): which live task a request
//! is about, and whether this node serves it, forwards it to the node that
//! holds the task, or answers `503 owner_unavailable`.
//!
//! A request is about a live task when it is a worker route (by its
//! credential: a `swc1` token's claims, read without verifying, or a `wh-`
//! handle), a sub-task created with a worker credential (`POST /v1/tasks`),
//! or a cancel naming the task in its path. A task this node holds, a
//! finished or unknown task, and every other request are served here; only
//! a live task another node holds is forwarded. A wait is served here too:
//! the engine waits on the bus for the `task_finished` every node's events
//! bring (`Engine::wait_task`), so it outlives a dead owner's takeover.

use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method};
use swarmd_engine::Engine;
use swarmd_engine::auth::token::peek_binding;
use swarmd_engine::auth::{WorkerHandle, looks_like_handle};
use swarmd_engine::ids::TaskId;
use swarmd_postgres::{NodeId, OwnerKey, TaskOwner};

/// What names the task a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// Named by id: the path's `{id}`, or a token's claims.
    Task(TaskId),
    /// Named by a `wh-` handle (the bearer).
    Handle(String),
}

/// Where a request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Local,
    Forward(TaskOwner),
    /// `503 owner_unavailable`, and why.
    Unavailable(&'static str),
}

/// The live task `method path` with `headers` is about, if the request is
/// one a node forwards.
pub(crate) fn subject(method: &Method, path: &str, headers: &HeaderMap) -> Option<Subject> {
    if path.starts_with("/v1/worker/") || (method == Method::POST && path == "/v1/tasks") {
        return credential(headers);
    }
    let id = path.strip_prefix("/v1/tasks/")?.strip_suffix("/cancel")?;
    (method == Method::POST)
        .then(|| id.parse().ok().map(Subject::Task))
        .flatten()
}

/// The task the worker credential of `Authorization` is bound to.
fn credential(headers: &HeaderMap) -> Option<Subject> {
    let text = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let bearer = text
        .strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))?
        .trim();
    worker_subject(bearer)
}

/// The task a worker credential is bound to; `None` for other bearers
/// (which `POST /v1/tasks` serves here) and for malformed ones (refused here).
pub(crate) fn worker_subject(bearer: &str) -> Option<Subject> {
    if looks_like_handle(bearer) {
        return Some(Subject::Handle(bearer.to_owned()));
    }
    peek_binding(bearer).map(|(task, _)| Subject::Task(task))
}

/// What to look the owner up by; `None` when this node holds the task (or
/// the handle cannot be one), so the request is served here at no cost.
pub(crate) fn remote_key(engine: &Engine, subject: &Subject) -> Option<OwnerKey> {
    match subject {
        Subject::Task(id) => (!engine.holds_task(*id)).then_some(OwnerKey::Task(*id)),
        Subject::Handle(bearer) => {
            if engine.handle_task(bearer).is_some() {
                return None;
            }
            let handle = WorkerHandle::parse(bearer).ok()?;
            Some(OwnerKey::Handle(handle.digest()))
        }
    }
}

/// The rule, given the owner the database names for a task this node does
/// not hold. A request that was forwarded once is never forwarded again.
pub(crate) fn decide(owner: Option<TaskOwner>, me: NodeId, forwarded: bool) -> Route {
    match owner {
        // Finished, unknown, or owned by no node: the store answers.
        None => Route::Local,
        // Ours in the database but not in memory yet: a takeover loads it.
        Some(owner) if owner.node == me => {
            Route::Unavailable("this node is taking the task over; retry")
        }
        Some(owner) if !owner.alive => Route::Unavailable(
            "the node that held the task is gone; a survivor is taking it over; retry",
        ),
        Some(_) if forwarded => Route::Unavailable(
            "the request was already forwarded once and this node does not hold the task; retry",
        ),
        Some(owner) => Route::Forward(owner),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use uuid::Uuid;

    use super::*;

    const TASK: &str = "T-0190f5a2c3d400000000000000000000";

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {value}")).unwrap(),
        );
        headers
    }

    #[test]
    fn cancel_is_routed_by_its_path() {
        let task: TaskId = TASK.parse().unwrap();
        let none = HeaderMap::new();
        let cancel = format!("/v1/tasks/{TASK}/cancel");
        assert_eq!(
            subject(&Method::POST, &cancel, &none),
            Some(Subject::Task(task))
        );
        // Other verbs, waits and reads of a task are served where they arrive.
        assert_eq!(subject(&Method::GET, &cancel, &none), None);
        assert_eq!(
            subject(&Method::GET, &format!("/v1/tasks/{TASK}/wait"), &none),
            None
        );
        assert_eq!(
            subject(&Method::POST, "/v1/tasks/T-nope/cancel", &none),
            None
        );
        assert_eq!(
            subject(&Method::GET, &format!("/v1/tasks/{TASK}"), &none),
            None
        );
        assert_eq!(subject(&Method::GET, "/v1/events", &none), None);
    }

    #[test]
    fn worker_routes_are_routed_by_their_credential() {
        let handle = bearer("wh-abc");
        assert_eq!(
            subject(&Method::POST, "/v1/worker/output", &handle),
            Some(Subject::Handle("wh-abc".into()))
        );
        assert_eq!(
            subject(&Method::POST, "/v1/tasks", &handle),
            Some(Subject::Handle("wh-abc".into()))
        );
        // An operator's secret creates its tasks on the node it reached.
        let secret = bearer(&format!("sws-{}", "0".repeat(64)));
        assert_eq!(subject(&Method::POST, "/v1/tasks", &secret), None);
        assert_eq!(
            subject(&Method::GET, "/v1/worker/prompt", &HeaderMap::new()),
            None
        );
        assert_eq!(subject(&Method::POST, "/v1/worker/output", &secret), None);
    }

    fn owner(node: NodeId, alive: bool) -> TaskOwner {
        TaskOwner {
            task: TASK.parse().unwrap(),
            node,
            advertise_url: "http://127.0.0.1:1".into(),
            alive,
        }
    }

    #[test]
    fn only_a_live_peer_that_was_not_asked_already_is_forwarded_to() {
        let me = Uuid::new_v4();
        let peer = Uuid::new_v4();
        assert_eq!(decide(None, me, false), Route::Local);
        assert_eq!(decide(None, me, true), Route::Local);
        assert_eq!(
            decide(Some(owner(peer, true)), me, false),
            Route::Forward(owner(peer, true))
        );
        for (owner, forwarded) in [
            (owner(peer, true), true),
            (owner(peer, false), false),
            (owner(me, true), false),
        ] {
            assert!(
                matches!(
                    decide(Some(owner.clone()), me, forwarded),
                    Route::Unavailable(_)
                ),
                "{owner:?} forwarded={forwarded}"
            );
        }
    }
}
