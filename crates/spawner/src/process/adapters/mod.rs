//! Stream adapters (docs/agents-cli.md): each maps one LLM CLI's JSON-lines
//! stdout to output events as lines arrive. Text becomes `partial`, a tool
//! call a `progress` named after the tool, the CLI's result line a `usage`
//! note then the `final`.
//!
//! Every line yields at least one event: a line of a type an adapter does
//! not map becomes a `progress` note of stage `unknown:<type>`, and a line
//! that is not JSON, has no `type`, or misses a field its type requires
//! becomes an `invalid_output` note naming the problem. No line is fatal.
//! Fields the adapters do not read are ignored, so a CLI may add them.

mod claude;
mod codex;
mod gemini;
mod usage;

#[cfg(test)]
mod tests;

use serde::de::DeserializeOwned;
use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent};

use super::output::INVALID_LINE_STAGE;

/// An LLM CLI whose stream format swarmd reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliFormat {
    /// `claude -p --output-format stream-json --verbose`.
    Claude,
    /// `codex exec --json`.
    Codex,
    /// `gemini -p … --output-format stream-json`.
    Gemini,
}

impl CliFormat {
    /// The name used in configuration and in `usage` notes.
    pub fn name(self) -> &'static str {
        match self {
            CliFormat::Claude => "claude",
            CliFormat::Codex => "codex",
            CliFormat::Gemini => "gemini",
        }
    }
}

/// Characters kept of a note that quotes child text (a line, a tool's
/// arguments, a message).
pub(super) const NOTE_CHARS: usize = 200;
/// Characters kept of a stage name taken from the child (a tool's name).
const STAGE_CHARS: usize = 64;

/// What one line amounted to, for the reader's flood accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LineKind {
    Blank,
    /// Mapped, or kept as an `unknown:<type>` note.
    Read,
    /// Not JSON, no `type`, or a known type missing a required field.
    Invalid,
}

/// One run's stream, read line by line.
#[derive(Debug)]
pub(super) struct Adapter {
    state: State,
}

#[derive(Debug)]
enum State {
    Claude(claude::Claude),
    Codex(codex::Codex),
    Gemini(gemini::Gemini),
}

/// Why a line of a known type was not mapped.
#[derive(Debug)]
enum Unmapped {
    /// A type (or item, or content block) this adapter does not map.
    Unknown(String),
    /// A known type that does not have the shape its CLI documents.
    Malformed(String),
}

impl Adapter {
    pub(super) fn new(format: CliFormat) -> Adapter {
        let state = match format {
            CliFormat::Claude => State::Claude(claude::Claude::default()),
            CliFormat::Codex => State::Codex(codex::Codex::default()),
            CliFormat::Gemini => State::Gemini(gemini::Gemini::default()),
        };
        Adapter { state }
    }

    /// Maps one stdout line to the events it stands for, appended to `out`.
    pub(super) fn line(
        &mut self,
        line: &[u8],
        line_no: u64,
        out: &mut Vec<OutputEvent>,
    ) -> LineKind {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return LineKind::Blank;
        }
        let parsed = swarmd_output_store::check_text_depth(trimmed)
            .map_err(|e| e.to_string())
            .and_then(|()| serde_json::from_slice::<Value>(trimmed).map_err(|e| e.to_string()));
        let value = match parsed {
            Ok(value) => value,
            Err(problem) => {
                out.push(invalid(line_no, &problem, trimmed));
                return LineKind::Invalid;
            }
        };
        let Some(kind) = value.get("type").and_then(Value::as_str).map(str::to_owned) else {
            out.push(invalid(line_no, "no string `type`", trimmed));
            return LineKind::Invalid;
        };
        let mapped = match &mut self.state {
            State::Claude(state) => state.map(&kind, value, out),
            State::Codex(state) => state.map(&kind, value, out),
            State::Gemini(state) => state.map(&kind, value, out),
        };
        match mapped {
            Ok(()) => LineKind::Read,
            Err(Unmapped::Unknown(what)) => {
                out.push(progress(&format!("unknown:{what}"), preview(trimmed)));
                LineKind::Read
            }
            Err(Unmapped::Malformed(problem)) => {
                let problem = format!("malformed `{kind}` line: {problem}");
                out.push(invalid(line_no, &problem, trimmed));
                LineKind::Invalid
            }
        }
    }

    /// Events owed once stdout has ended (summaries of lines kept as counts).
    pub(super) fn finish(&mut self, out: &mut Vec<OutputEvent>) {
        if let State::Claude(state) = &mut self.state {
            state.finish(out);
        }
    }
}

/// Deserializes a line (or part of one) into its documented shape.
fn shape<T: DeserializeOwned>(value: Value) -> Result<T, Unmapped> {
    serde_json::from_value(value).map_err(|e| Unmapped::Malformed(e.to_string()))
}

/// A string field the line's type requires.
fn required_str<'a>(value: &'a Value, field: &str) -> Result<&'a str, Unmapped> {
    match value.get(field) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(Unmapped::Malformed(format!("`{field}` is not a string"))),
        None => Err(Unmapped::Malformed(format!("missing field `{field}`"))),
    }
}

/// A `progress` event; `stage` is bounded, `note` is taken as given.
fn progress(stage: &str, note: String) -> OutputEvent {
    OutputEvent::Progress {
        stage: bounded(stage, STAGE_CHARS),
        note: Some(note),
    }
}

/// A `partial` event carrying text.
fn partial(text: &str) -> OutputEvent {
    OutputEvent::Partial {
        chunk: ContentRef::Inline {
            value: Value::String(text.to_owned()),
        },
    }
}

/// The note for a line that is not usable: its number, the problem, its start.
fn invalid(line_no: u64, problem: &str, line: &[u8]) -> OutputEvent {
    OutputEvent::Progress {
        stage: INVALID_LINE_STAGE.to_owned(),
        note: Some(format!(
            "line {line_no}: {}: {}",
            bounded(problem, NOTE_CHARS),
            preview(line)
        )),
    }
}

/// The first [`NOTE_CHARS`] characters of a line.
fn preview(line: &[u8]) -> String {
    bounded(&String::from_utf8_lossy(line), NOTE_CHARS)
}

/// `text` cut to `max` characters, with `…` when it was longer.
fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// Keys whose value says best what a tool call is about, in order of
/// preference: a shell command, a file, a search, a URL, a sub-agent's task.
const SUMMARY_KEYS: [&str; 10] = [
    "command",
    "file_path",
    "absolute_path",
    "path",
    "dir_path",
    "pattern",
    "query",
    "url",
    "description",
    "prompt",
];

/// A tool call's arguments in at most [`NOTE_CHARS`] characters: the first
/// telling string argument, else the arguments as compact JSON.
fn summarize(input: &Value) -> String {
    if let Some(object) = input.as_object() {
        let telling = SUMMARY_KEYS
            .iter()
            .find_map(|key| object.get(*key).and_then(Value::as_str));
        if let Some(text) = telling {
            return bounded(text, NOTE_CHARS);
        }
    }
    bounded(&input.to_string(), NOTE_CHARS)
}

/// Text of a tool result's `content`: a string, or the `text` of its blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
