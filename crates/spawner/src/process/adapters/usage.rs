//! The `usage` note an adapter writes just before its `final`: the run's
//! session id, turn count, token usage and cost, in one JSON shape for
//! every CLI (docs/agents-cli.md, Usage). Fields a CLI does not report are
//! absent; numbers are as the CLI reports them.

use std::collections::BTreeMap;

use serde::Serialize;
use swarmd_output_store::OutputEvent;

use super::{CliFormat, bounded};

/// The progress stage of the note.
pub(super) const USAGE_STAGE: &str = "usage";
/// Models listed per note; a run naming more keeps the first, by name.
const MAX_MODELS: usize = 16;
/// Characters kept of a session id or a model name.
const NAME_CHARS: usize = 128;

/// What one run cost, as far as its CLI says.
#[derive(Debug, Default, Serialize)]
pub(super) struct Usage {
    pub cli: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    models: BTreeMap<String, ModelUsage>,
}

/// One model's share of a run.
#[derive(Debug, Default, Serialize)]
pub(super) struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    pub(super) fn new(cli: CliFormat, session_id: Option<&str>) -> Usage {
        Usage {
            cli: cli.name(),
            session_id: session_id.map(|id| bounded(id, NAME_CHARS)),
            ..Usage::default()
        }
    }

    /// Adds a model's share; past [`MAX_MODELS`] models the rest are left out.
    pub(super) fn add_model(&mut self, name: &str, usage: ModelUsage) {
        if self.models.len() < MAX_MODELS {
            self.models.insert(bounded(name, NAME_CHARS), usage);
        }
    }

    /// The `progress` event of stage `usage`, the note this as JSON.
    pub(super) fn event(&self) -> OutputEvent {
        OutputEvent::Progress {
            stage: USAGE_STAGE.to_owned(),
            // Serializing plain numbers and strings cannot fail.
            note: Some(serde_json::to_string(self).unwrap_or_default()),
        }
    }
}
