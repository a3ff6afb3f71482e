//! Hostile clients: forwarding (see mod.rs).
