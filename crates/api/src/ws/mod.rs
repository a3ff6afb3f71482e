//! The WebSocket protocol of MainAI sessions (docs/protocol.md, WebSocket).
//!
//! A socket is attached to an operator session (`connection`): its writer
//! drains the session's outbox — frames parked while no socket was attached
//! first, in order — and its reader decodes client frames (`frames`),
//! completes pending server requests, creates and cancels tasks through a
//! per-connection ops worker (`ops`) and runs `subscribe` streams
//! (`subscribe`, over the sessions crate's gap-free `EventFeed`). The
//! sessions crate's `EventRouter` routes engine events about a session's
//! own tasks to that session's outbox.
//!
//! Close codes: `1008` a frame over [`MAX_FRAME_BYTES`]; `4000` a newer
//! socket took over the session; `4001` the session was deleted or expired;
//! `1001` the daemon is stopping. A peer silent for three ping intervals is
//! dropped without a close frame.

mod connection;
mod ops;
mod reader;
mod subscribe;
mod upgrade;
mod writer;

#[cfg(test)]
pub(crate) mod tests;

pub use connection::serve_socket;
pub use upgrade::routes;
pub use writer::{CLOSE_REPLACED, CLOSE_SESSION_ENDED};

/// The largest client frame accepted; a larger one closes the socket with
/// `1008` (policy violation).
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// Bytes a socket read asks for at a time. tungstenite zero-fills that much
/// of its buffer before every read, so its 128 KiB default cost a 128 KiB
/// `memset` per frame read; frames are mostly well under 8 KiB, and larger
/// ones take more reads.
pub const READ_CHUNK_BYTES: usize = 8 << 10;
