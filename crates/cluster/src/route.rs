//! Owner resolution (docs/decisions.md, Cluster): which live task a request
//! is about, and whether this node serves it, forwards it to the node that
//! holds the task, or answers `503 owner_unavailable`.
//!
//! Only the exact routes of `FORWARDED_ROUTES` are forwarded, matched by
//! the router's route template on the path as it arrived: a path that
//! only names a route once normalised (`/v1/worker/%2e%2e/tasks`,
//! `/v1/worker/./prompt`) matches no template and is answered here, and a
//! forwardable route whose path is not the one the task id spells
//! (`/v1/tasks/%54-…/cancel`) is refused with 400. A forwarded request
//! goes out on the path rebuilt from its template, never the path that
//! arrived.
//!
//! A request is about a live task when it is a worker route (by its
//! credential: a `swc1` token whose signature and lifetime this node
//! verified, or a `wh-` handle), a sub-task created with a worker
//! credential (`POST /v1/tasks`), or a cancel naming the task in its path
//! (by an admin or session credential this node verified). A credential
//! this node cannot verify is never the reason for a lookup: the request is
//! served, and refused, here. A handle is a random secret known by its
//! digest alone, so the one indexed read that finds its owner is the same
//! read that verifies it (as `learn_handle` does for the local routes).
//! A task this node holds, a finished or unknown task, and every other
//! request are served here; only a live task another node holds is
//! forwarded. A wait is served here too: the engine waits on the bus for
//! the `task_finished` every node's events bring (`Engine::wait_task`), so
//! it outlives a dead owner's takeover.
//!
//! A worker pool's claim and heartbeat are about a node rather than a task:
//! a pool that reaches the cluster through one URL (a load balancer, or
//! one node) names the node whose queue it means in `x-swarmd-node`, and
//! once its `worker_pool` token verified here the request goes to that
//! node. Without the header they are served where they arrive.

use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use swarmd_engine::Engine;
use swarmd_engine::auth::{WorkerHandle, looks_like_handle, looks_like_token};
use swarmd_engine::ids::{RunId, TaskId};
use swarmd_postgres::{NodeId, OwnerKey, TaskOwner};

/// What names the task a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Named by id: the path's `{id}` of a request whose credential was
    /// verified.
    Task(TaskId),
    /// Named by a `swc1` token's claims, once this node verified it.
    Token(String),
    /// Named by a `wh-` handle (the bearer).
    Handle(String),
    /// An open flow run, named by the path's `{id}` (a cancel or a wait's
    /// answer).
    Run(RunId),
    /// A node's queue of remote attempts, named by a pool's [`NODE`]
    /// header once its token verified.
    Node(NodeId),
}

/// The header in which a worker pool names the node whose remote attempts
/// it claims or heartbeats (its id, as `GET /v1/pool/nodes` lists it).
pub const NODE: &str = "x-swarmd-node";

/// Where a request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Forward(TaskOwner),
    /// `503 owner_unavailable`, and why.
    Unavailable(&'static str),
    /// `404 not_found`: no node of the cluster has the id a pool named.
    NoSuchNode,
}

/// How a forwardable route names its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// By the worker credential of `Authorization`.
    Credential,
    /// By the `{id}` of the path; the caller is an admin or a session.
    PathId,
    /// A flow run by the `{id}` of `/v1/runs/{id}/…`; the caller is an
    /// admin or a session, or (answering a wait) the bearer of a wait
    /// token, which only the run's owner can check.
    RunPathId,
    /// A node by the pool's [`NODE`] header; the caller is a worker pool.
    NodeHeader,
}

/// Whose credential this node verifies before it looks an owner up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// None here: the credential names the task, or it is a wait token
    /// only the run's owner can check.
    Named,
    /// The admin token or a session's secret (a cancel).
    AdminOrSession,
    /// A `worker_pool` token.
    Pool,
}

/// The routes a node forwards: method, route template, how it names its
/// task. No other request ever leaves the node it reached.
const FORWARDED_ROUTES: [(Method, &str, Named); 11] = [
    (Method::GET, "/v1/worker/prompt", Named::Credential),
    (Method::POST, "/v1/worker/result", Named::Credential),
    (Method::POST, "/v1/worker/submit", Named::Credential),
    (Method::POST, "/v1/worker/output", Named::Credential),
    (Method::POST, "/v1/worker/heartbeat", Named::Credential),
    (Method::POST, "/v1/tasks", Named::Credential),
    (Method::POST, "/v1/tasks/{id}/cancel", Named::PathId),
    (Method::POST, "/v1/runs/{id}/cancel", Named::RunPathId),
    (Method::POST, "/v1/runs/{id}/waits/{wait}", Named::RunPathId),
    (Method::POST, "/v1/pool/claim", Named::NodeHeader),
    (Method::POST, "/v1/pool/heartbeat", Named::NodeHeader),
];

/// A request a node would forward if another node holds its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub subject: Subject,
    /// The path rebuilt from the route template: what goes to the owner.
    pub path: String,
    /// Whose credential must verify before the owner is looked up.
    pub caller: Caller,
}

/// Why a request to a forwardable route is refused outright.
pub const NOT_CANONICAL: &str =
    "the path must name its route exactly (no encoded characters or dot segments)";

/// Why a pool's request naming a node is refused outright.
pub const NOT_A_NODE: &str = "x-swarmd-node must be a node's id, as GET /v1/pool/nodes lists it";

/// The live task `method path` (matched to the route `template`) with
/// `headers` is about, if it is a request a node forwards; `Err` for a
/// forwardable route whose path is not the exact one it names.
pub fn asked(
    method: &Method,
    template: Option<&str>,
    path: &str,
    headers: &HeaderMap,
) -> Result<Option<Asked>, &'static str> {
    let Some(template) = template else {
        return Ok(None);
    };
    let Some((_, _, named)) = FORWARDED_ROUTES
        .iter()
        .find(|(m, t, _)| m == method && *t == template)
    else {
        return Ok(None);
    };
    match named {
        Named::Credential => {
            if path != template {
                return Err(NOT_CANONICAL);
            }
            Ok(credential(headers).map(|subject| Asked {
                subject,
                path: template.to_owned(),
                caller: Caller::Named,
            }))
        }
        Named::PathId => {
            let id = path
                .strip_prefix("/v1/tasks/")
                .and_then(|rest| rest.strip_suffix("/cancel"))
                .ok_or(NOT_CANONICAL)?;
            // An id that names no task is the route's own 400 to answer;
            // an encoded one (which the route would decode) is refused.
            let Ok(id) = id.parse::<TaskId>() else {
                return if id.contains('%') {
                    Err(NOT_CANONICAL)
                } else {
                    Ok(None)
                };
            };
            let canonical = format!("/v1/tasks/{id}/cancel");
            if canonical != path {
                return Err(NOT_CANONICAL);
            }
            Ok(Some(Asked {
                subject: Subject::Task(id),
                path: canonical,
                caller: Caller::AdminOrSession,
            }))
        }
        Named::RunPathId => {
            let rest = path.strip_prefix("/v1/runs/").ok_or(NOT_CANONICAL)?;
            let (id, tail) = rest.split_once('/').ok_or(NOT_CANONICAL)?;
            let Ok(id) = id.parse::<RunId>() else {
                return if id.contains('%') {
                    Err(NOT_CANONICAL)
                } else {
                    Ok(None)
                };
            };
            let well_formed = tail == "cancel"
                || tail.strip_prefix("waits/").is_some_and(|wait| {
                    !wait.is_empty() && !wait.contains('/') && wait != "." && wait != ".."
                });
            if !well_formed || format!("/v1/runs/{id}/{tail}") != path {
                return Err(NOT_CANONICAL);
            }
            let wait_token = tail != "cancel"
                && bearer(headers).is_some_and(|b| b.starts_with(swarmd_flow_run::token::PREFIX));
            Ok(Some(Asked {
                subject: Subject::Run(id),
                path: path.to_owned(),
                caller: if wait_token {
                    Caller::Named
                } else {
                    Caller::AdminOrSession
                },
            }))
        }
        Named::NodeHeader => {
            if path != template {
                return Err(NOT_CANONICAL);
            }
            let Some(named) = headers.get(NODE) else {
                return Ok(None);
            };
            let node = named
                .to_str()
                .ok()
                .and_then(|id| id.trim().parse::<NodeId>().ok())
                .ok_or(NOT_A_NODE)?;
            Ok(Some(Asked {
                subject: Subject::Node(node),
                path: template.to_owned(),
                caller: Caller::Pool,
            }))
        }
    }
}

/// The bearer of `Authorization`, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let text = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let bearer = text
        .strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))?;
    Some(bearer.trim())
}

/// The task the worker credential of `Authorization` may be bound to.
fn credential(headers: &HeaderMap) -> Option<Subject> {
    worker_subject(bearer(headers)?)
}

/// What a worker credential may name; `None` for other bearers (which
/// `POST /v1/tasks` serves here) and for malformed ones (refused here).
pub fn worker_subject(bearer: &str) -> Option<Subject> {
    if looks_like_handle(bearer) {
        return Some(Subject::Handle(bearer.to_owned()));
    }
    looks_like_token(bearer).then(|| Subject::Token(bearer.to_owned()))
}

/// What to look the owner up by; `None` when this node holds the task, or
/// the credential does not verify here (so the request is served, and
/// refused, here at no cost).
pub fn remote_key(engine: &Engine, subject: &Subject) -> Option<OwnerKey> {
    let task = match subject {
        Subject::Run(id) => return Some(OwnerKey::Run(*id)),
        Subject::Node(id) => return Some(OwnerKey::Node(*id)),
        Subject::Task(id) => *id,
        Subject::Token(bearer) => engine.tokens().verify(bearer).ok()?.task?,
        Subject::Handle(bearer) => {
            if engine.handle_task(bearer).is_some() {
                return None;
            }
            let handle = WorkerHandle::parse(bearer).ok()?;
            return Some(OwnerKey::Handle(handle.digest()));
        }
    };
    (!engine.holds_task(task)).then_some(OwnerKey::Task(task))
}

/// The rule, given the owner the database names for a task this node does
/// not hold. A request that was forwarded once is never forwarded again.
pub fn decide(owner: Option<TaskOwner>, me: NodeId, forwarded: bool) -> Route {
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
    use reqwest::header::HeaderValue;
    use uuid::Uuid;

    use super::*;

    const TASK: &str = "T-0190f5a2c3d400000000000000000000";

    fn bearer_map(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {value}")).unwrap(),
        );
        headers
    }

    fn asked_at(method: Method, template: &str, path: &str, headers: &HeaderMap) -> Option<Asked> {
        asked(&method, Some(template), path, headers).unwrap()
    }

    #[test]
    fn a_run_is_routed_by_its_path_and_a_wait_token_needs_no_caller() {
        const RUN: &str = "R-0190f5a2c3d400000000000000000000";
        let run: RunId = RUN.parse().unwrap();
        let none = HeaderMap::new();
        let cancel = format!("/v1/runs/{RUN}/cancel");
        let by_caller = asked_at(Method::POST, "/v1/runs/{id}/cancel", &cancel, &none).unwrap();
        assert_eq!(by_caller.subject, Subject::Run(run));
        assert_eq!(by_caller.caller, Caller::AdminOrSession);
        let answer = format!("/v1/runs/{RUN}/waits/ok");
        let template = "/v1/runs/{id}/waits/{wait}";
        let by_token = asked_at(Method::POST, template, &answer, &bearer_map("swt1.abc")).unwrap();
        assert_eq!(by_token.path, answer);
        assert_eq!(by_token.caller, Caller::Named);
        assert_eq!(
            asked_at(Method::POST, template, &answer, &none)
                .unwrap()
                .caller,
            Caller::AdminOrSession
        );
        // Reads of a run are served where they arrive; odd paths are refused.
        assert_eq!(
            asked_at(
                Method::GET,
                "/v1/runs/{id}",
                &format!("/v1/runs/{RUN}"),
                &none
            ),
            None
        );
        for bad in [
            format!("/v1/runs/{RUN}/waits/.."),
            "/v1/runs/R-%58/cancel".to_owned(),
        ] {
            let template = if bad.ends_with("cancel") {
                "/v1/runs/{id}/cancel"
            } else {
                template
            };
            assert!(
                asked(&Method::POST, Some(template), &bad, &none).is_err(),
                "{bad}"
            );
        }
        // An id no run has is the route's own bad request.
        for bad in [
            "/v1/runs/R-X/cancel".to_owned(),
            format!("/v1/runs/{}/cancel", RUN.to_uppercase()),
        ] {
            assert_eq!(
                asked(&Method::POST, Some("/v1/runs/{id}/cancel"), &bad, &none),
                Ok(None),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_cancel_is_routed_by_its_path_once_its_caller_is_verified() {
        let task: TaskId = TASK.parse().unwrap();
        let none = HeaderMap::new();
        let cancel = format!("/v1/tasks/{TASK}/cancel");
        let template = "/v1/tasks/{id}/cancel";
        assert_eq!(
            asked_at(Method::POST, template, &cancel, &none),
            Some(Asked {
                subject: Subject::Task(task),
                path: cancel.clone(),
                caller: Caller::AdminOrSession,
            })
        );
        // Other verbs, waits and reads of a task are served where they arrive.
        assert_eq!(asked_at(Method::GET, template, &cancel, &none), None);
        let wait = format!("/v1/tasks/{TASK}/wait");
        assert_eq!(
            asked_at(Method::GET, "/v1/tasks/{id}/wait", &wait, &none),
            None
        );
        assert_eq!(
            asked_at(
                Method::GET,
                "/v1/tasks/{id}",
                &format!("/v1/tasks/{TASK}"),
                &none
            ),
            None
        );
        assert_eq!(
            asked_at(Method::GET, "/v1/events", "/v1/events", &none),
            None
        );
        // A request that matched no route is never forwarded.
        assert_eq!(
            asked(&Method::POST, None, "/v1/worker/%2e%2e/tasks", &none),
            Ok(None)
        );
    }

    #[test]
    fn a_path_that_is_not_the_one_its_route_spells_is_refused() {
        let handle = bearer_map("wh-abc");
        let template = "/v1/tasks/{id}/cancel";
        let hex = TASK.trim_start_matches("T-");
        for path in [
            format!("/v1/tasks/%54-{hex}/cancel"),
            "/v1/tasks/%2e%2e/cancel".to_owned(),
            "/v1/tasks/T-n%6fpe/cancel".to_owned(),
        ] {
            assert_eq!(
                asked(&Method::POST, Some(template), &path, &handle),
                Err(NOT_CANONICAL),
                "{path}"
            );
        }
        // An id that names no task at all is the route's own bad request.
        // An id that names no task at all (the route parses ids as this
        // does) is the route's own bad request.
        for path in [
            "/v1/tasks/T-nope/cancel".to_owned(),
            "/v1/tasks/not-a-task/cancel".to_owned(),
            format!("/v1/tasks/T-{}/cancel", hex.to_uppercase()),
        ] {
            assert_eq!(
                asked(&Method::POST, Some(template), &path, &handle),
                Ok(None),
                "{path}"
            );
        }
        assert_eq!(
            asked(
                &Method::POST,
                Some("/v1/worker/result"),
                "/v1/worker/./result",
                &handle
            ),
            Err(NOT_CANONICAL)
        );
    }

    #[test]
    fn a_pools_claim_goes_to_the_node_its_header_names() {
        let node = Uuid::from_u128(7);
        let mut named = bearer_map("swc1.k.p.t");
        named.insert(NODE, HeaderValue::from_str(&node.to_string()).unwrap());
        for route in ["/v1/pool/claim", "/v1/pool/heartbeat"] {
            assert_eq!(
                asked_at(Method::POST, route, route, &named),
                Some(Asked {
                    subject: Subject::Node(node),
                    path: route.to_owned(),
                    caller: Caller::Pool,
                })
            );
            // Without the header it is served where it arrives.
            assert_eq!(
                asked_at(Method::POST, route, route, &bearer_map("swc1.k.p.t")),
                None
            );
        }
        // The list of nodes is never forwarded.
        assert_eq!(
            asked_at(Method::GET, "/v1/pool/nodes", "/v1/pool/nodes", &named),
            None
        );
        let mut bad = bearer_map("swc1.k.p.t");
        bad.insert(NODE, HeaderValue::from_static("node-b"));
        assert_eq!(
            asked(
                &Method::POST,
                Some("/v1/pool/claim"),
                "/v1/pool/claim",
                &bad
            ),
            Err(NOT_A_NODE)
        );
    }

    #[test]
    fn worker_routes_are_routed_by_their_credential() {
        let handle = bearer_map("wh-abc");
        let output = asked_at(
            Method::POST,
            "/v1/worker/output",
            "/v1/worker/output",
            &handle,
        );
        assert_eq!(
            output.map(|a| (a.subject, a.path, a.caller)),
            Some((
                Subject::Handle("wh-abc".into()),
                "/v1/worker/output".to_owned(),
                Caller::Named
            ))
        );
        assert_eq!(
            asked_at(Method::POST, "/v1/tasks", "/v1/tasks", &handle).map(|a| a.subject),
            Some(Subject::Handle("wh-abc".into()))
        );
        let token = bearer_map("swc1.k.p.t");
        assert_eq!(
            asked_at(
                Method::GET,
                "/v1/worker/prompt",
                "/v1/worker/prompt",
                &token
            )
            .map(|a| a.subject),
            Some(Subject::Token("swc1.k.p.t".into()))
        );
        // An operator's secret creates its tasks on the node it reached.
        let secret = bearer_map(&format!("sws-{}", "0".repeat(64)));
        assert_eq!(
            asked_at(Method::POST, "/v1/tasks", "/v1/tasks", &secret),
            None
        );
        assert_eq!(
            asked_at(
                Method::GET,
                "/v1/worker/prompt",
                "/v1/worker/prompt",
                &HeaderMap::new()
            ),
            None
        );
        assert_eq!(
            asked_at(
                Method::POST,
                "/v1/worker/output",
                "/v1/worker/output",
                &secret
            ),
            None
        );
        // Listing tasks is never forwarded, whatever the credential.
        assert_eq!(
            asked_at(Method::GET, "/v1/tasks", "/v1/tasks", &handle),
            None
        );
    }

    fn owner(node: NodeId, alive: bool) -> TaskOwner {
        TaskOwner {
            task: Some(TASK.parse().unwrap()),
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
