//! Wire dialects (docs/protocol.md, Upstream clients): the frames a session
//! receives are the documented ones, or, for a session that logged in as the
//! upstream `mse` client does, the same frames with every task id written as
//! a step id, `ST-` plus the same hex. The worker routes accept a step id as
//! an alias of its task id (`http::worker`).

use axum::extract::ws::Utf8Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
}

/// The frame with its `task_id` as a step id; in a `spawn` frame the
/// directive names the step id too. `None` when there is nothing to change.
fn upstream(frame: &ServerFrame) -> Option<Utf8Bytes> {
    let mut value = serde_json::to_value(frame).ok()?;
    let fields = value.as_object_mut()?;
    let task = fields.get("task_id")?.as_str()?.to_owned();
    let step = step_id(&task)?;
    if let Some(Value::String(directive)) = fields.get_mut("directive") {
        *directive = directive.replace(&task, &step);
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
}
