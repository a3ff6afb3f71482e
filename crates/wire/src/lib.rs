//! The swarmd wire protocol as plain serde types (docs/protocol.md): the
//! WebSocket frames a MainAI session exchanges with the daemon
//! (`ServerFrame`, `ClientFrame` and their parts) and the HTTP error body
//! (`ErrorBody`).
//!
//! The field names are a compatibility contract, pinned by snapshot tests.
//! This crate only describes the bytes: it knows no transport (no axum, no
//! tokio code of its own), no session or engine internals, and makes no
//! decisions a server makes (admission bounds, internal-error reporting).
//! The ids, statuses, codes and events that frames carry are
//! `swarmd-types`', so a client reads and writes frames without linking the
//! engine.

mod client;
mod error_body;
mod server;

pub use client::{CLIENT_TYPES, ClientFrame, SpawnTaskFrame};
pub use error_body::ErrorBody;
pub use server::{ServerFrame, SpawnWorktree};

#[cfg(test)]
#[path = "frames_tests.rs"]
mod frames_tests;
