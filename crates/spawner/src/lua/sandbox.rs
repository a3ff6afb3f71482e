//! The sandbox of one Lua run: which globals exist, the `json` helper, a
//! `pcall` that cannot swallow a limit, and the hook that enforces the
//! instruction budget, the deadline and cancellation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mlua::{
    Function, HookTriggers, Lua, LuaOptions, LuaSerdeExt, MultiValue, StdLib, Value, VmState,
};
use tokio_util::sync::CancellationToken;

use super::convert::{from_lua, to_lua};
use super::{LuaError, LuaLimits};

/// Instructions between two hook calls: the budget's and the deadline's grain.
const HOOK_EVERY: u32 = 1000;
/// The longest text `json.decode` takes. Decoded values are built outside
/// the Lua memory limit, at up to about 16 bytes each for every byte of
/// text, so the text is bounded before it is parsed.
const MAX_DECODE_BYTES: usize = 8 << 20;

/// Base-library functions a script never gets: code loading, output to the
/// daemon's stdio, and GC control.
const REMOVED_GLOBALS: [&str; 9] = [
    "load",
    "loadfile",
    "dofile",
    "require",
    "print",
    "warn",
    "collectgarbage",
    "pcall",
    "xpcall",
];

/// `setmetatable`, refusing a metatable that carries `__gc`.
const GUARDED_SETMETATABLE: &str = r#"
local setmetatable, rawget, type, error = setmetatable, rawget, type, error
_G.setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("a metatable with __gc is refused: finalizers run outside the sandbox's limits", 2)
  end
  return setmetatable(t, mt)
end
"#;

/// Why the hook stopped a run. Raised as an external error so that it can be
/// told apart from script errors all the way up.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(super) enum Abort {
    #[error("instruction budget exceeded")]
    Instructions,
    #[error("deadline passed")]
    Deadline,
    #[error("cancelled")]
    Cancelled,
}

/// A fresh sandboxed state with the limits armed.
pub(super) fn new_state(limits: &LuaLimits, cancel: CancellationToken) -> Result<Lua, LuaError> {
    let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8;
    let lua =
        Lua::new_with(libs, LuaOptions::new()).map_err(|e| LuaError::Runtime(e.to_string()))?;
    install(&lua).map_err(|e| LuaError::Runtime(e.to_string()))?;
    lua.set_memory_limit(limits.memory_limit_bytes)
        .map_err(|e| LuaError::Runtime(e.to_string()))?;

    let budget = limits.instruction_limit;
    let deadline = Instant::now() + limits.timeout;
    let executed = AtomicU64::new(0);
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_lua, _debug| {
            let done = executed.fetch_add(u64::from(HOOK_EVERY), Ordering::Relaxed);
            if done >= budget {
                return Err(mlua::Error::external(Abort::Instructions));
            }
            if cancel.is_cancelled() {
                return Err(mlua::Error::external(Abort::Cancelled));
            }
            if Instant::now() >= deadline {
                return Err(mlua::Error::external(Abort::Deadline));
            }
            Ok(VmState::Continue)
        },
    );
    Ok(lua)
}

fn install(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    for name in REMOVED_GLOBALS {
        globals.raw_set(name, Value::Nil)?;
    }
    let string: mlua::Table = globals.get("string")?;
    string.raw_set("dump", Value::Nil)?;
    // A finalizer (`__gc`) runs with hooks off, when the state closes:
    // outside the instruction budget, the deadline and cancellation. Lua
    // marks a table for finalization only when its metatable is set with
    // `__gc` already in it, so refusing that here refuses every finalizer.
    lua.load(GUARDED_SETMETATABLE).set_name("=sandbox").exec()?;

    let json = lua.create_table()?;
    json.set(
        "encode",
        lua.create_function(|lua, value: Value| {
            let value = from_lua(lua, value)?;
            serde_json::to_string(&value).map_err(mlua::Error::external)
        })?,
    )?;
    json.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            let text = text.as_bytes();
            if text.len() > MAX_DECODE_BYTES {
                return Err(mlua::Error::runtime(format!(
                    "json.decode takes at most {MAX_DECODE_BYTES} bytes"
                )));
            }
            let value: serde_json::Value =
                serde_json::from_slice(&text).map_err(mlua::Error::external)?;
            to_lua(lua, &value)
        })?,
    )?;
    json.set("null", lua.null())?;
    globals.set("json", json)?;

    globals.set("pcall", lua.create_function(safe_pcall)?)?;
    globals.set("xpcall", lua.create_function(safe_xpcall)?)?;
    Ok(())
}

/// `pcall` that lets a limit or cancellation through instead of catching it.
fn safe_pcall(lua: &Lua, (f, args): (Value, MultiValue)) -> mlua::Result<MultiValue> {
    match call(f, args) {
        Ok(mut rets) => {
            rets.push_front(Value::Boolean(true));
            Ok(rets)
        }
        Err(e) if is_fatal(&e) => Err(e),
        Err(e) => Ok(MultiValue::from_vec(vec![
            Value::Boolean(false),
            Value::String(lua.create_string(message(&e))?),
        ])),
    }
}

/// `xpcall(f, handler, ...)`: like [`safe_pcall`], passing the message through `handler`.
fn safe_xpcall(
    _lua: &Lua,
    (f, handler, args): (Value, Function, MultiValue),
) -> mlua::Result<MultiValue> {
    match call(f, args) {
        Ok(mut rets) => {
            rets.push_front(Value::Boolean(true));
            Ok(rets)
        }
        Err(e) if is_fatal(&e) => Err(e),
        Err(e) => {
            let mut rets: MultiValue = handler.call(message(&e))?;
            rets.push_front(Value::Boolean(false));
            Ok(rets)
        }
    }
}

fn call(f: Value, args: MultiValue) -> mlua::Result<MultiValue> {
    match f {
        Value::Function(f) => f.call(args),
        other => Err(mlua::Error::RuntimeError(format!(
            "attempt to call a {} value",
            other.type_name()
        ))),
    }
}

/// The innermost error under callback and context wrappers.
fn root(mut e: &mlua::Error) -> &mlua::Error {
    loop {
        match e {
            mlua::Error::CallbackError { cause, .. }
            | mlua::Error::WithContext { cause, .. }
            | mlua::Error::BadArgument { cause, .. } => e = cause,
            _ => return e,
        }
    }
}

fn abort_of(e: &mlua::Error) -> Option<Abort> {
    match root(e) {
        mlua::Error::ExternalError(ext) => ext.downcast_ref::<Abort>().copied(),
        _ => None,
    }
}

fn is_fatal(e: &mlua::Error) -> bool {
    abort_of(e).is_some() || matches!(root(e), mlua::Error::MemoryError(_))
}

/// The script-facing message of an error: a Lua error's own text, without
/// the traceback that the call added.
pub(super) fn message(e: &mlua::Error) -> String {
    let text = match root(e) {
        mlua::Error::RuntimeError(msg) => msg.clone(),
        other => other.to_string(),
    };
    match text.split_once("\nstack traceback:") {
        Some((head, _)) => head.to_owned(),
        None => text,
    }
}

/// Maps an error that ended a run to the crate's error, limits first.
pub(super) fn classify(e: &mlua::Error, limits: &LuaLimits) -> LuaError {
    match abort_of(e) {
        Some(Abort::Instructions) => return LuaError::InstructionLimit(limits.instruction_limit),
        Some(Abort::Deadline) => return LuaError::TimedOut(limits.timeout),
        Some(Abort::Cancelled) => return LuaError::Cancelled,
        None => {}
    }
    match root(e) {
        mlua::Error::MemoryError(_) => LuaError::MemoryLimit {
            limit_bytes: limits.memory_limit_bytes,
        },
        mlua::Error::SyntaxError { message, .. } => LuaError::Runtime(message.clone()),
        _ => LuaError::Runtime(message(e)),
    }
}
