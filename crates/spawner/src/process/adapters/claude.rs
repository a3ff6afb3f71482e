//! Claude Code's `stream-json` (`claude -p --output-format stream-json
//! --verbose`), as the Claude Agent SDK's `SDKMessage` types describe it:
//! `system` (`init` first), `assistant` and `user` messages whose content
//! blocks are text, tool calls and tool results, and one `result` per turn.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use swarmd_output_store::OutputEvent;

use super::usage::{ModelUsage, Tally, Tokens, Usage};
use super::{CliFormat, Unmapped, bounded, content_text, partial, progress, shape, summarize};
use super::{NOTE_CHARS, preview, required_str};

/// What the stream has shown so far.
#[derive(Debug, Default)]
pub(super) struct Claude {
    /// `stream_event` lines (`--include-partial-messages`), counted: the
    /// `assistant` messages repeat their text whole.
    stream_events: u64,
    /// Tokens of the `assistant` messages so far, for running usage notes.
    tally: Tally,
}

#[derive(Deserialize)]
struct Init {
    session_id: String,
    model: String,
    claude_code_version: String,
}

#[derive(Deserialize)]
struct Assistant {
    message: AssistantMessage,
    session_id: String,
    #[serde(default)]
    error: Option<String>,
    /// Set on a sub-agent's messages: the tool call that started it.
    #[serde(default)]
    parent_tool_use_id: Option<String>,
}

#[derive(Deserialize)]
struct AssistantMessage {
    content: Vec<Value>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    /// Read apart, so a usage of another shape costs only the running note.
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct User {
    message: UserMessage,
}

#[derive(Deserialize)]
struct UserMessage {
    content: Value,
}

#[derive(Deserialize)]
struct Text {
    text: String,
}

#[derive(Deserialize)]
struct Thinking {
    thinking: String,
}

#[derive(Deserialize)]
struct ToolUse {
    name: String,
    input: Value,
}

#[derive(Deserialize)]
struct ToolResult {
    #[serde(rename = "tool_use_id")]
    _tool_use_id: String,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct TurnResult {
    subtype: String,
    is_error: bool,
    session_id: String,
    num_turns: u64,
    duration_ms: u64,
    total_cost_usd: f64,
    usage: TokenUsage,
    #[serde(default, rename = "modelUsage")]
    model_usage: BTreeMap<String, ModelTotals>,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    errors: Vec<String>,
    #[serde(default)]
    structured_output: Option<Value>,
}

#[derive(Deserialize)]
struct TokenUsage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelTotals {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
    #[serde(rename = "costUSD")]
    cost_usd: f64,
}

impl Claude {
    pub(super) fn map(
        &mut self,
        kind: &str,
        line: Value,
        out: &mut Vec<OutputEvent>,
    ) -> Result<(), Unmapped> {
        match kind {
            "system" => system(line, out),
            "assistant" => {
                let message: Assistant = shape(line)?;
                let running = self.count(&message);
                assistant(message, out)?;
                out.extend(running);
                Ok(())
            }
            "user" => user(shape(line)?, out),
            "result" => {
                result(shape(line)?, out);
                Ok(())
            }
            "stream_event" => {
                self.stream_events += 1;
                Ok(())
            }
            other => Err(Unmapped::Unknown(other.to_owned())),
        }
    }

    /// Counts the message's usage; a running `usage` note when it grew.
    fn count(&mut self, message: &Assistant) -> Option<OutputEvent> {
        let m = &message.message;
        let id = m.id.as_deref()?;
        let usage: TokenUsage = serde_json::from_value(m.usage.clone()?).ok()?;
        let tokens = Tokens {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cache_read: usage.cache_read_input_tokens.unwrap_or(0),
            cache_write: usage.cache_creation_input_tokens.unwrap_or(0),
        };
        let model = m.model.as_deref().unwrap_or("unknown");
        self.tally.count(id, model, tokens).then(|| {
            self.tally
                .event(CliFormat::Claude, Some(&message.session_id))
        })
    }

    pub(super) fn finish(&mut self, out: &mut Vec<OutputEvent>) {
        if self.stream_events > 0 {
            let note = format!(
                "{} stream_event lines were counted, not recorded: the assistant messages carry their text",
                self.stream_events
            );
            out.push(progress("stream_event", note));
        }
    }
}

/// `init` names the session and model; other subtypes are kept as notes.
fn system(line: Value, out: &mut Vec<OutputEvent>) -> Result<(), Unmapped> {
    let subtype = required_str(&line, "subtype")?;
    if subtype == "init" {
        let init: Init = shape(line)?;
        out.push(progress(
            "init",
            format!(
                "session {}, model {}, claude code {}",
                bounded(&init.session_id, NOTE_CHARS),
                bounded(&init.model, NOTE_CHARS),
                bounded(&init.claude_code_version, NOTE_CHARS)
            ),
        ));
    } else {
        out.push(progress(
            &format!("system:{subtype}"),
            preview(line.to_string().as_bytes()),
        ));
    }
    Ok(())
}

/// Text blocks become `partial` (a sub-agent's, a `subagent` note), tool
/// calls a note named after the tool.
fn assistant(message: Assistant, out: &mut Vec<OutputEvent>) -> Result<(), Unmapped> {
    let mut events = Vec::with_capacity(message.message.content.len() + 1);
    if let Some(error) = &message.error {
        events.push(progress("error", bounded(error, NOTE_CHARS)));
    }
    for block in message.message.content {
        let kind = block_kind(&block)?;
        match kind.as_str() {
            "text" => {
                let Text { text } = shape(block)?;
                // A sub-agent's text is not the answer being written.
                events.push(match &message.parent_tool_use_id {
                    None => partial(&text),
                    Some(_) => progress("subagent", bounded(&text, NOTE_CHARS)),
                });
            }
            "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                let call: ToolUse = shape(block)?;
                events.push(progress(&call.name, summarize(&call.input)));
            }
            "thinking" => {
                let thinking: Thinking = shape(block)?;
                events.push(progress(
                    "thinking",
                    bounded(&thinking.thinking, NOTE_CHARS),
                ));
            }
            "redacted_thinking" => events.push(progress("thinking", "(redacted)".to_owned())),
            other => events.push(progress(
                &format!("unknown:content.{other}"),
                preview(block.to_string().as_bytes()),
            )),
        }
    }
    out.append(&mut events);
    Ok(())
}

/// Tool results (and any text a user message carries) become notes.
fn user(message: User, out: &mut Vec<OutputEvent>) -> Result<(), Unmapped> {
    let blocks = match message.message.content {
        Value::String(text) => {
            out.push(progress("user", bounded(&text, NOTE_CHARS)));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(Unmapped::Malformed(
                "`message.content` is neither text nor a list".into(),
            ));
        }
    };
    let mut events = Vec::with_capacity(blocks.len());
    for block in blocks {
        let kind = block_kind(&block)?;
        match kind.as_str() {
            "tool_result" => {
                let result: ToolResult = shape(block)?;
                let status = if result.is_error == Some(true) {
                    "error"
                } else {
                    "ok"
                };
                let text = content_text(&result.content);
                events.push(progress(
                    "tool_result",
                    bounded(&format!("{status}: {text}"), NOTE_CHARS),
                ));
            }
            "text" => events.push(progress(
                "user",
                bounded(&shape::<Text>(block)?.text, NOTE_CHARS),
            )),
            other => events.push(progress(
                &format!("unknown:content.{other}"),
                preview(block.to_string().as_bytes()),
            )),
        }
    }
    out.append(&mut events);
    Ok(())
}

/// The turn's end: the `usage` note, then the Final. A successful turn's
/// value is its structured output when it has one, else its text; a failed
/// turn's is its error text (the `errors`, else the subtype).
fn result(result: TurnResult, out: &mut Vec<OutputEvent>) {
    let mut usage = Usage::new(CliFormat::Claude, Some(&result.session_id));
    usage.turns = Some(result.num_turns);
    usage.cost_usd = Some(result.total_cost_usd);
    usage.duration_ms = Some(result.duration_ms);
    if result.model_usage.is_empty() {
        usage.input_tokens = Some(result.usage.input_tokens);
        usage.output_tokens = Some(result.usage.output_tokens);
        usage.cache_read_tokens = result.usage.cache_read_input_tokens;
        usage.cache_write_tokens = result.usage.cache_creation_input_tokens;
    } else {
        // Per-model totals cover sub-agents too; `usage` is the main loop's.
        let sum = |f: fn(&ModelTotals) -> u64| {
            result
                .model_usage
                .values()
                .map(f)
                .fold(0u64, u64::saturating_add)
        };
        usage.input_tokens = Some(sum(|m| m.input_tokens));
        usage.output_tokens = Some(sum(|m| m.output_tokens));
        usage.cache_read_tokens = Some(sum(|m| m.cache_read_input_tokens));
        usage.cache_write_tokens = Some(sum(|m| m.cache_creation_input_tokens));
        for (model, totals) in &result.model_usage {
            usage.add_model(
                model,
                ModelUsage {
                    input_tokens: totals.input_tokens,
                    output_tokens: totals.output_tokens,
                    cost_usd: Some(totals.cost_usd),
                },
            );
        }
    }
    out.push(usage.event());
    let ok = result.subtype == "success" && !result.is_error;
    let value = match (ok, result.structured_output, result.result) {
        (true, Some(structured), _) => structured,
        (_, _, Some(text)) => Value::String(text),
        _ if !result.errors.is_empty() => Value::String(result.errors.join("\n")),
        _ => Value::String(result.subtype),
    };
    out.push(OutputEvent::inline_final(value, ok));
}

/// The `type` of a content block.
fn block_kind(block: &Value) -> Result<String, Unmapped> {
    block
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Unmapped::Malformed("a content block has no string `type`".into()))
}
