//! Values across the Lua boundary: JSON ↔ Lua, and a script's return value
//! as a `{value, ok}` result.

use mlua::{Lua, LuaSerdeExt, Table, Value};
use swarmd_output_store::MAX_JSON_DEPTH;

use super::agent::LuaFinal;

/// The most table entries a value converted to JSON may hold in all, counted
/// as the JSON would repeat them: a table referenced twice counts twice.
pub(super) const MAX_JSON_ELEMENTS: usize = 1 << 20;
/// The most bytes of strings a value converted to JSON may hold in all,
/// counted as the JSON would repeat them: the Lua memory limit counts a
/// string once, however many tables hold it, while the copy made here
/// holds it each time.
pub(super) const MAX_JSON_STRING_BYTES: usize = 32 << 20;

/// A Lua value as JSON. Functions, threads and userdata (other than
/// `json.null`) are refused, and so are tables nested deeper than
/// `MAX_JSON_DEPTH` (a table that contains itself is infinitely deep),
/// holding more than [`MAX_JSON_ELEMENTS`] entries, or more than
/// [`MAX_JSON_STRING_BYTES`] of strings.
pub(super) fn from_lua(lua: &Lua, value: Value) -> mlua::Result<serde_json::Value> {
    check_shape(&value)?;
    lua.from_value(value)
}

/// Walks the tables of `value` without recursion, so that the converter,
/// which recurses, only ever sees a bounded value.
fn check_shape(value: &Value) -> mlua::Result<()> {
    let mut bytes: usize = 0;
    let mut weigh = |value: &Value| -> mlua::Result<()> {
        if let Value::String(text) = value {
            bytes = bytes.saturating_add(text.as_bytes().len());
            if bytes > MAX_JSON_STRING_BYTES {
                return Err(mlua::Error::runtime(format!(
                    "the value holds more than {MAX_JSON_STRING_BYTES} bytes of strings"
                )));
            }
        }
        Ok(())
    };
    weigh(value)?;
    let Value::Table(table) = value else {
        return Ok(());
    };
    let mut pending: Vec<(Table, usize)> = vec![(table.clone(), 1)];
    let mut elements: usize = 0;
    while let Some((table, depth)) = pending.pop() {
        for pair in table.pairs::<Value, Value>() {
            let (key, entry) = pair?;
            elements += 1;
            if elements > MAX_JSON_ELEMENTS {
                return Err(mlua::Error::runtime(format!(
                    "the value holds more than {MAX_JSON_ELEMENTS} elements"
                )));
            }
            weigh(&key)?;
            weigh(&entry)?;
            let Value::Table(inner) = entry else {
                continue;
            };
            if depth >= MAX_JSON_DEPTH {
                return Err(mlua::Error::runtime(format!(
                    "the value nests tables deeper than {MAX_JSON_DEPTH} levels \
                     (a table that contains itself never ends)"
                )));
            }
            pending.push((inner, depth + 1));
        }
    }
    Ok(())
}

/// JSON as a Lua value: arrays keep their array-ness through `json.encode`,
/// `null` is `json.null`.
pub(super) fn to_lua(lua: &Lua, value: &serde_json::Value) -> mlua::Result<Value> {
    lua.to_value(value)
}

/// `{value = …, ok = …}` (only those keys, `ok` a boolean when present) is
/// unpacked; `None` for anything else.
pub(super) fn unpack(lua: &Lua, value: &Value) -> mlua::Result<Option<LuaFinal>> {
    let Value::Table(table) = value else {
        return Ok(None);
    };
    let mut has_key = false;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        match key.as_str().as_deref() {
            Some("value" | "ok") => has_key = true,
            _ => return Ok(None),
        }
    }
    if !has_key {
        return Ok(None);
    }
    let ok = match table.raw_get::<Value>("ok")? {
        Value::Nil => true,
        Value::Boolean(ok) => ok,
        _ => return Ok(None),
    };
    let value = from_lua(lua, table.raw_get::<Value>("value")?)?;
    Ok(Some(LuaFinal { value, ok }))
}

/// An agent's return value as its Final: unpacked when it is `{value, ok}`,
/// else the whole value with `ok = true` (nothing returned is `null`).
pub(super) fn to_final(lua: &Lua, value: Value) -> mlua::Result<LuaFinal> {
    if let Some(unpacked) = unpack(lua, &value)? {
        return Ok(unpacked);
    }
    Ok(LuaFinal {
        value: from_lua(lua, value)?,
        ok: true,
    })
}
