//! Hostile clients: escapes (see mod.rs).
