//! The sandbox of one Lua run: which globals exist, the `json` helper, a
//! `pcall` that cannot swallow a limit and nests at most
//! [`MAX_PCALL_NESTING`] deep, pattern functions bounded in cost, and the
//! hook that enforces the instruction budget, the deadline and cancellation.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mlua::{
    ChunkMode, Function, HookTriggers, IntoLuaMulti, Lua, LuaOptions, LuaSerdeExt, StdLib, Value,
    VmState,
};
use tokio_util::sync::CancellationToken;

use super::convert::{from_lua, to_lua};
use super::pattern::{Kind, check};
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

/// The deepest the sandbox's `pcall` and `xpcall` nest. Lua itself stops
/// at 200 nested C calls, and each level takes one; past this bound the run
/// fails, since a script that recurses through `pcall` would otherwise
/// catch its own overflow and go on.
pub(super) const MAX_PCALL_NESTING: usize = 150;

/// The message of Lua's memory error.
const MEMORY_ERROR: &str = "not enough memory";

/// The longest text of a number a pattern function converts to a subject.
const NUMBER_TEXT_BYTES: usize = 32;

/// Where the state keeps its [`call_first`] trampoline.
const FIRST_RESULT_KEY: &str = "swarmd.first_result";

/// `pcall` and `xpcall` of the sandbox, built on the base library's
/// protected call. The callee's results are packed into one table inside
/// the protected call and unpacked in Lua, so no C function ever pushes
/// past the stack room it checked (a protected call returning more values
/// than that overflowed it). A caught error goes through `caught`, which
/// raises a limit again. `xpcall`'s handler gets the message after the
/// stack unwound, and a script's error in it is raised.
const PROTECTED_CALLS: &str = r#"
local raw_pcall, caught, too_deep, max_depth = ...
local pack, unpack, type, error = table.pack, table.unpack, type, error
local depth = 0
local function packed(f, ...)
  return pack(f(...))
end
local function protected(f, ...)
  if depth >= max_depth then too_deep() end
  depth = depth + 1
  local ok, r = raw_pcall(packed, f, ...)
  depth = depth - 1
  return ok, r
end
local function pcall(f, ...)
  local ok, r = protected(f, ...)
  if ok then return true, unpack(r, 1, r.n) end
  return false, caught(r)
end
local function xpcall(f, handler, ...)
  if type(handler) ~= "function" then
    error("bad argument #2 to 'xpcall' (function expected)", 2)
  end
  local ok, r = protected(f, ...)
  if ok then return true, unpack(r, 1, r.n) end
  return false, handler(caught(r))
end
return pcall, xpcall
"#;

/// `string.find`, `match`, `gmatch` and `gsub`, each refusing a call
/// `check` finds too costly before the library function runs (a tail call,
/// so its results never pass through Rust).
const GUARDED_PATTERNS: &str = r#"
local check, string = ...
local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub
string.find = function(s, p, init, plain)
  check("find", s, p, init, plain)
  return find(s, p, init, plain)
end
string.match = function(s, p, init)
  check("match", s, p, init)
  return match(s, p, init)
end
string.gmatch = function(s, p, init)
  check("gmatch", s, p, init)
  return gmatch(s, p, init)
end
string.gsub = function(s, p, repl, n)
  check("gsub", s, p)
  return gsub(s, p, repl, n)
end
"#;

/// The trampoline of [`call_first`].
const FIRST_RESULT: &str = "return function(f, ...) return (f(...)) end";

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
    #[error("pcall and xpcall nest at most {MAX_PCALL_NESTING} levels deep")]
    Nesting,
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
    let raw_pcall: Function = globals.get("pcall")?;
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

    let (pcall, xpcall): (Function, Function) = lua
        .load(protected_calls(lua)?)
        .set_name("=sandbox")
        .set_mode(ChunkMode::Binary)
        .call((
            raw_pcall,
            lua.create_function(caught)?,
            lua.create_function(|_, ()| -> mlua::Result<()> {
                Err(mlua::Error::external(Abort::Nesting))
            })?,
            MAX_PCALL_NESTING,
        ))?;
    globals.set("pcall", pcall)?;
    globals.set("xpcall", xpcall)?;

    lua.load(GUARDED_PATTERNS)
        .set_name("=sandbox")
        .call::<()>((lua.create_function(check_pattern)?, string))?;

    let first: Function = lua.load(FIRST_RESULT).set_name("=sandbox").eval()?;
    lua.set_named_registry_value(FIRST_RESULT_KEY, first)?;
    Ok(())
}

/// [`PROTECTED_CALLS`] compiled without debug information, so that an
/// error raised at level 1 or 2 by the protected function (`pcall(error,
/// "boom")`) carries no position inside the sandbox's own code, as it
/// carries none under Lua's own `pcall`. Compiled once per process.
fn protected_calls(lua: &Lua) -> mlua::Result<&'static [u8]> {
    static STRIPPED: OnceLock<Vec<u8>> = OnceLock::new();
    if let Some(chunk) = STRIPPED.get() {
        return Ok(chunk);
    }
    let compiled = lua
        .load(PROTECTED_CALLS)
        .set_name("=sandbox")
        .set_mode(ChunkMode::Text)
        .into_function()?
        .dump(true);
    Ok(STRIPPED.get_or_init(|| compiled))
}

/// Calls `f` and keeps its first result only. A call from Rust reads the
/// callee's results off the Lua stack without making room for them first,
/// which a function returning dozens of values would overflow; through this
/// Lua trampoline the Rust side always reads exactly one.
pub(super) fn call_first(lua: &Lua, f: &Function, args: impl IntoLuaMulti) -> mlua::Result<Value> {
    let first: Function = lua.named_registry_value(FIRST_RESULT_KEY)?;
    first.call((f, args))
}

/// What the sandbox's `pcall` makes of an error its protected call caught:
/// a limit, a cancel or a memory error is raised again (a script cannot
/// swallow them); an error raised in Rust becomes its message; any other
/// value is the script's own and is returned as it is.
fn caught(lua: &Lua, error: Value) -> mlua::Result<Value> {
    match error {
        Value::Error(e) if is_fatal(&e) => Err(*e),
        Value::Error(e) => Ok(Value::String(lua.create_string(message(&e))?)),
        // Lua's memory error reaches a protected call as this one string.
        Value::String(text) if &*text.as_bytes() == MEMORY_ERROR.as_bytes() => {
            Err(mlua::Error::MemoryError(MEMORY_ERROR.to_owned()))
        }
        other => Ok(other),
    }
}

/// Refuses a pattern call that could backtrack for too long (see
/// [`pattern`](super::pattern)). Arguments of other types are left to the
/// string function itself, which refuses them or converts a number (a few
/// bytes at most).
fn check_pattern(
    _lua: &Lua,
    (kind, subject, pattern, init, plain): (mlua::String, Value, Value, Value, Value),
) -> mlua::Result<()> {
    let Some(kind) = Kind::parse(&kind.to_str()?) else {
        return Ok(());
    };
    let subject_len = match &subject {
        Value::String(s) => s.as_bytes().len(),
        Value::Integer(_) | Value::Number(_) => NUMBER_TEXT_BYTES,
        _ => return Ok(()),
    };
    let Value::String(pattern) = pattern else {
        return Ok(());
    };
    let init = match init {
        Value::Integer(i) => Some(i),
        Value::Number(n) if n.fract() == 0.0 => Some(n as i64),
        _ => None,
    };
    let plain = !matches!(plain, Value::Nil | Value::Boolean(false));
    check(kind, subject_len, &pattern.as_bytes(), init, plain).map_err(mlua::Error::runtime)
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
        Some(Abort::Nesting) => return LuaError::Runtime(Abort::Nesting.to_string()),
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
