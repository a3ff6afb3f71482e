//! The daemon's API surfaces over the engine and the sessions: the HTTP API
//! with its guards and error mapping (`http`), the WebSocket sockets of
//! MainAI sessions and the event router (`ws`), the dashboard's assets
//! (`http::ui`, embedded by `build.rs`), the Prometheus metrics and their
//! 15-minute history (`metrics`, `history`), the one create-task request
//! every surface reads into (`new_task`), and, on PostgreSQL, this node in
//! the cluster: registration, heartbeat, takeover and the forwarding of a
//! request to the node that holds its task (`cluster`).
//!
//! Everything a handler needs is one `AppState` (`app`). The daemon binary
//! assembles it and mounts any further routes (the MCP server) with
//! `router`, which puts the whole API under one stack of middleware.

pub mod app;
pub mod cluster;
pub mod history;
pub mod http;
pub mod metrics;
pub mod new_task;
mod router;
pub mod ws;

pub use router::router;
