//! The durable record of flow runs (docs/flows.md): `RunRecord`, its
//! `RunStatus`, the pinned `FlowDoc` a run executes, and the `RunFilter` of
//! listings. The engine stores them through its write batches; the runner's
//! journal (`RunRecord::state`) is opaque JSON to the engine and its stores.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RunId, SessionId};
use crate::task::ParseEnumError;

/// Where a flow run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Waiting,
    Passed,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// Every status, live ones first.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Passed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// Whether the run is over for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Passed | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The snake_case wire and column form.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| ParseEnumError {
                got: s.to_owned(),
                expected: "running, waiting, passed, failed, cancelled",
            })
    }
}

/// One run of a flow, as stored. Every write by the runner replaces the
/// whole record and raises `version` by one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: RunId,
    /// The flow's name.
    pub flow: String,
    /// `sha256:<hex>` of the pinned `FlowDoc`.
    pub flow_hash: String,
    pub status: RunStatus,
    /// The MainAI session that owns the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// The principal that started the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub input: Value,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub version: u64,
    /// The runner's journal; opaque to the engine and its stores.
    pub state: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a listing shows of a run: its columns and its error, never its
/// input or journal, so a page of runs costs what its summaries weigh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: RunId,
    pub flow: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    pub created_ms: u64,
    pub updated_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&RunRecord> for RunSummary {
    fn from(run: &RunRecord) -> RunSummary {
        RunSummary {
            id: run.id,
            flow: run.flow.clone(),
            status: run.status,
            session: run.session,
            created_ms: run.created_ms,
            updated_ms: run.updated_ms,
            error: run.error.clone(),
        }
    }
}

/// A flow document pinned by its content hash; never changed once stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowDoc {
    /// `sha256:<hex>` of the document.
    pub hash: String,
    pub name: String,
    pub doc: Value,
}

/// Which runs `list_runs` returns: newest id first, strictly older than
/// `before`, at most `limit`, matching every other field given.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub flow: Option<String>,
    pub session: Option<SessionId>,
    pub before: Option<RunId>,
    pub limit: usize,
}

impl RunFilter {
    /// Whether `run` passes every field but the id bound and the limit.
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.status.is_none_or(|s| run.status == s)
            && self.flow.as_deref().is_none_or(|f| run.flow == f)
            && self.session.is_none_or(|s| run.session == Some(s))
            && self.before.is_none_or(|b| run.id < b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings_round_trip_and_split_terminal() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>().unwrap(), status);
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, Value::from(status.as_str()));
        }
        let terminal: Vec<_> = RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [RunStatus::Passed, RunStatus::Failed, RunStatus::Cancelled]
        );
        assert!("pass".parse::<RunStatus>().is_err());
    }

    #[test]
    fn record_omits_absent_options() {
        let run = RunRecord {
            id: RunId::new(),
            flow: "f".into(),
            flow_hash: "sha256:00".into(),
            status: RunStatus::Running,
            session: None,
            owner: None,
            idempotency_key: None,
            input: Value::Null,
            created_ms: 1,
            updated_ms: 2,
            version: 1,
            state: serde_json::json!({"nodes": {}}),
            result: None,
            error: None,
        };
        let json = serde_json::to_value(&run).unwrap();
        for absent in ["session", "owner", "idempotency_key", "result", "error"] {
            assert!(json.get(absent).is_none(), "{absent}");
        }
        assert_eq!(serde_json::from_value::<RunRecord>(json).unwrap(), run);
    }
}
