//! Lua middleware (`lua:<name>` layers): `before(ctx)` may reject an attempt
//! or add metadata; `after(ctx, result)` may return an override Final.

use mlua::{Function, Lua, Value as LuaValue};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::convert::{from_lua, to_lua, unpack};
use super::sandbox::{call_first, classify, message, new_state};
use super::{LuaError, LuaFinal, LuaLimits, LuaPool, LuaScript};

/// Which of the two functions a middleware script defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiddlewareHooks {
    pub before: bool,
    pub after: bool,
}

/// What `before(ctx)` decided.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeDecision {
    /// Go on, adding these keys to the attempt's metadata.
    Proceed { meta: Map<String, Value> },
    /// Do not start the attempt.
    Reject(String),
}

impl LuaPool {
    /// Runs the script's `before(ctx)`. A script without `before` proceeds;
    /// `{reject = "reason"}` or a Lua error rejects; `{meta = {...}}` adds
    /// metadata.
    pub async fn run_before(
        &self,
        script: &LuaScript,
        ctx: Value,
    ) -> Result<BeforeDecision, LuaError> {
        let limits = self.limits();
        let script = script.clone();
        self.execute(move || before(&script, &ctx, &limits)).await
    }

    /// Runs the script's `after(ctx, result)`. `nil` (or no `after`) keeps the
    /// outcome; `{value = …, ok = …}` is an override Final.
    pub async fn run_after(
        &self,
        script: &LuaScript,
        ctx: Value,
        result: Value,
    ) -> Result<Option<LuaFinal>, LuaError> {
        let limits = self.limits();
        let script = script.clone();
        self.execute(move || after(&script, &ctx, &result, &limits))
            .await
    }

    /// Checks at link time that the script defines `before` or `after`,
    /// running its top level in the sandbox on the calling thread.
    pub fn check_middleware(&self, script: &LuaScript) -> Result<MiddlewareHooks, LuaError> {
        let limits = self.limits();
        let lua = new_state(&limits, CancellationToken::new())?;
        let (before, after) = hooks(&lua, script).map_err(|e| classify(&e, &limits))?;
        let found = MiddlewareHooks {
            before: before.is_some(),
            after: after.is_some(),
        };
        if !found.before && !found.after {
            return Err(LuaError::NoHooks {
                name: script.name().to_owned(),
            });
        }
        Ok(found)
    }
}

/// Runs the script's top level and returns its `before` and `after`.
fn hooks(lua: &Lua, script: &LuaScript) -> mlua::Result<(Option<Function>, Option<Function>)> {
    script.compile(lua)?.call::<()>(())?;
    let globals = lua.globals();
    Ok((globals.get("before")?, globals.get("after")?))
}

fn before(script: &LuaScript, ctx: &Value, limits: &LuaLimits) -> Result<BeforeDecision, LuaError> {
    let lua = new_state(limits, CancellationToken::new())?;
    let proceed = || BeforeDecision::Proceed { meta: Map::new() };
    let (hook, _) = hooks(&lua, script).map_err(|e| classify(&e, limits))?;
    let Some(hook) = hook else {
        return Ok(proceed());
    };
    let returned = match to_lua(&lua, ctx).and_then(|ctx| call_first(&lua, &hook, ctx)) {
        Ok(value) => value,
        // A script error is the script's way to say no; a limit is not.
        Err(e) => match classify(&e, limits) {
            LuaError::Runtime(reason) => return Ok(BeforeDecision::Reject(reason)),
            other => return Err(other),
        },
    };
    let decision = match from_lua(&lua, returned) {
        Ok(Value::Null) => proceed(),
        Ok(Value::Object(mut fields)) => match fields.remove("reject") {
            Some(Value::String(reason)) => BeforeDecision::Reject(reason),
            Some(Value::Bool(true)) => {
                BeforeDecision::Reject(format!("rejected by {}", script.name()))
            }
            Some(Value::Bool(false) | Value::Null) | None => match fields.remove("meta") {
                Some(Value::Object(meta)) => BeforeDecision::Proceed { meta },
                None | Some(Value::Null) => proceed(),
                Some(other) => {
                    return Err(LuaError::Value(format!(
                        "before: meta must be a table, got {other}"
                    )));
                }
            },
            Some(other) => {
                return Err(LuaError::Value(format!(
                    "before: reject must be a string, got {other}"
                )));
            }
        },
        Ok(other) => {
            return Err(LuaError::Value(format!(
                "before must return nil or a table, got {other}"
            )));
        }
        Err(e) => return Err(LuaError::Value(message(&e))),
    };
    Ok(decision)
}

fn after(
    script: &LuaScript,
    ctx: &Value,
    result: &Value,
    limits: &LuaLimits,
) -> Result<Option<LuaFinal>, LuaError> {
    let lua = new_state(limits, CancellationToken::new())?;
    let fail = |e: mlua::Error| classify(&e, limits);
    let (_, hook) = hooks(&lua, script).map_err(fail)?;
    let Some(hook) = hook else {
        return Ok(None);
    };
    let returned: LuaValue =
        (|| call_first(&lua, &hook, (to_lua(&lua, ctx)?, to_lua(&lua, result)?)))()
            .map_err(fail)?;
    if returned.is_nil() {
        return Ok(None);
    }
    match unpack(&lua, &returned) {
        Ok(Some(over)) => Ok(Some(over)),
        Ok(None) => Err(LuaError::Value(
            "after must return nil or {value = …, ok = …}".to_owned(),
        )),
        Err(e) => Err(LuaError::Value(message(&e))),
    }
}
