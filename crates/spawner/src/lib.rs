//! The swarmd SpawnerStack (docs/tasks.md, Layers): the middleware layers between the
//! engine and whatever runs an attempt, and the three base spawners — child
//! processes, sandboxed Lua, and delegation to a MainAI session.
//!
//! The crate implements the engine's `SpawnerResolver` as [`StackResolver`]:
//! stage 1 resolves an agent name to its base spawner from the agent registry
//! built from [`AgentSpec`]s, stage 2 links it into a stack whose order
//! [`SpawnerStack::assemble`] writes down (`audit`, `long_hold`, then hint
//! layers in the order named, then the base spawner), cached per (agent,
//! layer set). The engine runs stage 3. Layers only read and transform: an
//! override is a new Final appended to the attempt's tail, never an edit.
//!
//! Each worker owns its own resources: a process attempt owns its child's
//! process group, a Lua attempt its fresh state on the [`LuaPool`]'s threads.
//! Nothing here keeps global state: the Lua pool, the host environment, the
//! base URL and the [`operator::SessionDirectory`] of live sessions are built
//! by the server and passed in.

pub mod layers;
pub mod lua;
pub mod operator;
pub mod process;
pub mod remote;
pub mod resolver;
pub mod spawners;
pub mod stack;

#[cfg(test)]
mod testing;

pub use lua::{LuaLimits, LuaPool};
pub use process::{HostEnv, ProcessSpec};
pub use resolver::{
    AgentEntry, AgentKind, AgentSpec, ConfigError, ConfigErrors, InputSchema, LuaAgentSpec,
    LuaMiddlewareSpec, OperatorRoute, OperatorSpec, SpawnerSettings, StackResolver,
    standard_layers,
};
pub use stack::{LayerRegistry, SpawnerLayer, SpawnerStack, around_join, wrap_join};
