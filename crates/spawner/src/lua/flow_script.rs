//! Flows written in Lua (docs/flows.md, Flows in Lua): a script from the
//! flows directory runs once, at load, in the agents' sandbox with the
//! helpers of `flow_prelude.lua`, and the table it returns becomes the
//! flow's IR as JSON. Nothing of it runs when the flow does.
//!
//! Tables convert by one rule, with no guessing from the contents:
//! a table whose keys are all strings is an object; one whose keys are
//! exactly `1..n` is an array; a table marked by `array(t)` (or decoded
//! from a JSON array) is an array, empty or not; an unmarked empty table is
//! an empty object. A table mixing list entries and named keys, a list with
//! a hole, a function or another non-JSON value is refused with the JSON
//! pointer of its place.

use std::time::Duration;

use mlua::{ChunkMode, Lua, LuaSerdeExt, Table, Value};
use serde_json::{Map, Number};
use swarmd_output_store::MAX_JSON_DEPTH;
use tokio_util::sync::CancellationToken;

use super::convert::MAX_JSON_ELEMENTS;
use super::sandbox::{call_first, classify, new_state};
use super::{LuaError, LuaLimits};

/// The limits of one flow script: producing a graph is small work, so a
/// script that spends more is a mistake (a loop that never ends).
pub const FLOW_SCRIPT_LIMITS: LuaLimits = LuaLimits {
    memory_limit_bytes: 16 * 1024 * 1024,
    instruction_limit: 10_000_000,
    timeout: Duration::from_secs(5),
};

/// The helpers every flow script finds: `path`, `select`, `lit`, `tmpl`,
/// `step`, `seq`, `fanout`, `branch` and `set` (and `array` from Rust).
const PRELUDE: &str = include_str!("flow_prelude.lua");

/// Runs the flow script `source` (`name` labels its errors, e.g. its file
/// name) under `limits` on a thread of its own and returns the value it
/// returns, as JSON. The result is not checked against the IR: the caller
/// parses it as a flow.
pub fn flow_ir(
    name: &str,
    source: &str,
    limits: &LuaLimits,
) -> Result<serde_json::Value, LuaError> {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("swarmd-lua-flow".into())
            .spawn_scoped(scope, || evaluate(name, source, limits))
            .map_err(LuaError::Threads)?;
        worker.join().unwrap_or(Err(LuaError::Panicked))
    })
}

fn evaluate(name: &str, source: &str, limits: &LuaLimits) -> Result<serde_json::Value, LuaError> {
    let lua = new_state(limits, CancellationToken::new())?;
    let value = run(&lua, name, source).map_err(|e| classify(&e, limits))?;
    match value {
        Value::Table(table) => {
            let mut budget = MAX_JSON_ELEMENTS;
            let mut at = Vec::new();
            table_to_json(&lua, &table, &mut at, &mut budget).map_err(LuaError::Value)
        }
        Value::Nil => Err(LuaError::Value(
            "the script returned nothing: it must `return` the flow as a table".into(),
        )),
        other => Err(LuaError::Value(format!(
            "the script returned a {}: it must `return` the flow as a table",
            other.type_name()
        ))),
    }
}

fn run(lua: &Lua, name: &str, source: &str) -> mlua::Result<Value> {
    let array = lua.create_function(|lua, table: Option<Table>| {
        let table = match table {
            Some(table) => table,
            None => lua.create_table()?,
        };
        table.set_metatable(Some(lua.array_metatable()));
        Ok(table)
    })?;
    lua.globals().set("array", array)?;
    lua.load(PRELUDE)
        .set_name("=flow helpers")
        .set_mode(ChunkMode::Text)
        .exec()?;
    let script = lua
        .load(source)
        .set_name(format!("={name}"))
        .set_mode(ChunkMode::Text)
        .into_function()?;
    call_first(lua, &script, ())
}

/// `value` as JSON; `at` is its place (for errors), `budget` the entries
/// still allowed in the whole value.
fn to_json(
    lua: &Lua,
    value: Value,
    at: &mut Vec<String>,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    match value {
        Value::Nil => Ok(serde_json::Value::Null),
        Value::LightUserData(ud) if ud.0.is_null() => Ok(serde_json::Value::Null),
        Value::Boolean(b) => Ok(serde_json::Value::Bool(b)),
        Value::Integer(i) => Ok(serde_json::Value::Number(i.into())),
        Value::Number(n) => Number::from_f64(n)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("{}: {n} is not a JSON number", pointer(at))),
        Value::String(s) => s
            .to_str()
            .map(|s| serde_json::Value::String(s.to_owned()))
            .map_err(|_| format!("{}: a string that is not UTF-8", pointer(at))),
        Value::Table(table) => table_to_json(lua, &table, at, budget),
        other => Err(format!(
            "{}: a {} is not JSON (use json.null for null)",
            pointer(at),
            other.type_name()
        )),
    }
}

fn table_to_json(
    lua: &Lua,
    table: &Table,
    at: &mut Vec<String>,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    if at.len() >= MAX_JSON_DEPTH {
        return Err(format!(
            "{}: tables nest deeper than {MAX_JSON_DEPTH} levels \
             (a table that contains itself never ends)",
            pointer(at)
        ));
    }
    let mut entries: Vec<(Value, Value)> = Vec::new();
    table
        .for_each::<Value, Value>(|key, value| {
            if *budget == 0 {
                return Err(mlua::Error::runtime("too many"));
            }
            *budget -= 1;
            entries.push((key, value));
            Ok(())
        })
        .map_err(|_| {
            format!(
                "{}: the value holds more than {MAX_JSON_ELEMENTS} entries",
                pointer(at)
            )
        })?;
    let marked = table
        .metatable()
        .is_some_and(|m| m.to_pointer() == lua.array_metatable().to_pointer());
    if entries.is_empty() {
        return Ok(if marked {
            serde_json::Value::Array(Vec::new())
        } else {
            serde_json::Value::Object(Map::new())
        });
    }
    let named = entries.iter().filter(|(k, _)| k.is_string()).count();
    if named == entries.len() {
        if marked {
            return Err(format!(
                "{}: a table marked by array() has named keys",
                pointer(at)
            ));
        }
        return object(lua, entries, at, budget);
    }
    if named > 0 {
        return Err(format!(
            "{}: a table mixes list entries and named keys",
            pointer(at)
        ));
    }
    list(lua, entries, at, budget)
}

fn object(
    lua: &Lua,
    entries: Vec<(Value, Value)>,
    at: &mut Vec<String>,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    let mut map = Map::new();
    for (key, value) in entries {
        let Value::String(key) = key else {
            return Err(format!("{}: a key that is not a string", pointer(at)));
        };
        let key = key
            .to_str()
            .map(|s| s.to_owned())
            .map_err(|_| format!("{}: a key that is not UTF-8", pointer(at)))?;
        at.push(key.clone());
        let value = to_json(lua, value, at, budget)?;
        at.pop();
        map.insert(key, value);
    }
    Ok(serde_json::Value::Object(map))
}

fn list(
    lua: &Lua,
    entries: Vec<(Value, Value)>,
    at: &mut Vec<String>,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    let mut indexed = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        match key {
            Value::Integer(i) if i >= 1 => indexed.push((i, value)),
            other => {
                return Err(format!(
                    "{}: a table with the key {} is neither a list nor an object",
                    pointer(at),
                    key_text(&other)
                ));
            }
        }
    }
    indexed.sort_by_key(|(i, _)| *i);
    let mut items = Vec::with_capacity(indexed.len());
    for (expected, (i, value)) in (1..).zip(indexed) {
        if i != expected {
            return Err(format!(
                "{}: a list with a hole at {expected} (a nil in a list: use json.null)",
                pointer(at)
            ));
        }
        at.push((expected - 1).to_string());
        items.push(to_json(lua, value, at, budget)?);
        at.pop();
    }
    Ok(serde_json::Value::Array(items))
}

fn key_text(key: &Value) -> String {
    match key {
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        other => format!("of type {}", other.type_name()),
    }
}

/// Where `at` is, for a message: its RFC 6901 pointer, or `the returned
/// table` for the whole value.
fn pointer(at: &[String]) -> String {
    if at.is_empty() {
        return "the returned table".into();
    }
    let pointer: String = at
        .iter()
        .map(|part| format!("/{}", part.replace('~', "~0").replace('/', "~1")))
        .collect();
    format!("at {pointer}")
}

#[cfg(test)]
#[path = "flow_script_tests.rs"]
mod tests;
