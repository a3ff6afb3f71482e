//! Values across the Lua boundary: JSON ↔ Lua, and a script's return value
//! as a `{value, ok}` result.

use mlua::{Lua, LuaSerdeExt, Value};

use super::agent::LuaFinal;

/// A Lua value as JSON. Functions, threads and userdata (other than
/// `json.null`) and recursive tables are refused.
pub(super) fn from_lua(lua: &Lua, value: Value) -> mlua::Result<serde_json::Value> {
    lua.from_value(value)
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
