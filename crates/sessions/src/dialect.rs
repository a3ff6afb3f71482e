//! Wire dialects (docs/protocol.md, Upstream clients): the frames a session
//! receives are the documented ones, or, for a session that logged in as the
//! upstream `mse` client does, the same frames with every task id written as
//! a step id, `ST-` plus the same hex; such a session may name a task by its
//! step id in its own frames too. The worker routes accept a step id as an
//! alias of its task id (`http::worker`), and [`UpstreamAttempts`] remembers
//! which attempts went to an upstream session, for the `submit` answer.

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use axum::extract::ws::Utf8Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::ids::AttemptId;

use super::frames::{ServerFrame, encode};

/// The prefix of an upstream step id.
pub const STEP_PREFIX: &str = "ST-";

/// How frames to one session are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// The wire of docs/protocol.md.
    #[default]
    Standard,
    /// Task ids as `ST-` step ids, for the upstream `mse` client.
    Upstream,
}

impl Dialect {
    /// The dialect's name as stored with the session.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Standard => "standard",
            Dialect::Upstream => "upstream",
        }
    }

    /// The dialect a stored name stands for; unknown names read as standard.
    pub fn from_stored(name: Option<&str>) -> Dialect {
        match name {
            Some("upstream") => Dialect::Upstream,
            _ => Dialect::Standard,
        }
    }

    /// Encodes `frame` for a session of this dialect.
    pub fn encode(self, frame: &ServerFrame) -> Utf8Bytes {
        match self {
            Dialect::Standard => encode(frame),
            Dialect::Upstream => upstream(frame).unwrap_or_else(|| encode(frame)),
        }
    }

    /// A client frame's text as the documented wire has it: from an
    /// upstream session, a top-level `task_id` written as a step id names
    /// its task (`cancel_task`, `subscribe`). Anything else is unchanged,
    /// and left for the decoder to judge.
    pub(crate) fn inbound(self, text: &str) -> Cow<'_, str> {
        if self == Dialect::Standard || !text.contains(STEP_PREFIX) {
            return Cow::Borrowed(text);
        }
        // serde_json's recursion limit keeps this parse shallow; the
        // decoder checks the depth of what it is handed.
        let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(text) else {
            return Cow::Borrowed(text);
        };
        let Some(task) = fields
            .get("task_id")
            .and_then(Value::as_str)
            .and_then(task_id)
        else {
            return Cow::Borrowed(text);
        };
        fields.insert("task_id".to_owned(), Value::String(task));
        serde_json::to_string(&fields).map_or(Cow::Borrowed(text), Cow::Owned)
    }
}

/// The frame with its `task_id` as a step id; in a `spawn` frame the
/// directive names the step id too, except in the worktree's path and
/// branch, which are names on disk. `None` when there is nothing to change.
fn upstream(frame: &ServerFrame) -> Option<Utf8Bytes> {
    let mut value = serde_json::to_value(frame).ok()?;
    let fields = value.as_object_mut()?;
    let task = fields.get("task_id")?.as_str()?.to_owned();
    let step = step_id(&task)?;
    let on_disk: Vec<String> = match fields.get("worktree") {
        Some(Value::Object(worktree)) => ["path", "branch"]
            .iter()
            .filter_map(|key| worktree.get(*key)?.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(Value::String(directive)) = fields.get_mut("directive") {
        *directive = directive.replace(&task, &step);
        for name in &on_disk {
            *directive = directive.replace(&name.replace(&task, &step), name);
        }
    }
    fields.insert("task_id".to_owned(), Value::String(step));
    serde_json::to_string(&value).ok().map(Utf8Bytes::from)
}

/// `T-<hex>` as `ST-<hex>`.
pub fn step_id(task_id: &str) -> Option<String> {
    task_id
        .strip_prefix("T-")
        .map(|hex| format!("{STEP_PREFIX}{hex}"))
}

/// `ST-<hex>` as `T-<hex>`.
pub fn task_id(step_id: &str) -> Option<String> {
    step_id
        .strip_prefix(STEP_PREFIX)
        .map(|hex| format!("T-{hex}"))
}

/// How many attempts [`UpstreamAttempts`] remembers; the oldest is
/// forgotten first. Far more than the attempts open at once.
pub const REMEMBERED_ATTEMPTS: usize = 16_384;

/// The attempts whose `spawn` went out to an upstream session, most recent
/// last. The upstream client's SubAgent submits without naming its task,
/// and a submit for one of these answers `204` as the upstream client
/// expects (`http::worker`). Filled by the socket writer as it sends a
/// `spawn`, so a spawn delivered again after a restart or a takeover is
/// recorded again; bounded by [`REMEMBERED_ATTEMPTS`].
#[derive(Debug, Default)]
pub struct UpstreamAttempts {
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    order: VecDeque<AttemptId>,
    set: HashSet<AttemptId>,
}

impl UpstreamAttempts {
    fn lock(&self) -> MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `attempt`'s `spawn` went to an upstream session.
    pub(crate) fn record(&self, attempt: AttemptId) {
        let mut recent = self.lock();
        if !recent.set.insert(attempt) {
            return;
        }
        recent.order.push_back(attempt);
        while recent.order.len() > REMEMBERED_ATTEMPTS {
            if let Some(oldest) = recent.order.pop_front() {
                recent.set.remove(&oldest);
            }
        }
    }

    /// Whether `attempt`'s `spawn` went to an upstream session.
    pub fn contains(&self, attempt: AttemptId) -> bool {
        self.lock().set.contains(&attempt)
    }
}

#[cfg(test)]
mod tests {
    use swarmd_engine::ids::TaskId;

    use super::*;

    #[test]
    fn upstream_frames_carry_step_ids_and_standard_ones_do_not() {
        let task = TaskId::new();
        let frame = ServerFrame::TaskAccepted {
            req_id: "r-1".parse().unwrap(),
            task_id: task,
        };
        let standard: Value =
            serde_json::from_str(Dialect::Standard.encode(&frame).as_str()).unwrap();
        assert_eq!(standard["task_id"], task.to_string());
        let upstream: Value =
            serde_json::from_str(Dialect::Upstream.encode(&frame).as_str()).unwrap();
        let hex = task.to_string()[2..].to_owned();
        assert_eq!(upstream["task_id"], format!("ST-{hex}"));
        assert_eq!(upstream["req_id"], "r-1");
    }

    #[test]
    fn an_upstream_spawn_keeps_the_worktree_path_and_branch_as_they_are_on_disk() {
        let task = TaskId::new();
        let path = format!("/state/worktrees/{task}-1");
        let branch = format!("swarmd/{task}-1");
        let frame = ServerFrame::Spawn {
            req_id: "s-1".into(),
            task_id: task,
            agent: "coder".into(),
            attempt: 1,
            capability_token: "swc1.t".into(),
            worker_handle: "wh-1".into(),
            worker: None,
            directive: format!("task_id: {task}\nwork in {path} on {branch}\n"),
            base_url: "http://h:1".into(),
            deadline: 1,
            worktree: Some(swarmd_spawner::operator::SpawnWorktree {
                path: path.clone(),
                branch: branch.clone(),
                base: "abc".into(),
            }),
            continued_from: None,
            resume_session: None,
        };
        let upstream: Value =
            serde_json::from_str(Dialect::Upstream.encode(&frame).as_str()).unwrap();
        let step = step_id(&task.to_string()).unwrap();
        assert_eq!(
            upstream["directive"],
            format!("task_id: {step}\nwork in {path} on {branch}\n")
        );
        assert_eq!(upstream["worktree"]["path"], path.as_str());
        assert_eq!(upstream["worktree"]["branch"], branch.as_str());
    }

    #[test]
    fn an_upstream_session_names_a_task_by_its_step_id_and_a_standard_one_does_not() {
        let task = TaskId::new();
        let step = step_id(&task.to_string()).unwrap();
        let cancel = format!(r#"{{"type":"cancel_task","req_id":"c-1","task_id":"{step}"}}"#);
        let read: Value = serde_json::from_str(&Dialect::Upstream.inbound(&cancel)).unwrap();
        assert_eq!(read["task_id"], task.to_string());
        assert_eq!(read["req_id"], "c-1");
        assert_eq!(Dialect::Standard.inbound(&cancel), cancel.as_str());
        // Only the top-level `task_id` is read as a step id.
        let nested = format!(r#"{{"type":"subscribe","req_id":"s","x":{{"task_id":"{step}"}}}}"#);
        assert_eq!(Dialect::Upstream.inbound(&nested), nested.as_str());
        for text in ["not json ST-", r#"["ST-1"]"#, r#"{"task_id":7,"x":"ST-"}"#] {
            assert_eq!(Dialect::Upstream.inbound(text), text);
        }
    }

    #[test]
    fn upstream_attempts_remember_the_most_recent_ones() {
        let attempts = UpstreamAttempts::default();
        let first = AttemptId::new(TaskId::new(), 1);
        attempts.record(first);
        attempts.record(first);
        assert!(attempts.contains(first));
        assert!(!attempts.contains(AttemptId::new(first.task, 2)));
        for _ in 0..REMEMBERED_ATTEMPTS {
            attempts.record(AttemptId::new(TaskId::new(), 1));
        }
        assert!(!attempts.contains(first), "the oldest is forgotten first");
        assert_eq!(attempts.lock().order.len(), REMEMBERED_ATTEMPTS);
        assert_eq!(attempts.lock().set.len(), REMEMBERED_ATTEMPTS);
    }
}
