//! Lua agents: a script that is the worker. It sees the task as globals,
//! streams events through `emit_*`, and its return value is the Final.

use mlua::{Lua, Value as LuaValue};
use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::convert::{from_lua, to_final, to_lua};
use super::sandbox::{Abort, call_first, classify, new_state};
use super::{LuaError, LuaLimits, LuaPool, LuaScript};

/// What a Lua agent run sees as globals.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub prompt: String,
    pub system: Option<String>,
    pub input: Option<Value>,
}

/// A script's result: the Final's value and `ok`.
#[derive(Debug, Clone, PartialEq)]
pub struct LuaFinal {
    pub value: Value,
    pub ok: bool,
}

impl LuaPool {
    /// Runs an agent script on a Lua thread. `emit_*` calls go to `events` as
    /// they happen (waiting when the channel is full); the return value
    /// becomes the [`LuaFinal`].
    pub async fn run_agent(
        &self,
        script: &LuaScript,
        run: AgentRun,
        events: mpsc::Sender<OutputEvent>,
        cancel: CancellationToken,
    ) -> Result<LuaFinal, LuaError> {
        let limits = self.limits();
        let script = script.clone();
        self.execute(move || run_agent(&script, run, events, cancel, &limits))
            .await
    }
}

fn run_agent(
    script: &LuaScript,
    run: AgentRun,
    events: mpsc::Sender<OutputEvent>,
    cancel: CancellationToken,
    limits: &LuaLimits,
) -> Result<LuaFinal, LuaError> {
    let lua = new_state(limits, cancel)?;
    let fail = |e: mlua::Error| classify(&e, limits);
    set_globals(&lua, &run, events).map_err(fail)?;
    let returned: LuaValue = script
        .compile(&lua)
        .and_then(|f| call_first(&lua, &f, ()))
        .map_err(fail)?;
    to_final(&lua, returned).map_err(|e| match classify(&e, limits) {
        LuaError::Runtime(message) => LuaError::Value(message),
        other => other,
    })
}

fn set_globals(lua: &Lua, run: &AgentRun, events: mpsc::Sender<OutputEvent>) -> mlua::Result<()> {
    let globals = lua.globals();
    globals.set("prompt", run.prompt.as_str())?;
    globals.set("system", run.system.as_deref())?;
    let input = match &run.input {
        Some(value) => to_lua(lua, value)?,
        None => LuaValue::Nil,
    };
    globals.set("input", input)?;
    globals.set("task_id", run.task_id.as_str())?;
    globals.set("attempt", run.attempt)?;
    globals.set("agent", run.agent.as_str())?;

    let sink = events.clone();
    globals.set(
        "emit_progress",
        lua.create_function(move |_, (stage, note): (String, Option<String>)| {
            emit(&sink, OutputEvent::Progress { stage, note })
        })?,
    )?;
    let sink = events.clone();
    globals.set(
        "emit_partial",
        lua.create_function(move |lua, value: LuaValue| {
            let chunk = inline(from_lua(lua, value)?);
            emit(&sink, OutputEvent::Partial { chunk })
        })?,
    )?;
    globals.set(
        "emit_artifact",
        lua.create_function(move |lua, (name, value): (String, LuaValue)| {
            let content = inline(from_lua(lua, value)?);
            emit(&events, OutputEvent::Artifact { name, content })
        })?,
    )?;
    Ok(())
}

fn inline(value: Value) -> ContentRef {
    ContentRef::Inline { value }
}

/// Hands an event to the attempt; a closed channel means the attempt is gone,
/// which stops the run like a cancel. An event past a bound every route
/// keeps (an artifact's name, a progress stage or note) is a script error.
fn emit(sink: &mpsc::Sender<OutputEvent>, event: OutputEvent) -> mlua::Result<()> {
    if let Some(reason) = event.out_of_bounds() {
        return Err(mlua::Error::runtime(reason));
    }
    sink.blocking_send(event)
        .map_err(|_| mlua::Error::external(Abort::Cancelled))
}
