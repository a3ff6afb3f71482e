//! Gemini CLI's `stream-json` (`gemini -p … --output-format stream-json`),
//! as its `JsonStreamEventType` events are written: `init`, `message`
//! (the user's prompt, then the assistant's text in deltas), `tool_use`,
//! `tool_result`, `error` (warnings the run survives) and one `result`.
//! The result line carries no text: the Final's value is the assistant
//! text since the last tool call, as Gemini's own `json` output answers.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use swarmd_output_store::OutputEvent;

use super::usage::{ModelUsage, Usage};
use super::{CliFormat, NOTE_CHARS, Unmapped, bounded, partial, progress, shape, summarize};

/// What the stream has shown so far.
#[derive(Debug, Default)]
pub(super) struct Gemini {
    session_id: Option<String>,
    /// Assistant text since the last tool call; at most the run's stdout,
    /// which the reader caps.
    answer: String,
    /// Whether a tool ran since the last assistant text: the next text
    /// starts a new answer.
    tool_since_text: bool,
}

#[derive(Deserialize)]
struct Init {
    session_id: String,
    model: String,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct ToolUse {
    tool_name: String,
    #[serde(rename = "tool_id")]
    _tool_id: String,
    #[serde(default)]
    parameters: Value,
}

#[derive(Deserialize)]
struct ToolResult {
    #[serde(rename = "tool_id")]
    _tool_id: String,
    status: String,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    message: String,
}

#[derive(Deserialize)]
struct Warning {
    severity: String,
    message: String,
}

#[derive(Deserialize)]
struct RunResult {
    status: String,
    #[serde(default)]
    error: Option<ErrorDetail>,
    #[serde(default)]
    stats: Option<Stats>,
}

#[derive(Deserialize)]
struct Stats {
    total_tokens: u64,
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cached: Option<u64>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    tool_calls: Option<u64>,
    #[serde(default)]
    models: BTreeMap<String, ModelStats>,
}

#[derive(Deserialize)]
struct ModelStats {
    input_tokens: u64,
    output_tokens: u64,
}

impl Gemini {
    pub(super) fn map(
        &mut self,
        kind: &str,
        line: Value,
        out: &mut Vec<OutputEvent>,
    ) -> Result<(), Unmapped> {
        match kind {
            "init" => {
                let init: Init = shape(line)?;
                let note = format!(
                    "session {}, model {}",
                    bounded(&init.session_id, NOTE_CHARS),
                    bounded(&init.model, NOTE_CHARS)
                );
                out.push(progress("init", note));
                self.session_id = Some(init.session_id);
            }
            "message" => {
                let message: Message = shape(line)?;
                match message.role.as_str() {
                    "assistant" => {
                        if self.tool_since_text {
                            self.answer.clear();
                            self.tool_since_text = false;
                        }
                        self.answer.push_str(&message.content);
                        out.push(partial(&message.content));
                    }
                    "user" => out.push(progress("user", bounded(&message.content, NOTE_CHARS))),
                    other => return Err(Unmapped::Unknown(format!("message.{other}"))),
                }
            }
            "tool_use" => {
                let call: ToolUse = shape(line)?;
                self.tool_since_text = true;
                out.push(progress(&call.tool_name, summarize(&call.parameters)));
            }
            "tool_result" => {
                let result: ToolResult = shape(line)?;
                let detail = match (&result.error, &result.output) {
                    (Some(error), _) => error.message.as_str(),
                    (None, Some(output)) => output.as_str(),
                    (None, None) => "",
                };
                let note = format!("{}: {detail}", result.status);
                out.push(progress("tool_result", bounded(&note, NOTE_CHARS)));
            }
            "error" => {
                let warning: Warning = shape(line)?;
                let note = format!("{}: {}", warning.severity, warning.message);
                out.push(progress("error", bounded(&note, NOTE_CHARS)));
            }
            "result" => {
                let result: RunResult = shape(line)?;
                out.push(self.usage(result.stats).event());
                let ok = result.status == "success";
                let value = match result.error {
                    Some(error) if !ok => error.message,
                    _ => std::mem::take(&mut self.answer),
                };
                out.push(OutputEvent::inline_final(Value::String(value), ok));
            }
            other => return Err(Unmapped::Unknown(other.to_owned())),
        }
        Ok(())
    }

    fn usage(&self, stats: Option<Stats>) -> Usage {
        let mut usage = Usage::new(CliFormat::Gemini, self.session_id.as_deref());
        let Some(stats) = stats else {
            return usage;
        };
        usage.input_tokens = Some(stats.input_tokens);
        usage.output_tokens = Some(stats.output_tokens);
        usage.total_tokens = Some(stats.total_tokens);
        usage.cache_read_tokens = stats.cached;
        usage.duration_ms = stats.duration_ms;
        usage.tool_calls = stats.tool_calls;
        for (model, totals) in &stats.models {
            usage.add_model(
                model,
                ModelUsage {
                    input_tokens: totals.input_tokens,
                    output_tokens: totals.output_tokens,
                    cost_usd: None,
                },
            );
        }
        usage
    }
}
