//! Hostile clients: mcp_sessions (see mod.rs).
