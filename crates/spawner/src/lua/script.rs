//! A Lua script as configured by the operator: read and syntax-checked once
//! at link time, then compiled into each run's fresh state.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use mlua::{ChunkMode, Function, Lua, LuaOptions, StdLib};

use super::LuaError;

/// A checked script. Cheap to clone.
#[derive(Clone)]
pub struct LuaScript {
    name: Arc<str>,
    source: Arc<str>,
}

impl LuaScript {
    /// Reads and checks the script at `path`; `name` labels its errors.
    pub fn from_file(name: &str, path: &Path) -> Result<LuaScript, LuaError> {
        let source = std::fs::read_to_string(path).map_err(|source| LuaError::Read {
            path: path.display().to_string(),
            source,
        })?;
        LuaScript::from_source(name, &source)
    }

    /// Checks `source`: it must compile as a text chunk.
    pub fn from_source(name: &str, source: &str) -> Result<LuaScript, LuaError> {
        let script = LuaScript {
            name: Arc::from(name),
            source: Arc::from(source),
        };
        let lua = Lua::new_with(StdLib::NONE, LuaOptions::new()).map_err(|e| LuaError::Syntax {
            name: name.to_owned(),
            message: e.to_string(),
        })?;
        script.compile(&lua).map_err(|e| LuaError::Syntax {
            name: name.to_owned(),
            message: match e {
                mlua::Error::SyntaxError { message, .. } => message,
                other => other.to_string(),
            },
        })?;
        Ok(script)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The script as a function of `lua`. Binary chunks are refused.
    pub(super) fn compile(&self, lua: &Lua) -> mlua::Result<Function> {
        lua.load(&*self.source)
            .set_name(format!("={}", self.name))
            .set_mode(ChunkMode::Text)
            .into_function()
    }
}

impl fmt::Debug for LuaScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LuaScript")
            .field("name", &self.name)
            .field("bytes", &self.source.len())
            .finish()
    }
}
