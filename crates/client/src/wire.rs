//! The pool routes' bodies (docs/protocol.md, Worker pools), shared by the routes and by
//! `swarmd worker pool`, with the bounds the daemon enforces on them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_types::ids::TaskId;

/// Most attempts one claim may ask for.
pub const MAX_CLAIM: u32 = 64;
/// Longest a claim or a heartbeat may wait, in milliseconds.
pub const MAX_WAIT_MS: u64 = 30_000;
/// Most attempts one heartbeat may name (held plus ended).
pub const MAX_HELD: usize = 1024;
/// Longest pool id, in bytes; ids are ASCII letters, digits, `-` and `_`.
pub const MAX_POOL_ID: usize = 64;
/// Longest reason a pool may give for an attempt it ended, in bytes.
pub const MAX_REASON: usize = 1024;

/// `POST /v1/pool/claim`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The pool's own id, the same on every call of one pool process.
    pub pool: String,
    pub agent: String,
    /// 1 to [`MAX_CLAIM`].
    pub max: u32,
    /// 0 to [`MAX_WAIT_MS`]: how long to wait for the first attempt.
    #[serde(default)]
    pub wait_ms: u64,
}

/// `GET /v1/pool/nodes`: where a pool reaches every live node of the
/// daemon's cluster (empty outside one), so one URL given finds them all.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodesAnswer {
    /// Each live node's `cluster.advertise_url`.
    pub nodes: Vec<String>,
    /// The same nodes with their ids, in the same order: a pool that
    /// reaches the cluster through one URL names the node it means in the
    /// `x-swarmd-node` header of its claims and heartbeats. Absent from a
    /// daemon that predates it.
    #[serde(default)]
    pub members: Vec<NodeMember>,
}

/// One live node of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMember {
    pub id: String,
    pub url: String,
}

/// The header in which a pool names the node whose queue a claim or a
/// heartbeat is for (`NodeMember::id`); the node that receives it
/// forwards the request there.
pub const NODE_HEADER: &str = "x-swarmd-node";

/// The answer to a claim: possibly none.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClaimAnswer {
    pub attempts: Vec<ClaimedAttempt>,
}

/// One claimed attempt: all a pool needs to run it like a local process
/// agent. `handle` is the attempt's own `wh-` credential.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClaimedAttempt {
    pub task_id: TaskId,
    pub attempt: u32,
    pub agent: String,
    pub handle: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// `prompt` or `none`.
    pub stdin: String,
    /// `none`, `ndjson`, `claude`, `codex` or `gemini`.
    pub stream: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub max_output_bytes: u64,
    /// The lease as renewed by the claim: heartbeat well within it.
    pub lease_ms: u64,
    pub lease_deadline_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_session: Option<String>,
    /// A continuation's starting point for a pool with worktrees: the
    /// continued attempt's branch, and the head its `worktree` artifact
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_head: Option<String>,
}

impl std::fmt::Debug for ClaimedAttempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedAttempt")
            .field("task_id", &self.task_id)
            .field("attempt", &self.attempt)
            .field("agent", &self.agent)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// One attempt named by a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRef {
    pub task_id: TaskId,
    pub attempt: u32,
}

/// An attempt the pool ended without a Final, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndedAttempt {
    pub task_id: TaskId,
    pub attempt: u32,
    pub reason: String,
}

/// `POST /v1/pool/heartbeat`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub pool: String,
    /// Attempts the pool is running: their leases are renewed.
    #[serde(default)]
    pub held: Vec<AttemptRef>,
    /// Attempts the pool ended without a Final.
    #[serde(default)]
    pub ended: Vec<EndedAttempt>,
    /// 0 to [`MAX_WAIT_MS`]: how long to wait for one of `held` to go.
    #[serde(default)]
    pub wait_ms: u64,
}

/// The attempts of `held` the pool must stop: cancelled, superseded,
/// decided, or unknown to the daemon (it restarted).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HeartbeatAnswer {
    pub gone: Vec<AttemptRef>,
}

/// Whether `id` is a valid pool id.
pub fn valid_pool_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_POOL_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_ids_are_short_and_plain() {
        assert!(valid_pool_id("host-1_a"));
        assert!(!valid_pool_id(""));
        assert!(!valid_pool_id("a b"));
        assert!(!valid_pool_id(&"x".repeat(MAX_POOL_ID + 1)));
    }

    #[test]
    fn a_claimed_attempts_debug_never_shows_its_handle() {
        let claimed = ClaimedAttempt {
            task_id: TaskId::new(),
            attempt: 1,
            agent: "a".into(),
            handle: "wh-secret".into(),
            prompt: "p".into(),
            system: None,
            input: None,
            stdin: "prompt".into(),
            stream: "ndjson".into(),
            timeout_ms: None,
            max_output_bytes: 1,
            lease_ms: 1,
            lease_deadline_ms: 1,
            continued_from: None,
            resume_session: None,
            resume_branch: None,
            resume_head: None,
        };
        assert!(!format!("{claimed:?}").contains("wh-secret"));
    }
}
