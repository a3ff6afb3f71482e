//! What goes through the session mailbox between nodes (docs/decisions.md,
//! Cluster), as JSON bodies: requests to a session homed on another node
//! (`spawn`, `ask`, `hook_before`), notices to it (`cancel`, frames
//! already encoded in its dialect), and the replies going back to the node
//! that waits for them. A body may carry a worker credential: it is never
//! logged.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::WorkerCredential;
use swarmd_engine::ids::{AttemptId, TaskId};
use swarmd_spawner::operator::{HookAck, HookRequest, SpawnFrame, SpawnReply, SpawnWorktree};

use crate::frames::Reply;
use crate::outbox::FrameClass;

/// Mail kinds.
pub(crate) const SPAWN: &str = "spawn";
pub(crate) const ASK: &str = "ask";
pub(crate) const HOOK_BEFORE: &str = "hook_before";
pub(crate) const HOOK_AFTER: &str = "hook_after";
pub(crate) const CANCEL: &str = "cancel";
pub(crate) const TEXT: &str = "text";
pub(crate) const REPLY: &str = "reply";
/// To the previous home: the session moved to `reply_to`.
pub(crate) const MOVED: &str = "moved";
/// To the session's new home: where the reply to a request it sent
/// before the move goes (`reply_to`).
pub(crate) const WAITER: &str = "waiter";
/// To the home: end the session if it is stale (a login on another node
/// takes its roles).
pub(crate) const RELEASE: &str = "release";
/// To the node that asked for a release: the home keeps the session (it is
/// live), so the login there is refused now instead of after its wait.
pub(crate) const KEPT: &str = "kept";
/// To the home: the session was deleted on another node.
pub(crate) const ENDED: &str = "ended";
/// To the home: the session was active on another node, last at the unix
/// ms in the body.
pub(crate) const SEEN: &str = "seen";

/// A `spawn` frame's contents, credential included (so no `Debug`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
struct SpawnBody {
    task: TaskId,
    attempt: u32,
    agent: String,
    token: String,
    handle: String,
    expires_secs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worker_binding: Option<Value>,
    directive: String,
    base_url: String,
    lease_deadline_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worktree: Option<SpawnWorktree>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    continued_from: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resume_session: Option<String>,
}

pub(crate) fn encode_spawn(frame: &SpawnFrame) -> String {
    encode(&SpawnBody {
        task: frame.attempt.task,
        attempt: frame.attempt.n,
        agent: frame.agent.clone(),
        token: frame.credential.token().to_owned(),
        handle: frame.credential.handle().to_owned(),
        expires_secs: frame.credential.expires_secs(),
        worker_binding: frame.worker_binding.clone(),
        directive: frame.directive.clone(),
        base_url: frame.base_url.clone(),
        lease_deadline_ms: frame.lease_deadline_ms,
        worktree: frame.worktree.clone(),
        continued_from: frame.continued_from,
        resume_session: frame.resume_session.clone(),
    })
}

pub(crate) fn decode_spawn(body: &str) -> Option<SpawnFrame> {
    let b: SpawnBody = serde_json::from_str(body).ok()?;
    Some(SpawnFrame {
        attempt: AttemptId {
            task: b.task,
            n: b.attempt,
        },
        agent: b.agent,
        credential: WorkerCredential::new(b.token, b.handle, b.expires_secs),
        worker_binding: b.worker_binding,
        directive: b.directive,
        base_url: b.base_url,
        lease_deadline_ms: b.lease_deadline_ms,
        worktree: b.worktree,
        continued_from: b.continued_from,
        resume_session: b.resume_session,
    })
}

/// A senior question: `ask`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AskBody {
    pub(crate) task_id: TaskId,
    pub(crate) question: Value,
}

/// A `hook_after`: the attempt and its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HookAfterBody {
    pub(crate) req: HookRequest,
    pub(crate) result: Value,
}

/// A `cancel` of a spawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CancelBody {
    pub(crate) task_id: TaskId,
    pub(crate) attempt: u32,
    pub(crate) reason: String,
}

/// A frame already encoded in the session's dialect (frames handed over
/// by a previous home).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TextBody {
    pub(crate) class: Class,
    pub(crate) text: String,
}

/// `FrameClass` on the wire of the mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Class {
    Request,
    Resumable,
    Notice,
}

impl From<FrameClass> for Class {
    fn from(class: FrameClass) -> Class {
        match class {
            FrameClass::Request => Class::Request,
            FrameClass::Resumable => Class::Resumable,
            FrameClass::Notice => Class::Notice,
        }
    }
}

impl From<Class> for FrameClass {
    fn from(class: Class) -> FrameClass {
        match class {
            Class::Request => FrameClass::Request,
            Class::Resumable => FrameClass::Resumable,
            Class::Notice => FrameClass::Notice,
        }
    }
}

/// A reply on its way back to the waiting node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReplyBody {
    SpawnAck {
        value: Value,
        ok: bool,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        stats: Option<Value>,
    },
    SpawnHalt {
        #[serde(default)]
        value: Option<Value>,
        #[serde(default)]
        reason: Option<String>,
    },
    Answer(Value),
    HookAck(HookAck),
}

pub(crate) fn encode_reply(reply: &Reply) -> String {
    encode(&match reply.clone() {
        Reply::Spawn(SpawnReply::Ack {
            value,
            ok,
            error,
            stats,
        }) => ReplyBody::SpawnAck {
            value,
            ok,
            error,
            stats,
        },
        Reply::Spawn(SpawnReply::Halt { value, reason }) => ReplyBody::SpawnHalt { value, reason },
        Reply::Answer(value) => ReplyBody::Answer(value),
        Reply::Hook(ack) => ReplyBody::HookAck(ack),
    })
}

pub(crate) fn decode_reply(body: &str) -> Option<Reply> {
    Some(match serde_json::from_str(body).ok()? {
        ReplyBody::SpawnAck {
            value,
            ok,
            error,
            stats,
        } => Reply::Spawn(SpawnReply::Ack {
            value,
            ok,
            error,
            stats,
        }),
        ReplyBody::SpawnHalt { value, reason } => Reply::Spawn(SpawnReply::Halt { value, reason }),
        ReplyBody::Answer(value) => Reply::Answer(value),
        ReplyBody::HookAck(ack) => Reply::Hook(ack),
    })
}

pub(crate) fn encode_hook(req: &HookRequest) -> String {
    encode(req)
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(body: &str) -> Option<T> {
    serde_json::from_str(body).ok()
}

pub(crate) fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarmd_engine::ids::TaskId;

    use super::*;

    fn frame() -> SpawnFrame {
        SpawnFrame {
            attempt: AttemptId {
                task: TaskId::new(),
                n: 2,
            },
            agent: "researcher".into(),
            credential: WorkerCredential::new("swc1.t".into(), "wh-h".into(), 99),
            worker_binding: Some(json!({"subagent_type": "x"})),
            directive: "do it".into(),
            base_url: "http://127.0.0.1:1".into(),
            lease_deadline_ms: 12,
            worktree: Some(SpawnWorktree {
                path: "/w".into(),
                branch: "b".into(),
                base: "c".into(),
            }),
            continued_from: Some(TaskId::new()),
            resume_session: Some("s".into()),
        }
    }

    #[test]
    fn a_spawn_crosses_the_mailbox_whole() {
        let sent = frame();
        let got = decode_spawn(&encode_spawn(&sent)).unwrap();
        assert_eq!(got.attempt, sent.attempt);
        assert_eq!(got.credential.token(), "swc1.t");
        assert_eq!(got.credential.handle(), "wh-h");
        assert_eq!(got.credential.expires_secs(), 99);
        assert_eq!(got.worker_binding, sent.worker_binding);
        assert_eq!(got.worktree, sent.worktree);
        assert_eq!(got.continued_from, sent.continued_from);
        assert_eq!(got.resume_session, sent.resume_session);
        assert_eq!(
            (got.directive, got.base_url, got.lease_deadline_ms),
            (sent.directive, sent.base_url, sent.lease_deadline_ms)
        );
        assert!(decode_spawn("{\"task\": 1}").is_none());
    }

    #[test]
    fn every_reply_crosses_the_mailbox_whole() {
        let replies = [
            Reply::Spawn(SpawnReply::Ack {
                value: json!({"found": 1}),
                ok: false,
                error: Some("e".into()),
                stats: Some(json!({"tokens": 3})),
            }),
            Reply::Spawn(SpawnReply::Halt {
                value: None,
                reason: Some("enough".into()),
            }),
            Reply::Answer(json!("yes")),
            Reply::Hook(HookAck {
                ok: false,
                reason: Some("no".into()),
            }),
        ];
        for reply in replies {
            assert_eq!(decode_reply(&encode_reply(&reply)), Some(reply));
        }
        assert_eq!(decode_reply("{\"nonsense\": 1}"), None);
    }

    #[test]
    fn a_handed_over_frame_keeps_its_class() {
        for class in [
            FrameClass::Request,
            FrameClass::Resumable,
            FrameClass::Notice,
        ] {
            let body = encode(&TextBody {
                class: class.into(),
                text: "{}".into(),
            });
            let back: TextBody = decode(&body).unwrap();
            assert_eq!(FrameClass::from(back.class), class);
        }
    }
}
