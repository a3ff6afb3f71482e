//! The middleware layers (docs/tasks.md, Layers), one module each: layer (config),
//! wrapper (the adapter it builds) and tests.

pub mod audit;
pub mod long_hold;
pub mod lua_middleware;
pub mod main_ai;
pub mod operator_delegate;
pub mod senior;

pub use audit::AuditLayer;
pub use long_hold::LongHoldLayer;
pub use lua_middleware::LuaMiddlewareLayer;
pub use main_ai::MainAiLayer;
pub use operator_delegate::OperatorDelegateLayer;
pub use senior::{SeniorAgentBridge, SeniorEscalationLayer, SeniorSettings};

/// Keys of the built-in hint layers; Lua middleware adds `lua:<name>`.
pub const MAIN_AI: &str = "main_ai";
pub const SENIOR_ESCALATION: &str = "senior_escalation";
pub const OPERATOR_DELEGATE: &str = "operator_delegate";
/// Prefix of Lua middleware keys.
pub const LUA_PREFIX: &str = "lua:";
