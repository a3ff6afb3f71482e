//! Audit records: who spawned which attempt with which credential, and how it
//! ended (the `audit` layer, docs/tasks.md, Layers). Written by the audit
//! layer, served by `GET /v1/audit`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{SessionId, TaskId};

/// What an audit record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    Spawned,
    SpawnFailed,
    Completed,
}

/// One durable audit line. `detail` holds the token fingerprint at spawn and
/// the outcome and elapsed time at completion; never a secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Assigned by the store; 0 before it is stored.
    #[serde(default)]
    pub id: u64,
    pub ts_ms: u64,
    pub task_id: TaskId,
    pub attempt: u32,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    pub action: AuditAction,
    #[serde(default)]
    pub detail: Value,
}
