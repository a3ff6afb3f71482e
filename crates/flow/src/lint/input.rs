//! `input_schema`: a step whose `in` is a literal starts its task with the
//! same input on every run, so lint checks that input against the agent's
//! `input_schema` with the rules the engine applies when it creates the
//! task (docs/tasks.md, Agents), and a step the schema refuses is reported
//! before any run instead of failing every run.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::Lint;
use crate::expr::Expr;

/// Longest schema message kept, as the engine keeps when it refuses a
/// task's input: it may quote the offending value.
const MAX_REASON_CHARS: usize = 256;

/// Most refusals reported for one step's input.
const MAX_REFUSALS: usize = 8;

/// Longest rendering of a schema quoted in a hint.
const MAX_SCHEMA_CHARS: usize = 512;

/// An agent's `input_schema`, compiled once, as the engine compiles it.
#[derive(Clone)]
pub struct InputSchema {
    schema: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl InputSchema {
    /// Compiles `schema` (draft detected, default `jsonschema` options).
    /// References are resolved within the schema only: nothing is fetched
    /// over the network or read from files.
    ///
    /// # Errors
    /// Why `schema` is not a JSON Schema object (or boolean schema).
    pub fn compile(schema: &Value) -> Result<InputSchema, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("input_schema must be a JSON Schema object".to_owned());
        }
        let validator = jsonschema::validator_for(schema)
            .map_err(|error| format!("input_schema is not a valid JSON Schema: {error}"))?;
        Ok(InputSchema {
            schema: Arc::new(schema.clone()),
            validator: Arc::new(validator),
        })
    }

    /// Why the schema refuses `input`, at most [`MAX_REFUSALS`] of the
    /// reasons: each the JSON pointer of the failing value inside `input`
    /// (`""` for the input itself) and the schema's message.
    fn refusals(&self, input: &Value) -> Vec<(String, String)> {
        self.validator
            .iter_errors(input)
            .take(MAX_REFUSALS)
            .map(|error| {
                (
                    error.instance_path().to_string(),
                    cut(error.to_string(), MAX_REASON_CHARS),
                )
            })
            .collect()
    }
}

/// `text` kept to its first `max` characters, marked `…` where cut.
fn cut(mut text: String, max: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
        text.push('…');
    }
    text
}

impl Lint<'_> {
    /// Checks a step's literal `in` against its agent's `input_schema`,
    /// when the agent has one. A string is the task's prompt and the task
    /// then has no input, which the engine checks as `null`; a `template`
    /// always renders a string, so it is checked the same way. Any other
    /// `in` computed at run time (`path`, `eq`, …) is not checked; a
    /// literal's value is never rendered, so a `{{ … }}` inside it is text.
    pub(super) fn step_input(&mut self, at: &str, agent: &str, input: &Expr) {
        let value = match input {
            Expr::Lit { value } => value,
            Expr::Template { .. } => &Value::String(String::new()),
            _ => return,
        };
        let Some(schema) = self.known.input_schemas.get(agent) else {
            return;
        };
        let shown = cut(schema.schema.to_string(), MAX_SCHEMA_CHARS);
        if value.is_string() {
            if let Some((_, reason)) = schema.refusals(&Value::Null).into_iter().next() {
                self.report(
                    &format!("{at}/in"),
                    "input_schema",
                    format!(
                        "a string `in` (a literal or a template) is the task's prompt, so the \
                         task has no input (checked as null), which agent `{agent}`'s \
                         input_schema refuses: {reason}"
                    ),
                    &format!(
                        "give as `in` a value, not a string, that agent `{agent}`'s input_schema \
                         accepts: {shown}"
                    ),
                );
            }
            return;
        }
        for (pointer, reason) in schema.refusals(value) {
            let place = if pointer.is_empty() { "/" } else { &pointer };
            self.report(
                &format!("{at}/in/value{pointer}"),
                "input_schema",
                format!("agent `{agent}`'s input_schema refuses the input at `{place}`: {reason}"),
                &format!("make the literal match agent `{agent}`'s input_schema: {shown}"),
            );
        }
    }
}

#[cfg(test)]
#[path = "input_tests.rs"]
mod tests;
