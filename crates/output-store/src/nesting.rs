//! The one bound on how deeply client-supplied JSON may nest, its checks, and
//! the lenient decoding of stored rows that are deeper than the decoder takes.
//!
//! Every intake (HTTP bodies, WebSocket frames, NDJSON lines of process
//! agents, Lua values) refuses a document nested deeper than
//! [`MAX_JSON_DEPTH`]. The stored records wrap a value in a few more levels,
//! which stays far inside serde_json's own recursion limit (128), so whatever
//! is accepted can be read back. The checks here are iterative: a hostile
//! document cannot exhaust the stack while it is being measured.
//!
//! Depth counts containers: a scalar is 0 deep, `[]` and `{}` are 1 deep,
//! `[[1]]` is 2 deep.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The deepest a client-supplied JSON document may nest.
pub const MAX_JSON_DEPTH: usize = 64;

/// Stored rows deeper than serde_json's recursion limit are decoded with
/// their subtrees below this depth replaced by [`PRUNED_PLACEHOLDER`].
pub const READABLE_DEPTH: usize = 100;

/// What stands in for a stored subtree too deep to decode.
pub const PRUNED_PLACEHOLDER: &str = "<unreadable: nested too deeply>";

/// How many distinct unreadable rows are logged; past this they are not,
/// so a damaged table cannot flood the log.
const MAX_LOGGED_ROWS: usize = 4096;

/// A JSON document nested deeper than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("JSON nested deeper than {limit} levels")]
pub struct DepthError {
    pub limit: usize,
}

/// Refuses JSON text nested deeper than [`MAX_JSON_DEPTH`].
///
/// The text need not be valid JSON: brackets are counted outside strings, so
/// a parser that runs afterwards never goes deeper than the bound.
///
/// # Errors
/// [`DepthError`] as soon as an opening bracket goes past the bound.
pub fn check_text_depth(text: &[u8]) -> Result<(), DepthError> {
    let limit = MAX_JSON_DEPTH;
    let mut depth = 0usize;
    let mut rest = text;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        match byte {
            b'"' => rest = after_string(rest),
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(DepthError { limit });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The text after the string whose opening quote was just read (nothing
/// when it never closes). A string's content is most of a document's
/// bytes (a prompt, a result); only its quotes and backslashes matter
/// here, so they are searched for many bytes at a time.
fn after_string(mut rest: &[u8]) -> &[u8] {
    loop {
        match memchr::memchr2(b'"', b'\\', rest) {
            None => return &[],
            Some(at) if rest[at] == b'"' => return &rest[at + 1..],
            // A backslash escapes the byte after it.
            Some(at) => rest = rest.get(at + 2..).unwrap_or_default(),
        }
    }
}

/// Refuses a JSON value nested deeper than [`MAX_JSON_DEPTH`].
///
/// # Errors
/// [`DepthError`] when the value is deeper.
pub fn check_value_depth(value: &Value) -> Result<(), DepthError> {
    let limit = MAX_JSON_DEPTH;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = stack.pop() {
        let depth = depth + 1;
        match value {
            Value::Array(_) | Value::Object(_) if depth > limit => {
                return Err(DepthError { limit });
            }
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth))),
            Value::Object(fields) => stack.extend(fields.values().map(|field| (field, depth))),
            _ => {}
        }
    }
    Ok(())
}

/// Decodes a stored JSON row. A row the decoder refuses is decoded once more
/// with its subtrees deeper than [`READABLE_DEPTH`] replaced by
/// [`PRUNED_PLACEHOLDER`], and either way the first failure of each row is
/// logged (by `table` and `row`, never with its content).
///
/// # Errors
/// The decoder's error when even the pruned row does not decode.
pub fn decode_stored<T: DeserializeOwned>(
    table: &str,
    row: &dyn std::fmt::Display,
    text: &str,
) -> Result<T, serde_json::Error> {
    let error = match serde_json::from_str(text) {
        Ok(decoded) => return Ok(decoded),
        Err(error) => error,
    };
    let pruned = prune(text, READABLE_DEPTH);
    let outcome = match &pruned {
        Cow::Owned(pruned) => serde_json::from_str(pruned),
        Cow::Borrowed(_) => Err(error),
    };
    match &outcome {
        Ok(_) => note_unreadable(table, row, "nested too deeply; deep parts replaced"),
        Err(error) => note_unreadable(table, row, &error.to_string()),
    }
    outcome
}

/// Logs an unreadable stored row once per (table, row) and process.
pub fn note_unreadable(table: &str, row: &dyn std::fmt::Display, problem: &str) {
    static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let key = format!("{table}/{row}");
    let first = {
        let mut logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
        let logged = logged.get_or_insert_with(HashSet::new);
        logged.len() < MAX_LOGGED_ROWS && logged.insert(key)
    };
    if first {
        tracing::warn!(table, %row, problem, "stored row is unreadable as written");
    }
}

/// `text` with every container that opens deeper than `max_depth` replaced
/// by the JSON string [`PRUNED_PLACEHOLDER`]; borrowed when nothing is that
/// deep. Valid JSON stays valid JSON.
pub fn prune(text: &str, max_depth: usize) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut scanner = Scanner::default();
    let mut out: Option<String> = None;
    // Start of the text not yet copied to `out`.
    let mut copied = 0;
    let mut index = 0;
    while index < bytes.len() {
        let opened = scanner.step(bytes[index]) == Some(Bracket::Open);
        if !(opened && scanner.depth > max_depth) {
            index += 1;
            continue;
        }
        let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
        // Brackets are ASCII, so both cuts are on character boundaries.
        out.push_str(&text[copied..index]);
        out.push('"');
        out.push_str(PRUNED_PLACEHOLDER);
        out.push('"');
        let outer = scanner.depth - 1;
        index += 1;
        while index < bytes.len() && scanner.depth > outer {
            scanner.step(bytes[index]);
            index += 1;
        }
        copied = index;
    }
    match out {
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

/// A bracket outside strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bracket {
    Open,
    Close,
}

/// Tracks strings and container depth over JSON text, one byte at a time.
#[derive(Debug, Default)]
struct Scanner {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Scanner {
    fn step(&mut self, byte: u8) -> Option<Bracket> {
        if self.in_string {
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return None;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                None
            }
            b'[' | b'{' => {
                self.depth += 1;
                Some(Bracket::Open)
            }
            b']' | b'}' => {
                self.depth = self.depth.saturating_sub(1);
                Some(Bracket::Close)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
