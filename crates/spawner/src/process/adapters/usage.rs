//! The `usage` note an adapter writes just before its `final`: the run's
//! session id, turn count, token usage and cost, in one JSON shape for
//! every CLI (docs/agents-cli.md, Usage). Fields a CLI does not report are
//! absent; numbers are as the CLI reports them. Every note holds the run's
//! totals so far, so a CLI that reports usage per message (Claude) also
//! writes running notes from a [`Tally`] while the run goes on.

use std::collections::{BTreeMap, VecDeque};

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

/// Message ids a [`Tally`] remembers: a CLI repeats a message's usage on
/// each of its lines, and lines of other messages interleave only a little.
const RECENT_MESSAGES: usize = 16;

/// Tokens of one message or one model: input, output, cache read, cache write.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Tokens {
    fn max(self, other: Tokens) -> Tokens {
        Tokens {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cache_read: self.cache_read.max(other.cache_read),
            cache_write: self.cache_write.max(other.cache_write),
        }
    }

    fn add(&mut self, more: Tokens, less: Tokens) {
        self.input = self.input.saturating_add(more.input - less.input);
        self.output = self.output.saturating_add(more.output - less.output);
        self.cache_read = self
            .cache_read
            .saturating_add(more.cache_read - less.cache_read);
        self.cache_write = self
            .cache_write
            .saturating_add(more.cache_write - less.cache_write);
    }
}

/// The running totals of a run whose CLI reports usage per message: each
/// message counts once, at the largest usage any of its lines reported.
#[derive(Debug, Default)]
pub(super) struct Tally {
    recent: VecDeque<(String, Tokens)>,
    total: Tokens,
    models: BTreeMap<String, Tokens>,
}

impl Tally {
    /// Counts a line of message `id` by `model`; returns whether the totals
    /// grew.
    pub(super) fn count(&mut self, id: &str, model: &str, usage: Tokens) -> bool {
        let before = match self.recent.iter_mut().find(|(seen, _)| seen == id) {
            Some((_, counted)) => {
                let before = *counted;
                *counted = before.max(usage);
                before
            }
            None => {
                if self.recent.len() == RECENT_MESSAGES {
                    self.recent.pop_front();
                }
                self.recent.push_back((bounded(id, NAME_CHARS), usage));
                Tokens::default()
            }
        };
        let now = before.max(usage);
        if now == before {
            return false;
        }
        self.total.add(now, before);
        if self.models.len() < MAX_MODELS || self.models.contains_key(model) {
            let kept = self.models.entry(bounded(model, NAME_CHARS)).or_default();
            kept.add(now, before);
        }
        true
    }

    /// The running `usage` note: tokens so far, by model too.
    pub(super) fn event(&self, cli: CliFormat, session_id: Option<&str>) -> OutputEvent {
        let mut usage = Usage::new(cli, session_id);
        usage.input_tokens = Some(self.total.input);
        usage.output_tokens = Some(self.total.output);
        usage.cache_read_tokens = Some(self.total.cache_read);
        usage.cache_write_tokens = Some(self.total.cache_write);
        for (model, tokens) in &self.models {
            usage.add_model(
                model,
                ModelUsage {
                    input_tokens: tokens.input,
                    output_tokens: tokens.output,
                    cost_usd: None,
                },
            );
        }
        usage.event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: u64, output: u64) -> Tokens {
        Tokens {
            input,
            output,
            ..Tokens::default()
        }
    }

    #[test]
    fn a_message_counts_once_at_its_largest_usage() {
        let mut tally = Tally::default();
        assert!(tally.count("m1", "sonnet", tokens(800, 9)));
        assert!(tally.count("m1", "sonnet", tokens(800, 41)));
        assert!(
            !tally.count("m1", "sonnet", tokens(800, 41)),
            "a repeat adds nothing"
        );
        assert!(tally.count("m2", "haiku", tokens(100, 5)));
        assert_eq!(tally.total, tokens(900, 46));
        assert_eq!(tally.models["sonnet"], tokens(800, 41));
        let OutputEvent::Progress { stage, note } = tally.event(CliFormat::Claude, Some("s"))
        else {
            panic!("not a progress");
        };
        assert_eq!(stage, USAGE_STAGE);
        let note: serde_json::Value = serde_json::from_str(&note.unwrap()).unwrap();
        assert_eq!(note["input_tokens"], 900);
        assert_eq!(note["output_tokens"], 46);
        assert_eq!(note["models"]["haiku"]["output_tokens"], 5);
        assert!(note.get("cost_usd").is_none(), "{note}");
    }
}
