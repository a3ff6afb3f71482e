//! Codex CLI's `--json` stream (`codex exec --json`), as the Codex SDK's
//! `ThreadEvent` types describe it: `thread.started`, `turn.started`,
//! `item.started` / `item.updated` / `item.completed` around thread items
//! (messages, commands, file changes, MCP tool calls, …), then
//! `turn.completed` with the usage or `turn.failed`. Codex has no result
//! line: the turn's end is the Final, its value the last agent message.

use serde::Deserialize;
use serde_json::Value;
use swarmd_output_store::OutputEvent;

use super::usage::Usage;
use super::{
    CliFormat, NOTE_CHARS, Unmapped, bounded, partial, preview, progress, required_str, shape,
    summarize,
};

/// What the stream has shown so far.
#[derive(Debug, Default)]
pub(super) struct Codex {
    thread_id: Option<String>,
    turns: u64,
    /// The text of the last completed agent message: the turn's answer.
    last_message: Option<String>,
}

#[derive(Deserialize)]
struct ThreadStarted {
    thread_id: String,
}

#[derive(Deserialize)]
struct TurnCompleted {
    usage: TokenUsage,
}

#[derive(Deserialize)]
struct TokenUsage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cached_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
    #[serde(default)]
    reasoning_output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct TurnFailed {
    error: Message,
}

#[derive(Deserialize)]
struct Message {
    message: String,
}

#[derive(Deserialize)]
struct ItemEvent {
    item: Value,
}

#[derive(Deserialize)]
struct Text {
    text: String,
}

#[derive(Deserialize)]
struct Command {
    command: String,
    status: String,
    #[serde(default)]
    exit_code: Option<i64>,
}

#[derive(Deserialize)]
struct FileChange {
    changes: Vec<Change>,
    status: String,
}

#[derive(Deserialize)]
struct Change {
    path: String,
    kind: String,
}

#[derive(Deserialize)]
struct McpToolCall {
    server: String,
    tool: String,
    #[serde(default)]
    arguments: Value,
    status: String,
    #[serde(default)]
    error: Option<Message>,
}

#[derive(Deserialize)]
struct WebSearch {
    query: String,
}

#[derive(Deserialize)]
struct TodoList {
    items: Vec<Todo>,
}

#[derive(Deserialize)]
struct Todo {
    #[serde(rename = "text")]
    _text: String,
    completed: bool,
}

impl Codex {
    pub(super) fn map(
        &mut self,
        kind: &str,
        line: Value,
        out: &mut Vec<OutputEvent>,
    ) -> Result<(), Unmapped> {
        match kind {
            "thread.started" => {
                let started: ThreadStarted = shape(line)?;
                out.push(progress(
                    "init",
                    format!("thread {}", bounded(&started.thread_id, NOTE_CHARS)),
                ));
                self.thread_id = Some(started.thread_id);
            }
            "turn.started" => {
                self.turns += 1;
                out.push(progress("turn", format!("turn {} started", self.turns)));
            }
            "turn.completed" => {
                let TurnCompleted { usage: tokens } = shape(line)?;
                let mut usage = self.usage();
                usage.input_tokens = Some(tokens.input_tokens);
                usage.output_tokens = Some(tokens.output_tokens);
                usage.cache_read_tokens = tokens.cached_input_tokens;
                usage.cache_write_tokens = tokens.cache_write_input_tokens;
                usage.reasoning_tokens = tokens.reasoning_output_tokens;
                out.push(usage.event());
                let answer = self.last_message.take().unwrap_or_default();
                out.push(OutputEvent::inline_final(Value::String(answer), true));
            }
            "turn.failed" => {
                let TurnFailed { error } = shape(line)?;
                out.push(self.usage().event());
                out.push(OutputEvent::inline_final(
                    Value::String(error.message),
                    false,
                ));
            }
            // Codex also reports errors it recovers from (a reconnect) here.
            "error" => {
                let error: Message = shape(line)?;
                out.push(progress("error", bounded(&error.message, NOTE_CHARS)));
            }
            "item.started" | "item.updated" | "item.completed" => {
                let ItemEvent { item } = shape(line)?;
                let phase = &kind["item.".len()..];
                self.item(phase, item, out)?;
            }
            other => return Err(Unmapped::Unknown(other.to_owned())),
        }
        Ok(())
    }

    fn usage(&self) -> Usage {
        let mut usage = Usage::new(CliFormat::Codex, self.thread_id.as_deref());
        usage.turns = Some(self.turns);
        usage
    }

    /// One thread item at one phase (`started`, `updated`, `completed`).
    fn item(
        &mut self,
        phase: &str,
        item: Value,
        out: &mut Vec<OutputEvent>,
    ) -> Result<(), Unmapped> {
        required_str(&item, "id")?;
        let kind = required_str(&item, "type")?.to_owned();
        let event = match kind.as_str() {
            "agent_message" => {
                let Text { text } = shape(item)?;
                if phase != "completed" {
                    // The completed item repeats the whole text.
                    progress(
                        "agent_message",
                        format!("{phase}: {}", bounded(&text, NOTE_CHARS)),
                    )
                } else {
                    let event = partial(&text);
                    self.last_message = Some(text);
                    event
                }
            }
            "reasoning" => progress("reasoning", bounded(&shape::<Text>(item)?.text, NOTE_CHARS)),
            "command_execution" => {
                let command: Command = shape(item)?;
                let note = match command.exit_code {
                    Some(code) => format!("exit {code}: {}", command.command),
                    None => format!("{}: {}", command.status, command.command),
                };
                progress("command_execution", bounded(&note, NOTE_CHARS))
            }
            "file_change" => {
                let change: FileChange = shape(item)?;
                let files: Vec<String> = change
                    .changes
                    .iter()
                    .map(|c| format!("{} {}", c.kind, c.path))
                    .collect();
                progress(
                    "file_change",
                    bounded(
                        &format!("{}: {}", change.status, files.join(", ")),
                        NOTE_CHARS,
                    ),
                )
            }
            "mcp_tool_call" => {
                let call: McpToolCall = shape(item)?;
                let detail = match &call.error {
                    Some(error) => format!("error: {}", error.message),
                    None => summarize(&call.arguments),
                };
                let note = format!("{} [{}] {detail}", call.status, call.server);
                progress(&call.tool, bounded(&note, NOTE_CHARS))
            }
            "web_search" => progress(
                "web_search",
                bounded(&shape::<WebSearch>(item)?.query, NOTE_CHARS),
            ),
            "todo_list" => {
                let list: TodoList = shape(item)?;
                let done = list.items.iter().filter(|t| t.completed).count();
                progress("todo_list", format!("{done}/{} done", list.items.len()))
            }
            "error" => progress(
                "error",
                bounded(&shape::<Message>(item)?.message, NOTE_CHARS),
            ),
            other => progress(
                &format!("unknown:item.{other}"),
                preview(item.to_string().as_bytes()),
            ),
        };
        out.push(event);
        Ok(())
    }
}
